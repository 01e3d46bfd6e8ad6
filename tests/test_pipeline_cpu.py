"""The whole pipeline on the CPU, for real: real C++ extension builds, real worker processes, real timing.

One run over the fixture tree (one candidate per failure mode: conftest's tree_run) is shared by the tests that read
its records."""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.core.discover import Candidate
from harness.run.build import may_build_extensions

from conftest import (FIXTURES, json_records, PAIR_TIMEOUT, PAIR_TIMEOUT_ARG, REPO, run_cli, run_dirs,
                      SAMPLES_PER_ROUND, verdict, write_config)


@pytest.fixture(scope="module")
def first_run(tree_run):
    return tree_run


def test_every_pair_has_exactly_one_record(first_run):
    tmp, _, records, _ = first_run
    (run_dir,) = run_dirs(tmp)
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    keys = [(json.loads(l)["problem"], json.loads(l)["solution"]) for l in lines]
    assert len(keys) == len(set(keys)) == 13
    assert set(records) == {"correct_cpp", "incorrect", "compile_error", "syntax_error", "no_modelnew", "raises",
                            "segfault", "exit_fake_record", "hang", "nan_output", "wrong_shape", "cuda_only",
                            "identity"}


@pytest.mark.parametrize("candidate, status, words", [
    ("correct_cpp", "ok", None),
    ("incorrect", "incorrect", "out of tolerance"),
    ("compile_error", "compile_error", "undefined_symbol_here.h: No such file or directory"),
    ("syntax_error", "load_error", "syntax error"),
    ("no_modelnew", "load_error", "no ModelNew"),
    ("raises", "runtime_error", "invalid configuration argument"),
    ("segfault", "crashed", "SIGSEGV"),
    ("exit_fake_record", "crashed", "exited with code 0 before reporting"),
    ("hang", "timeout", f"timeout of {PAIR_TIMEOUT} s"),
    ("nan_output", "incorrect", "NaN"),
    ("wrong_shape", "incorrect", "shape (64, 79) != expected (64, 80)"),
    ("cuda_only", "skipped", "CUDA sources"),
    ("identity", "load_error", "no get_inputs"),
])
def test_status_and_message(first_run, candidate, status, words):
    record = first_run[2][candidate]
    assert verdict(record) == status, record["error"]
    assert record["correct"] is (record["status"] == "ok")
    if words is None:                   # `noisy`: the CI stopped short of its target, as a loaded box makes it
        assert record["error"] is None and [f for f in record["flags"] if f != "noisy"] == []
    else:
        assert words in record["error"]
        assert "\n" not in record["error"]


def test_correct_record_has_correctness_and_timing_details(first_run):
    record = first_run[2]["correct_cpp"]
    c = record["correctness"]
    assert c["trials"] == 3 and c["trials_passed"] == 3
    assert c["param_match"] == "state_dict" and c["module_mode"] == "train"
    assert c["max_abs_err"] <= c["atol"] + 10 * c["rtol"]
    timing = record["timing"]
    rounds = timing["rounds"]              # at least min_rounds; more when this machine is too noisy to stop there
    assert rounds >= 6 and len(timing["round_ratios"]) == rounds
    for side in ("reference", "candidate"):
        stats = record["timing"][side]
        assert stats["n"] == len(stats["samples_ms"]) == rounds * SAMPLES_PER_ROUND
        assert 0 < stats["min_ms"] <= stats["median_ms"] <= stats["max_ms"]
        assert stats["iqr_ms"] >= 0 and stats["stdev_ms"] >= 0
    assert record["timing"]["clock"] == "host"
    lo, hi = record["speedup_ci"]
    assert lo <= record["speedup"] <= hi
    assert record["speedup"] == pytest.approx(statistics.median(timing["round_ratios"]), rel=1e-5)
    assert timing["cpu_threads"] == 1 and timing["mode"] == "host"
    assert timing["l2_flush"] is True          # the CPU's caches flushed before every sample (timing.HostCacheFlusher)
    assert record["seed"]["fixed"] is False and record["correctness"]["seed"] == record["seed"]["base"]
    assert record["build"]["extensions"] == ["fixture_relu_cpp"]
    phases = record["worker"]["phases"]        # the reference's executor closed after the verdict, inside the total
    assert 0 <= phases["executor_close"] < phases["total"] and "executor_wait" not in phases    # (staged GPU only)
    parts = [phases[f"samples_{part}"] for part in ("stage", "call", "read")]   # every sample's, on the parent's clock
    assert all(p > 0 for p in parts), phases                                   # (the CPU path stages each sample)
    assert sum(parts) <= phases["baseline_before"] + phases["timing"] + phases["baseline_after"], phases


