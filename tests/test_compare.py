"""`run_eval.py compare`, the report's table and leaderboard with speedup CIs, and the pair_time benchmark's
summary: pure functions over synthetic records (no worker, no GPU)."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from rich.console import Console

from conftest import REPO
from harness.commands import compare
from harness.results import report
from harness.results.records import Record
from harness.cli import main


def rec(problem="level1/001_linear_relu", cand="a", status="ok", speedup=1.0, ci=None, version=2, **extra):
    r = {"schema_version": version, "run_id": "r", "problem": problem, "solution": f"{problem}/{cand}",
         "status": status, "correct": status == "ok", "flags": [], "error": None if status == "ok" else "boom",
         "speedup": speedup, "device": "cuda"}     # the CI rule alone (the CPU path adds a floor: test_cpu_defaults)
    if version >= 2:
        r["speedup_ci"] = ci
    r.update(extra)
    return r


def typed(*args, **fields) -> Record:
    """rec, typed as the store gives it."""
    return Record.of(rec(*args, **fields))


# ---------------------------------------------------------------- verdicts

def test_ci_rule_is_strict_separation():
    assert compare.by_ci((1.0, 1.1), (1.11, 1.2)) == compare.FASTER
    assert compare.by_ci((1.0, 1.1), (0.8, 0.99)) == compare.SLOWER
    assert compare.by_ci((1.0, 1.1), (1.1, 1.3)) == compare.SAME         # touching intervals: no change shown
    assert compare.by_ci((1.0, 1.1), (0.5, 2.0)) == compare.SAME
    assert compare.by_ci(None, (2.0, 3.0)) == compare.SAME


def test_every_verdict_and_the_exit_code():
    p = "level1/001_linear_relu"
    a = [typed(p, "same", speedup=1.00, ci=[0.98, 1.02]), typed(p, "faster", speedup=1.0, ci=[0.99, 1.01]),
         typed(p, "slower", speedup=2.0, ci=[1.9, 2.1]), typed(p, "fixed", status="incorrect", speedup=None),
         typed(p, "broken", speedup=1.5, ci=[1.4, 1.6]), typed(p, "failing", status="timeout", speedup=None),
         typed(p, "gone", speedup=1.0, ci=[0.9, 1.1])]
    b = [typed(p, "same", speedup=1.01, ci=[1.00, 1.03]), typed(p, "faster", speedup=1.3, ci=[1.25, 1.35]),
         typed(p, "slower", speedup=1.5, ci=[1.45, 1.55]), typed(p, "fixed", speedup=1.2, ci=[1.1, 1.3]),
         typed(p, "broken", status="invalid", speedup=1.5, ci=[1.4, 1.6], flags=["interference"]),
         typed(p, "failing", status="crashed", speedup=None), typed(p, "new", speedup=1.0, ci=[0.9, 1.1])]
    rows = {r.candidate: r for r in compare.compare_runs(a, b)}
    assert {k: r.verdict for k, r in rows.items()} == {
        "same": "SAME", "faster": "FASTER", "slower": "SLOWER", "fixed": "FIXED", "broken": "BROKEN",
        "failing": "FAILING", "gone": "ONLY_A", "new": "ONLY_B"}
    assert rows["faster"].change == pytest.approx(0.3) and rows["fixed"].change is None
    assert compare.exit_code(rows.values()) == 1
    assert compare.exit_code([rows["same"], rows["faster"], rows["fixed"], rows["gone"]]) == 0
    assert compare.counts(rows.values())["SLOWER"] == 1
    assert "pairs 8" in compare.summary_line(list(rows.values()))


def test_missing_ci_uses_the_tolerance_band():
    a, b = typed(version=1, speedup=1.0), typed(version=1, speedup=1.05)          # schema 1: no speedup_ci at all
    assert compare.compare_pair(a, b, 0.02).verdict == compare.FASTER         # [0.980, 1.020] vs [1.029, 1.071]
    assert compare.compare_pair(a, b, 0.05).verdict == compare.SAME
    row = compare.compare_pair(a, typed(speedup=1.3, ci=[1.28, 1.32]), 0.02)   # v1 against v2
    assert row.a.ci_source == "tolerance" and row.b.ci_source == "record" and row.verdict == compare.FASTER
    assert compare.compare_pair(typed(ci=None), typed(ci=[0.5, 0.4])).b.ci_source == "tolerance"   # null / unsound CI


# ---------------------------------------------------------------- the command

def write_run(root, run_id, records):
    d = root / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"schema_version": 2, "run_id": run_id}))
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


@pytest.fixture
def two_runs(tmp_path):
    a = [rec(cand="x", speedup=2.0, ci=[1.9, 2.1]), rec(cand="y", speedup=1.0, ci=[0.99, 1.01])]
    b = [rec(cand="x", speedup=1.5, ci=[1.45, 1.55]), rec(cand="y", speedup=1.0, ci=[0.99, 1.01])]
    write_run(tmp_path / "results", "run-a", a)
    other = write_run(tmp_path / "elsewhere", "run-b", b)
    return tmp_path, other


def test_cli_compare_table_json_and_run_folders(two_runs, capsys):
    tmp, run_b_dir = two_runs
    out_dir = str(tmp / "results")
    assert main(["compare", "run-a", str(run_b_dir), "--output-dir", out_dir]) == 1       # x got slower
    out = capsys.readouterr().out
    assert "SLOWER" in out and "SAME" in out and "2.00x [1.90, 2.10]" in out and "-25.0%" in out
    assert "SLOWER 1" in out
    assert main(["compare", "run-a", "run-a", "--output-dir", out_dir]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp / "results" / "run-a"), str(run_b_dir / "results.jsonl"), "--json"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["solution"].rsplit("/", 1)[-1], d["verdict"]) for d in lines] == [("x", "SLOWER"), ("y", "SAME")]
    assert lines[0]["a"]["ci"] == [1.9, 2.1] and lines[0]["change"] == pytest.approx(-0.25)


def test_min_change_keeps_small_changes_out_of_the_verdicts():
    a = typed(speedup=1.323, ci=[1.317, 1.328])
    b = typed(speedup=1.305, ci=[1.295, 1.314])            # -1.4%, CIs apart: two machines, the same code
    assert compare.compare_pair(a, b).verdict == compare.SLOWER
    assert compare.compare_pair(a, b, min_change=0.03).verdict == compare.SAME
    worse = typed(speedup=1.25, ci=[1.24, 1.26])           # -5.5%
    assert compare.compare_pair(a, worse, min_change=0.03).verdict == compare.SLOWER
    assert compare.compare_pair(a, typed(speedup=1.40, ci=[1.39, 1.41]), min_change=0.03).verdict == compare.FASTER


def _gpu_run(records_floor, uuid):
    meta = {"gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": uuid}] if uuid else [{"index": 0}]}
    records = [compare.Record.of(rec(gpu={"index": 0}, device="cuda", timing={"timer_floor_ms": f}), "test")
               for f in records_floor]
    return compare.machine_of(meta, records)


def test_machine_notes_say_when_the_runs_machines_differ_or_cannot_be_told_apart():
    same = _gpu_run([0.0050, 0.0052], "GPU-a")
    assert compare.machine_notes(same, _gpu_run([0.0051], "GPU-a")) == []
    notes = compare.machine_notes(same, _gpu_run([0.0084, 0.0090], "GPU-b"))
    assert notes == ["A and B ran on different GPUs (GPU-a and GPU-b)"]
    # one H200 machine, two runs: its processes read a timer floor of about 6 or about 11 us; the uuids decide
    one_machine = _gpu_run([0.0064, 0.0107, 0.0092], "GPU-a"), _gpu_run([0.0064, 0.0059], "GPU-a")
    assert compare.machine_notes(*one_machine) == []
    assert compare.machine_notes(same, _gpu_run([0.0051], None)) == [
        "cannot tell whether A and B ran on the same GPUs (a run.json without GPU uuids)"]
    assert compare.machine_notes(same, _gpu_run([0.0084, 0.0090], None)) == [
        "cannot tell whether A and B ran on the same GPUs (a run.json without GPU uuids)",
        "the hosts may differ: timer floor 5.1 us in A, 8.7 us in B"]
    dask = compare.machine_of({"gpus": [{"index": 0, "uuid": "GPU-a"}], "config": {"executor": "dask"}},
                              [compare.Record.of(rec(gpu={"index": 0}, device="cuda"), "test")])
    assert dask.gpu_uuids is None                        # run.json lists the client's GPUs, not the workers'
    cpu = compare.machine_of({"gpus": []}, [compare.Record.of(rec(timing={"timer_floor_ms": 0.0002}, device="cpu"),
                                                              "test")])
    assert compare.machine_notes(cpu, cpu) == []          # CPU runs: no GPU to tell apart, the same host speed
    slow_host = compare.machine_of({}, [compare.Record.of(rec(timing={"timer_floor_ms": 0.0004}), "test")])
    assert compare.machine_notes(cpu, slow_host) == ["the hosts may differ: timer floor 0.2 us in A, 0.4 us in B"]
    assert "--min-change 0.03" in compare.machine_hint(0.0) and "within 3.0% read SAME" in compare.machine_hint(0.03)


def test_cli_compare_names_different_machines_and_takes_min_change(tmp_path, capsys):
    def run(run_id, uuid, floor, speedup, ci):
        d = write_run(tmp_path, run_id, [rec(cand="x", speedup=speedup, ci=ci, gpu={"index": 0}, device="cuda",
                                             timing={"timer_floor_ms": floor})])
        (d / "run.json").write_text(json.dumps({"schema_version": 2, "run_id": run_id,
                                                "gpus": [{"index": 0, "uuid": uuid}]}))
        return str(d)
    a, b = run("a", "GPU-1", 0.005, 1.323, [1.317, 1.328]), run("b", "GPU-2", 0.005, 1.305, [1.295, 1.314])
    assert main(["compare", a, b]) == 1
    out = capsys.readouterr().out
    assert "A and B ran on different GPUs (GPU-1 and GPU-2)" in out and "--min-change 0.03 keeps" in out
    assert main(["compare", a, b, "--min-change", "0.03"]) == 0
    assert "changes within 3.0% read SAME" in capsys.readouterr().out
    assert main(["compare", a, run("c", "GPU-1", 0.005, 1.30, [1.29, 1.31]), "--json"]) == 1
    assert "different GPUs" not in capsys.readouterr().err
    assert main(["compare", a, b, "--min-change", "2"]) == 2
    capsys.readouterr()
    old = str(write_run(tmp_path, "old", [rec(cand="x", speedup=1.323, ci=[1.317, 1.328], gpu={"index": 0},
                                              device="cuda", timing={"timer_floor_ms": 0.005})]))   # no uuids
    assert main(["compare", a, old]) == 0 and "cannot tell" in capsys.readouterr().out
    assert main(["compare", old, old]) == 0 and "cannot tell" not in capsys.readouterr().out   # a run and itself


def test_cli_compare_unknown_run_is_a_one_line_usage_error(two_runs, capsys):
    tmp, _ = two_runs
    assert main(["compare", "run-a", "no-such-run", "--output-dir", str(tmp / "results")]) == 2
    err = capsys.readouterr().err
    assert "unknown run 'no-such-run'" in err and len(err.strip().splitlines()) == 1
    assert main(["compare", "run-a"]) == 2                                      # argparse: missing RUN_B


def test_compare_table_compact_keeps_one_line_per_pair():
    rows = compare.compare_runs([typed(f"level1/{i:03d}_a_rather_long_problem_name_here", f"cand_{i:02d}_long",
                                     speedup=1.0, ci=[0.9, 1.1]) for i in range(12)],
                                [typed(f"level1/{i:03d}_a_rather_long_problem_name_here", f"cand_{i:02d}_long",
                                     speedup=1.5, ci=[1.4, 1.6]) for i in range(12)])
    console = Console(record=True, width=80)
    console.print(compare.table(rows, "compare", width=80))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert sum("FASTER" in line for line in lines) == 12 and len(lines) <= 12 + 4


# ---------------------------------------------------------------- the report

STATUSES = ["ok", "incorrect", "compile_error", "runtime_error", "timeout", "invalid", "ok", "ok"]


def synthetic(n=39):
    records = []
    for i in range(n):
        status = STATUSES[i % len(STATUSES)]
        s = 0.5 + 0.37 * i if status in ("ok", "invalid") else None
        records.append(typed(f"kernelbench-level{1 + i % 3}/{i:03d}_conv_transpose3d_batchnorm_gelu_quite_long_name",
                           f"c{i:02d}_candidate_with_a_long_name", status=status, speedup=s,
                           ci=[s * 0.98, s * 1.02] if s and i % 4 else None,
                           speedup_vs_compile=s * 0.8 if s else None,
                           speedup_vs_compile_ci=[s * 0.78, s * 0.82] if s else None,
                           flags=["noisy"] if i % 5 == 0 else [],
                           error=None if status == "ok" else "RuntimeError: went wrong in the kernel " * 4,
                           correctness={"max_abs_err": 1e-5},
                           timing={"mode": "cold", "rounds": 10, "reference": {"median_ms": 1.234},
                                   "candidate": {"median_ms": 0.9}}))
    return records


def render(records, width):
    console = Console(record=True, width=width)
    console.print(report.table(records, "run X", width=width))
    return console.export_text()


def test_narrow_table_is_one_line_per_record():
    records = synthetic()
    lines = render(records, 80).splitlines()
    assert all(len(line) <= 80 for line in lines)
    for i in range(len(records)):
        assert sum(f"c{i:02d}_" in line for line in lines) == 1, i
    assert len(lines) <= len(records) + 4                    # title, header, rule: no row took a second line
    header = next(line for line in lines if "problem" in line)
    assert "max err" not in header and "ref ms" not in header and "speedup" in header and "flags" in header
    assert "noisy" in "\n".join(lines) and "\u2026" in lines[3]          # names cut with an ellipsis


def test_wide_table_keeps_todays_columns_and_shows_cis():
    text = render(synthetic(), 200)
    header = text.splitlines()[2]
    for column in ("problem", "candidate", "status", "max err", "ref ms", "cand ms", "speedup", "vs compile",
                   "flags", "error"):
        assert column in header, column
    assert "2.72x [2.67, 2.77]" in text and "0.50x " in text        # record 0 has no CI: the bare speedup
    assert "noisy" in text
    assert "vs compile" not in render([typed(speedup=1.2, ci=[1.1, 1.3])], 200)      # no compile baselines


def test_v1_records_render_without_ci_and_leaderboard_shows_ci_compile_and_flags():
    assert "1.23x" in render([typed(version=1, speedup=1.23)], 80)
    board = report.leaderboard([typed(cand="a", speedup=1.2, ci=[1.18, 1.22], speedup_vs_compile=0.9,
                                    speedup_vs_compile_ci=[0.88, 0.92], flags=["noisy"]),
                                typed(cand="b", speedup=1.1, ci=[1.0, 1.2]),
                                typed("level1/002_other", "c", status="incorrect", speedup=None)], "r")
    assert "| level1/001_linear_relu | a | 1.20x [1.18, 1.22] | 0.90x [0.88, 0.92] | - | - | noisy |" in board
    assert "| level1/002_other | (no correct candidate) |" in board
    assert report.aggregate([typed(speedup=2.0, ci=[1.9, 2.1]), typed(speedup=0.5)])["geomean_speedup"] == 1.0


def test_abbreviate_problem_keeps_number_and_distinctive_end():
    """An id is cut in its middle: its number and the end of its name tell problems apart (issue 47)."""
    assert report.abbreviate_problem("level1/001_x", 40) == "level1/001_x"
    short = report.abbreviate_problem("level1/023_conv_transpose3d_batchnorm", 16)
    assert short.startswith("023_") and short.endswith("batchnorm") and "\u2026" in short and len(short) == 16
    wider = report.abbreviate_problem("level1/023_conv_transpose3d_batchnorm", 26)
    assert wider.startswith("level1/023_") and wider.endswith("_batchnorm") and len(wider) == 26
    assert len(report.abbreviate_problem("kernelbench-level2/023_conv_transpose3d", 20)) == 20


# ---------------------------------------------------------------- benchmarks/pair_time.py

def test_pair_time_summarizes_records():
    spec = importlib.util.spec_from_file_location("pair_time", REPO / "benchmarks" / "pair_time.py")
    pair_time = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pair_time)
    records = [rec(cand="a", build={"seconds": 4.0, "cached": False},
                   worker={"phases": {"start": 0.5, "trials": 1.0, "timing": 2.0, "checks": 0.5,
                                      "baseline_before": 0.1, "baseline_after": 0.1, "total": 4.5}},
                   timing={"reference": {"samples_ms": [500.0, 500.0]}, "candidate": {"samples_ms": [250.0]}}),
               rec(cand="b", status="compile_error", speedup=None, build={"seconds": 2.0, "cached": False},
                   worker=None, timing=None)]
    cold = pair_time.summarize(records, wall_s=10.0, cold=True)
    assert cold["pairs"] == 2 and cold["build_s"] == 3.0 and cold["pairs_with_phases"] == 1
    assert cold["phases"]["timing"] == 2.0 and cold["phases"]["baseline"] == pytest.approx(0.2)
    assert cold["phases"]["other"] == pytest.approx(0.3)
    assert cold["in_samples_s"] == 1.25 and cold["overhead_per_pair_s"] == pytest.approx((10.0 - 1.25) / 2)
    assert cold["untimed"] == [pytest.approx(2.5)]                # issue 29's figure: total - timing + ref setup
    old = pair_time.summarize([rec(worker={"exit_code": 0})], wall_s=1.0, cold=False)     # before phases existed
    assert old["build_s"] is None and old["phases"]["start"] is None
    lines = pair_time.format_rows([("cold", cold), ("warm", old)])
    assert len(lines) == 4 and " - " in lines[3]
    # --processes 2: the record's worker.phases and samples are the first process pair's; the split sums both pairs
    first = {"reference_setup": 8.0, "trials": 7.0, "timing": 5.0, "baseline_before": 0.2, "total": 13.0}
    second = {"reference_setup": 9.0, "trials": 8.0, "timing": 15.0, "baseline_after": 0.3, "total": 24.0}
    two = rec(cand="c", worker={"phases": first},
              timing={"rounds": 40, "reference": {"samples_ms": [1000.0]}, "candidate": {"samples_ms": [1000.0]},
                      "processes": [{"rounds": 10, "phases": first}, {"rounds": 30, "phases": second}]})
    summed = pair_time.summarize([two], wall_s=50.0, cold=False)
    assert summed["phases"]["reference_setup"] == 17.0 and summed["phases"]["trials"] == 15.0
    assert summed["phases"]["timing"] == 20.0 and summed["phases"]["total"] == 37.0
    assert summed["phases"]["baseline"] == pytest.approx(0.5)
    assert summed["in_samples_s"] == pytest.approx(8.0)       # 2 s in the first pair's 10 rounds, of 40 rounds
    assert summed["untimed"] == [pytest.approx(37.0 - 20.0 + 17.0)]
    cut = pair_time.summarize([two], wall_s=None, cold=False)   # a run cut short: no wall, the parts still
    assert cut["overhead_per_pair_s"] is None and cut["untimed"] == summed["untimed"]
    # a pair measured twice: its first try's phases (retried.first_try_phases) count too
    again = {"trials": 1.0, "timing": 3.0, "total": 4.0}
    retried = rec(cand="d", worker={"phases": again}, retried={"reason": "interference", "first_try": "+7%",
                                                               "first_try_phases": first})
    both = pair_time.summarize([retried], wall_s=None, cold=False)
    assert both["phases"]["trials"] == 8.0 and both["untimed"] == [pytest.approx(17.0 - 8.0 + 8.0)]
    assert pair_time.summarize([rec(cand="e", worker={"phases": again}, retried={"reason": "interference"})],
                               wall_s=None, cold=False)["untimed"] == [pytest.approx(1.0)]   # older records
    lines = pair_time.format_rows([("a", cold), ("b", cut)], pooled=True)
    assert lines[-1].startswith("untimed over every run: 18.25 s a pair (median 18.25 s, 2 pairs, "
                                "1 at most 3 s)"), lines[-1]


def test_memory_benchmark_tables_runs_already_made(tmp_path):
    """benchmarks/memory.py --from: one row per pair (the latest run's), each side's peak and retries against the
    eager peak, and the summary the issue's table needs."""
    spec = importlib.util.spec_from_file_location("memory_bench", REPO / "benchmarks" / "memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    gib = 1 << 30

    def memory_rec(problem, ref, cand, run_id, arena=0):
        return json.dumps(rec(problem, "aa_reference", run_id=run_id, worker={"memory": {
            "eager_peak_bytes": 2 * gib, "reference_peak_bytes": ref, "candidate_peak_bytes": cand,
            "reference_alloc_retries": 1, "candidate_alloc_retries": 0, "reference_share_bytes": 8 * gib,
            "candidate_share_bytes": 8 * gib, "fp64": "run", "arena_bytes": arena}}))
    for run_id, lines in (("20261126-000000-aaaa", [memory_rec("level1/001_p", 3 * gib, 2 * gib, "a"),
                                                    memory_rec("level1/002_p", 4 * gib, 3 * gib, "a"),
                                                    memory_rec("level1/003_p", 6 * gib, 1 * gib, "a", gib)]),
                          ("20261126-000100-bbbb", [memory_rec("level1/002_p", 6 * gib, 2 * gib, "b")])):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "results.jsonl").write_text("\n".join(lines) + "\n")
    records = bench.from_runs([tmp_path / "20261126-000100-bbbb", tmp_path / "20261126-000000-aaaa"])
    assert [r["problem"] for r in records] == ["level1/001_p", "level1/002_p", "level1/003_p"]
    assert bench.row(records[1])[2:9] == ["2.00", "6.00", "2.00", "8.00", "8.00", "1.45", "1/0"]   # the later run's
    # 003: the reference's 6 GiB holds a 1 GiB arena (staged), the candidate's inputs: 5 and 2 GiB once moved
    assert bench.summary(records) == [
        "target: both peaks together <= 2 x eager peak + 1.5 GiB; 1 of 3 measured pairs within it",
        "each side <= 2 x eager peak + 1.5 GiB (issue 44): 1 of 3; with the staged path's arena (the candidate's "
        "inputs) on the candidate's side: 2 of 3",
        "  over: level1/002_p: reference 6.00 > 5.50 GiB (arena 0.00)",
        "  over: level1/003_p: reference 6.00 > 5.50 GiB (arena 1.00)",
        "a candidate's peak at most its eager peak + 0.00 GiB (level1/002_p); the largest pair 8.00 GiB "
        "(level1/002_p)"]
    assert bench.table([bench.row(r) for r in records], markdown=True)[2].startswith("| level1/001_p | ok | 2.00 |")


def test_memory_benchmark_counts_the_measured_arena_on_the_candidates_side():
    """benchmarks/memory.py's issue 44 reading: a record with `arena_peak_bytes` has the reference's allocator peak
    alone, so the measured arena is only added to the candidate's; an older record's reference peak includes the
    planned `arena_bytes`, which moves from the reference's side to the candidate's."""
    spec = importlib.util.spec_from_file_location("memory_bench", REPO / "benchmarks" / "memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    gib = 1 << 30
    figures = {"eager_peak_bytes": 2 * gib, "reference_peak_bytes": 6 * gib, "candidate_peak_bytes": 3 * gib,
               "arena_bytes": gib}                                         # target: 5.5 GiB a side
    new = {"problem": "level1/004_p", "worker": {"memory": {**figures, "arena_peak_bytes": gib}}}
    old = {"problem": "level1/004_p", "worker": {"memory": figures}}
    assert bench._each_side(new) == (False, False)                         # max(6, 3 + 1)
    assert bench._each_side(old) == (False, True)                          # max(6 - 1, 3 + 1)
    assert bench._over(new) == "level1/004_p: reference 6.00 > 5.50 GiB (arena 1.00)"
    none_held = {"problem": "p", "worker": {"memory": {**figures, "reference_peak_bytes": 5 * gib,
                                                       "candidate_peak_bytes": 5 * gib, "arena_peak_bytes": 0}}}
    assert bench._each_side(none_held) == (True, True)                     # the measured 0, not the planned 1 GiB


# ---------------------------------------------------------------- scripts/calibration_table.py

def _script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module             # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _calibration_table():
    return _script("calibration_table")


def _aa_run(root, run_id, readings):
    """A calibrate run folder: one A/A record per (problem number, speedup, ci)."""
    lines = []
    for n, s, ci in readings:
        problem = f"level1/{n:03d}_p"
        lines.append(json.dumps(rec(problem, "aa_reference", speedup=s, ci=ci, run_id=run_id,
                                    timing={"rounds": 30, "mode": "cold",
                                            "processes": [{"speedup": s * 0.999}, {"speedup": s * 1.001}]})))
    (root / run_id).mkdir()
    (root / run_id / "results.jsonl").write_text("\n".join(lines) + "\n")
    return str(root / run_id)


def test_calibration_table_puts_one_pass_together_from_several_runs(tmp_path, capsys):
    table = _calibration_table()
    good = [(n, 1.001, [0.995, 1.007]) for n in range(1, 20)]
    first = _aa_run(tmp_path, "20261125-000000-aaaa", good + [(20, 1.02, [1.01, 1.03])])
    later = _aa_run(tmp_path, "20261125-000100-bbbb", [(20, 1.003, [0.99, 1.016])])    # 020 measured again
    assert table.main([later, first, "--tree", "abc1234"]) == 0          # the later run id wins, in any order
    out = capsys.readouterr().out
    assert "| level1/020_p | abc1234 | 1.0030 | [0.9900, 1.0160] | 1.0020, 1.0040 | 30 | ok |" in out
    assert "20 problems: 20 within" in out and "criteria (>= 95% within, 1.0 inside every CI): hold" in out
    readings = table.readings([first], 0.005)
    assert table.summary(readings, 0.005)[-2].endswith("do not hold")   # 1.0 outside 020's CI
    assert table.summary(readings, 0.005)[-1] == "issue 44's criterion (>= 80% within): holds"    # 19 of 20
    one_wide = table.readings([_aa_run(tmp_path, "20261125-000200-cccc", good + [(20, 1.007, [0.99, 1.02])])], 0.005)
    assert "19 within" in table.summary(one_wide, 0.005)[0] and table.summary(one_wide, 0.005)[-2].endswith(" hold")
    wide = [(n, 1.001 if n > 5 else 1.008, [0.99, 1.02]) for n in range(1, 21)]     # 15 of 20 within: 75%
    few = table.readings([_aa_run(tmp_path, "20261125-000300-dddd", wide)], 0.005)
    assert table.summary(few, 0.005)[-1] == "issue 44's criterion (>= 80% within): does not hold"
    apart = table.against(table.readings([later], 0.005), readings)
    assert apart[0].startswith("against the earlier pass: 0 of 1") and "1.0200 [1.0100, 1.0300] then 1.0030" in apart[1]
    assert table.main([str(tmp_path / "missing")]) == 2


def test_calibration_table_says_how_much_of_the_scatter_more_rounds_cannot_remove(tmp_path):
    """Readings 0.4% either side of 1.0 whose rounds' own CIs are +/-0.3%: most of the scatter is the process
    pairs' own bias, 60% of readings fall within 0.5%, and 95% would take 8 process pairs a reading."""
    table = _calibration_table()
    lines = []
    for n in range(1, 21):
        s = 1.004 if n % 2 else 0.996
        lines.append(json.dumps(rec(f"level1/{n:03d}_p", "aa_reference", speedup=s, ci=[s - 0.012, s + 0.012],
                                    run_id="20261126-000000-dddd",
                                    timing={"rounds": 20, "mode": "cold", "speedup_ci_rounds": [s - 0.003 * s,
                                                                                                s + 0.003 * s]})))
    (tmp_path / "20261126-000000-dddd").mkdir()
    (tmp_path / "20261126-000000-dddd" / "results.jsonl").write_text("\n".join(lines) + "\n")
    line = table.spread(table.readings([str(tmp_path / "20261126-000000-dddd")], 0.005), 0.005)[0]
    assert "standard error 0.15%; readings around 1.0 0.59%" in line, line
    assert "between process pairs 0.57%" in line and "puts 60% within +/-0.5%" in line, line
    assert line.endswith("95% within it takes 8 process pair(s) a reading"), line


# ---------------------------------------------------------------- scripts/candidate_table.py

def _suite_run(root, run_id, pairs):
    """A suite run folder: one record per (problem number, candidate, speedup, ci, vs compile, its ci)."""
    lines = [json.dumps(rec(f"level1/{n:03d}_p", cand, speedup=s, ci=ci, run_id=run_id, speedup_vs_compile=c,
                            speedup_vs_compile_ci=cc, timing={"rounds": 40}))
             for n, cand, s, ci, c, cc in pairs]
    (root / run_id).mkdir()
    (root / run_id / "results.jsonl").write_text("\n".join(lines) + "\n")
    return str(root / run_id)


def test_candidate_table_joins_a_suite_run_and_checks_two_runs_against_each_other(tmp_path, capsys):
    table = _script("candidate_table")
    level = _suite_run(tmp_path, "20261125-000000-aaaa", [(1, "k", 1.50, [1.49, 1.51], 1.20, [1.19, 1.21]),
                                                          (2, "k", 2.00, [1.98, 2.02], None, None)])
    cut = _suite_run(tmp_path, "20261125-000100-bbbb", [(3, "k", 0.90, [0.89, 0.91], 1.00, [0.99, 1.01])])
    assert table.main([cut, level]) == 0
    out = capsys.readouterr().out
    assert "| level1/001_p | k | ok | 1.500 [1.490, 1.510] | 1.200 [1.190, 1.210] | 40 | - |" in out
    assert "| level1/002_p | k | ok | 2.000 [1.980, 2.020] | - | 40 | - |" in out and "3 pairs, 3 ok" in out
    again = _suite_run(tmp_path, "20261126-000000-cccc", [(1, "k", 1.505, [1.495, 1.515], 1.25, [1.24, 1.26]),
                                                          (2, "k", 2.05, [2.03, 2.07], None, None)])
    assert table.main([again, "--against", level, cut]) == 0
    out = capsys.readouterr().out
    assert "| level1/001_p | k | 1.500 [1.490, 1.510] | 1.505 [1.495, 1.515] | +0.3% | yes | " in out
    assert "| 1.200 [1.190, 1.210] | 1.250 [1.240, 1.260] | no |" in out          # vs compile moved 4%
    # z = log(2.05 / 2.0) / (hypot(log(2.02 / 1.98) / 2, log(2.07 / 2.03) / 2) / 1.96) = 0.02469 / 0.00713
    assert ("| level1/002_p | k | 2.000 [1.980, 2.020] | 2.050 [2.030, 2.070] | +2.5% | no | +3.5 | - | - | - | - |"
            in out)
    assert "| 1.200 [1.190, 1.210] | 1.250 [1.240, 1.260] | no | +6.9 |" in out
    assert ("vs eager: 1 of 2 inside each other's CIs (1.7 expected if the CIs are exact), 1 apart beyond their "
            "combined CI (|z| > 1.96; 0.1 expected by chance), 0 without a reading") in out
    assert "vs torch.compile: 0 of 1 inside each other's CIs (0.8 expected" in out and "1 without a reading" in out
    assert "2 pairs ok in both runs" in out and "in one run only: 1 pairs" in out
    assert table.main([str(tmp_path / "missing")]) == 2


def test_agreement_judges_two_runs_by_the_difference_and_knows_what_exact_cis_give():
    from harness.commands.compare import agreement, inside_each_other
    assert inside_each_other(1.0, (0.99, 1.01), 1.011, (1.0, 1.02)) is False        # one way is not enough
    same = agreement(1.0, (0.98, 1.0 / 0.98), 1.0, (0.98, 1.0 / 0.98))
    assert same.inside and same.z == 0 and not same.apart
    assert abs(same.p_inside - 0.834) < 0.001       # equal widths: P(|Z| < 1.96 / sqrt(2)), not 95%
    narrow = agreement(1.0, (0.999, 1.001), 1.0, (0.9, 1 / 0.9))
    assert narrow.p_inside < 0.02                   # a CI far narrower than the other's rarely holds its reading
    moved = agreement(1.0, (0.99, 1 / 0.99), 0.97, (0.96, 0.98))
    assert not moved.inside and moved.apart and moved.z < -1.96
    near = agreement(1.0, (0.99, 1 / 0.99), 1.011, (1.0, 1.022))
    assert not near.inside and not near.apart       # outside one CI, yet well within the difference's own CI
    assert agreement(None, None, 1.0, (0.9, 1.1)) is None and agreement(1.0, (0.9, 1.1), 1.0, None) is None
    assert agreement(1.0, (0.0, 1.1), 1.0, (0.9, 1.1)) is None
    flat = agreement(1.0, (1.0, 1.0), 1.0, (1.0, 1.0))
    assert flat.z == 0 and flat.p_inside == 1.0