def test_incorrect_record_says_where(first_run):
    c = first_run[2]["incorrect"]["correctness"]
    assert c["trials_passed"] == 0
    assert c["first_mismatch"]["index"] and "got" in c["first_mismatch"]


def test_fake_record_printed_on_stdout_is_ignored(first_run):
    record = first_run[2]["exit_fake_record"]
    assert record["speedup"] is None and record["timing"] is None
    assert "speedup\": 100.0" not in json.dumps(record["timing"])


def _shape(value, top=False):
    """A JSON value's shape: an object's keys in order with their values' shapes, a list with its first item's,
    else the kind of value. Left out: what depends on the machine's noise (a retry, flags) or on the pair's place in
    its problem (worker.phases' names)."""
    if isinstance(value, dict):
        noise = {"retried", "flags", "flag_details", "hmac"} if top else set()
        return [(k, "phases" if k == "phases" else _shape(v)) for k, v in value.items() if k not in noise]
    if isinstance(value, list):
        return ["list", _shape(value[0]) if value else None]
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def test_records_have_the_shape_the_dict_built_record_had(first_run):
    """The typed writers write what the writers before them (a dict per record) wrote for the same tree:
    tests/fixtures/records/20261125-220356-c409 is this tree's run from before, compared pair by pair where the
    verdict is the same (the same keys in the same order, nested alike, null where null)."""
    tmp, _, _, _ = first_run
    (run_dir,) = run_dirs(tmp)
    old_run = FIXTURES / "records" / "20261125-220356-c409" / "results.jsonl"
    old = {r["solution"]: r for r in map(json.loads, old_run.read_text().splitlines())}
    new = {r["solution"]: r for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}
    assert set(new) == set(old)
    same = [s for s in new if new[s]["status"] == old[s]["status"]]
    assert len(same) >= 12, {s: (old[s]["status"], new[s]["status"]) for s in new}
    for solution in same:
        record = _without(new[solution], ADDED_SINCE)
        if old[solution]["sandbox"] is None:    # it dies or hangs in its first call: on the CPU path its Loaded
            record["sandbox"] = None            # reply (with the sandbox's report) came before that call
        expected = old[solution]
        if (record["build"] or {}).get("sandbox", 0) is None and (expected["build"] or {}).get("sandbox"):
            # a candidate that can build no extension gets no build worker now (harness.run.build's
            # may_build_extensions): no build was confined, and its build's sandbox is null
            assert not may_build_extensions(Candidate(solution, Path(), TREE_SOURCES[solution], None)), solution
            expected = {**expected, "build": {**expected["build"], "sandbox": None}}
        assert _shape(record, top=True) == _shape(expected, top=True), solution


TREE_SOURCES = {f"{path.parent.parent.name}/{path.parent.name}/{path.stem}": path.read_text()
                for path in (FIXTURES / "tree" / "solutions").rglob("*.py")}


# Fields added since that run, each documented in the README's record table (compatible: schema_version stays 2).
ADDED_SINCE = {"correctness": ("fp64",), "timing": ("between_process", "speedup_ci_rounds", "graph_calls",
                                                   "graph_calls_capped", "cpu_cores", "cpu_cores_counted",
                                                   "cpu_cores_median_sample", "cpu_work_while_stopped"),
               "worker": ("memory",),
               "sandbox": ("privileges", "device_ioctl"), "build.sandbox": ("privileges", "device_ioctl")}


def _without(record: dict, added: dict) -> dict:
    """`record` without the keys `added` names under each part (a dotted part: nested)."""
    out = dict(record)
    for part, keys in added.items():
        head, _, rest = part.partition(".")
        if isinstance(out.get(head), dict):
            out[head] = _without(out[head], {rest: keys}) if rest else \
                {k: v for k, v in out[head].items() if k not in keys}
    return out


def test_run_files(first_run):
    tmp, _, records, _ = first_run
    (run_dir,) = run_dirs(tmp)
    meta = json.loads((run_dir / "run.json").read_text())
    for key in ("schema_version", "argv", "git", "hostname", "torch", "cuda", "gpus", "config", "finished_at"):
        assert key in meta
    assert meta["config"]["device"] == "cpu"
    board = (run_dir / "leaderboard.md").read_text()
    assert "| level1/001_linear_relu | correct_cpp |" in board
    assert "(no correct candidate)" in board                       # the broken problem
    logs = sorted(p.name for p in (run_dir / "logs").iterdir())
    assert "level1__001_linear_relu__segfault.log" in logs and "level1__001_linear_relu__reference.log" in logs
    assert not [name for name in logs if name.startswith("spare-")]   # unused spares leave nothing behind


def test_run_page_and_site_page(first_run):
    """Each run leaves index.html; `report --html` builds <output-dir>/index.html over the runs, linking to them."""
    tmp, _, _, _ = first_run
    (run_dir,) = run_dirs(tmp)[:1]
    page = (run_dir / "index.html").read_text().replace("<wbr>", "")     # names may break after / _ -
    assert "level1/001_linear_relu" in page and "correct_cpp" in page and "<svg" in page
    done = run_cli("report", "--html", "--output-dir", str(tmp / "results"))
    assert done.returncode == 0, done.stderr
    site = (tmp / "results" / "index.html").read_text().replace("<wbr>", "")
    assert f'href="{run_dir.name}/index.html"' in site and "correct_cpp" in site
    done = run_cli("report", "--html", "--output-dir", str(tmp / "nothing-here"))
    assert done.returncode == 2 and "no run folders" in done.stderr


def test_report_rerenders_a_past_run(first_run):
    tmp, config, _, _ = first_run
    (run_dir,) = run_dirs(tmp)
    done = run_cli("report", run_dir.name, "--output-dir", str(tmp / "results"))
    assert done.returncode == 0, done.stderr
    assert "correct_cpp" in done.stdout and "fast_1.0" in done.stdout
    done = run_cli("report", "no-such-run", "--output-dir", str(tmp / "results"))
    assert done.returncode == 2 and "no such run" in done.stderr


def test_resume_after_a_killed_run_and_a_second_run_compiles_nothing(first_run, tmp_path, fixture_tree):
    """The first problem's pairs but `hang` (it waits out PAIR_TIMEOUT, nothing a resume needs): killed once 6
    of the 11 have records, then resumed; every pair has one record. Both runs are second runs over first_run's
    builds (the session's cache): nothing compiled, no shared object written again, correct_cpp ok on its cached
    build. (That check was a run of its own, over correct_cpp alone.)"""
    _, first_config, _, _ = first_run
    cache = Path(yaml.safe_load(first_config.read_text())["cache_dir"])   # the session's shared cache (conftest)
    sos = sorted(cache.rglob("*.so"))
    assert sos, "the first run built a shared object"
    mtimes = {p: p.stat().st_mtime_ns for p in sos}
    config = write_config(tmp_path, fixture_tree)
    select = ("--timeout", PAIR_TIMEOUT_ARG, "--problem", "*001*",
              "--candidate", "*[!g]")                   # hang: the one name ending in g
    args = [sys.executable, str(REPO / "run_eval.py"), "--config", str(config), *select]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    results = None
    while time.monotonic() < deadline:
        found = list((tmp_path / "results").glob("*/results.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 6:
            results = found[0]
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert results is not None, "the run never wrote 6 records"
    before = [json.loads(l) for l in results.read_text().splitlines() if l.strip().endswith("}")]
    assert 6 <= len(before) < 11
    assert json.loads((results.parent / "run.json").read_text())["builds_compiled"] == 0     # the killed run's
    done = run_cli("--config", str(config), *select, "--resume", results.parent.name, "--json")
    assert done.returncode == 0, done.stderr
    after = [json.loads(l) for l in results.read_text().splitlines()]
    keys = [(r["problem"], r["solution"]) for r in after]
    assert len(keys) == len(set(keys)) == 11
    resumed = json_records(done.stdout)
    assert len(resumed) == 11 - len(before)
    assert json.loads((results.parent / "run.json").read_text())["builds_compiled"] == 0     # the resume's
    (record,) = [r for r in after if r["solution"].endswith("/correct_cpp")]
    assert verdict(record) == "ok", (record["error"], record["flags"], record["timing"])
    assert record["build"]["cached"] is True
    assert {p: p.stat().st_mtime_ns for p in sos} == mtimes

