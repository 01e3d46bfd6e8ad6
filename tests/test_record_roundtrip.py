"""The typed record writes what the dict-built record wrote, and the records written before it still read.

tests/fixtures/records/ holds three runs written by the harness before the record was typed (the fixture tree, the
exploit tree and examples/cpu with --processes 2: 45 records, every status the CPU path reaches, flags, retries,
merged process pairs), and gpu_parts.json: the GPU-only parts (kernels, performance) that the old check_kernels and
check_physics wrote for the inputs in GPU_CASES below."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES
from harness.cli import main
from harness.results.jsonobj import ABSENT
from harness.results.parts import SideStats, Timing
from harness.results.records import Record, RecordDraft, Status, finish, new_record
from harness.shared import messages as m

RECORDS = FIXTURES / "records"
RUNS = {"tree": "20261125-220356-c409", "exploits": "20261125-220639-9e2b", "processes": "20261125-221107-1e75"}


def old_lines() -> list[dict]:
    return [json.loads(line) for run in RUNS.values()
            for line in (RECORDS / run / "results.jsonl").read_text().splitlines()]


def test_the_fixtures_cover_what_the_cpu_path_writes():
    lines = old_lines()
    assert len(lines) == 45
    assert {r["status"] for r in lines} == {s.value for s in Status} - {"oom"}
    present = {key for r in lines for key in r}
    assert {"seed", "error_detail", "speedup_ci", "flag_details", "performance", "retried"} <= present
    assert any("processes" in (r["timing"] or {}) for r in lines)
    assert any("interference" in (r["timing"] or {}) and "consistency" in r["timing"] for r in lines)


@pytest.mark.parametrize("index", range(45))
def test_an_old_line_reads_typed_and_writes_back_the_same_json(index):
    """Every field the old writers put in a record has a home in the typed one: read into a RecordDraft, the line
    comes back as the same JSON (names, nesting, null against missing, numbers)."""
    line = old_lines()[index]
    body = {k: v for k, v in line.items() if k != "hmac"}
    draft = RecordDraft.from_json(body)
    assert draft.to_json() == body
    assert json.dumps(draft.to_json(), sort_keys=True) == json.dumps(body, sort_keys=True)
    assert isinstance(draft.status, Status)
    record = Record.from_json(line, "fixture")
    assert record.raw is line and (record.timing is None or isinstance(record.timing, Timing))


def test_late_keys_keep_the_order_they_were_set_in():
    """Keys a record writes only sometimes come after the others, in the order the writers set them (a flag raised
    after the trials puts flag_details before speedup_ci, one raised after the rounds after it)."""
    early, late = new_record("p", "p/c", "cpu", "r"), new_record("p", "p/c", "cpu", "r")
    early.set_flag_detail("noisy", "wide")
    early.speedup_ci = [1.0, 2.0]
    late.speedup_ci = [1.0, 2.0]
    late.set_flag_detail("noisy", "wide")
    assert list(early.to_json())[-2:] == ["flag_details", "speedup_ci"]
    assert list(late.to_json())[-2:] == ["speedup_ci", "flag_details"]
    assert "seed" not in early.to_json() and early.to_json()["gpu"] is None


def test_finish_takes_a_status():
    record = new_record("p", "p/c", "cpu", "r")
    with pytest.raises(TypeError, match="Status"):
        finish(record, "crashed")
    assert finish(record, Status.CRASHED, "a\nb").to_json()["status"] == "crashed"
    assert record.error == "a b" and record.correct is False


def test_side_stats_without_samples_write_only_n():
    assert SideStats.of([]).to_json() == {"n": 0}
    stats = SideStats.of([1.0, 2.0, 3.0])
    assert stats.host_median_ms is ABSENT and list(stats.to_json())[-1] == "samples_ms"


# ---------------------------------------------------------------- the GPU-only parts

PROFILES = [m.Profile(4, ["fused_bn_relu"], 0.28, ["sm90_gemm"]), m.Profile(5, ["fused_bn_relu"], 0.05,
                                                                            ["sm90_gemm", "fill"])]
REFERENCE = [m.Profile(2, [], 0.0, ["sm90_gemm", "relu"]), None]
CEILINGS = {"copy_gbps": 3000.0, "matmul_tflops_bf16": 700.0, "matmul_tflops_fp32": 50.0}
GPU_CASES = {   # name: (candidate median ms, profiles, reference profiles, work, ceilings): as gpu_parts.json was made
    "little_custom_work": (0.05, PROFILES, REFERENCE, m.Work(2_000_000_000, 300_000_000), CEILINGS),
    "no_custom_kernel": (0.5, [m.Profile(3, [], 0.0, ["a", "b"])], [], m.Work(None, 4096), CEILINGS),
    "faster_than_physics": (0.0001, PROFILES[:1], REFERENCE, m.Work(2_000_000_000, 300_000_000), CEILINGS),
    "no_ceilings": (0.05, PROFILES[:1], [], m.Work(10, 20), {}),
}


@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_the_gpu_parts_are_what_the_old_writers_wrote(case):
    from harness.run import defenses, verdicts
    ms, profiles, reference, work, ceilings = GPU_CASES[case]
    record = new_record("p", "p/c", "cuda", "r")
    record.timing = Timing.from_json({"candidate": {"n": 1, "median_ms": ms}})
    verdicts.write(record, defenses.check_kernels(profiles, reference))
    verdicts.write(record, defenses.check_physics(work, ceilings, ms))
    written = record.to_json()
    wanted = json.loads((RECORDS / "gpu_parts.json").read_text())[case]
    assert {k: written[k] for k in wanted} == wanted
    assert [k for k in written if k in wanted] == list(wanted)


# ---------------------------------------------------------------- the readers, on records written before

@pytest.fixture
def old_runs(tmp_path):
    out = tmp_path / "results"
    for run in RUNS.values():
        shutil.copytree(RECORDS / run, out / run)
    return out


def test_old_records_load_in_report(old_runs, capsys):
    assert main(["report", RUNS["tree"], "--output-dir", str(old_runs)]) == 0
    captured = capsys.readouterr()
    assert "correct_cpp" in captured.out and "Traceback" not in captured.err
    assert main(["report", RUNS["exploits"], "--output-dir", str(old_runs), "--csv"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 27 and all(row.count(",") >= 11 for row in rows[1:])
    control = next(row for row in rows if "/control_plain," in row).split(",")
    assert float(control[8]) > 0 and float(control[9]) > 0         # the candidate's and reference's medians
    assert main(["report", RUNS["processes"], "--output-dir", str(old_runs), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["pairs"] == 6


def test_old_records_load_in_compare(old_runs, capsys):
    assert main(["compare", RUNS["tree"], RUNS["exploits"], "--output-dir", str(old_runs), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 13 + 26
    assert main(["compare", RUNS["processes"], RUNS["processes"], "--output-dir", str(old_runs)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_old_records_load_in_report_html(old_runs, capsys):
    assert main(["report", "--html", "--output-dir", str(old_runs)]) == 0
    assert "3 runs" in capsys.readouterr().out
    page = (old_runs / "index.html").read_text()
    assert "level1/001_linear_relu" in page and "level1/002_row_softmax" in page
    exploits = (old_runs / RUNS["exploits"] / "index.html").read_text()
    assert "mutates_inputs" in exploits and "controls (not counted)" in exploits
    assert all((old_runs / run / "index.html").is_file() for run in RUNS.values())


def test_a_draft_is_stored_as_its_json(tmp_path):
    from harness.results.store import RunStore
    store = RunStore.create(tmp_path, {"config": {"cache_dir": str(tmp_path / "cache")}})
    draft = finish(new_record("level1/001_x", "level1/001_x/c", "cpu", store.run_id), Status.OK)
    store.append(draft)
    store.finish()
    (line,) = store.results_path.read_text().splitlines()
    written = json.loads(line)
    assert {k: v for k, v in written.items() if k != "hmac"} == draft.to_json()
    assert Record.from_json(written, "x").status is Status.OK


# ---------------------------------------------------------------- the store gives Records

V1 = {"schema_version": 1, "run_id": "20250101-000000-0001", "problem": "level1/001_x", "solution": "level1/001_x/c",
      "status": "ok", "correct": True, "flags": [], "error": None, "speedup": 1.23, "device": "cpu"}


def test_the_store_gives_old_run_folders_records_typed(old_runs):
    """RunStore.records() of a folder written before the record was typed, and of a schema 1 one (no CI, no
    signature): Records, each one's JSON its line as it is on disk."""
    v1 = old_runs / V1["run_id"]
    v1.mkdir()
    (v1 / "run.json").write_text(json.dumps({"schema_version": 1, "run_id": V1["run_id"]}))
    (v1 / "results.jsonl").write_text(json.dumps(V1) + "\n")
    from harness.results.store import RunStore
    for run in [*RUNS.values(), V1["run_id"]]:
        records = RunStore.open(old_runs, run).records()
        lines = [json.loads(line) for line in (old_runs / run / "results.jsonl").read_text().splitlines()]
        assert records and all(isinstance(r, Record) for r in records)
        assert [r.to_json() for r in records] == lines
    (old,) = RunStore.open(old_runs, V1["run_id"]).records()
    assert old.schema_version == 1 and old.speedup == 1.23 and old.speedup_ci is None and old.status is Status.OK


def test_report_jsonl_prints_old_lines_as_it_always_did(old_runs, capsys):
    """`report --jsonl` prints each record's JSON object as json.dumps printed the dict read from its line."""
    for run in RUNS.values():
        assert main(["report", run, "--output-dir", str(old_runs), "--jsonl"]) == 0
        lines = (old_runs / run / "results.jsonl").read_text().splitlines()
        assert capsys.readouterr().out.splitlines() == [json.dumps(json.loads(line)) for line in lines]


def test_the_store_gives_a_current_run_records_typed(tmp_path):
    """A run written now: append hands back the Record its signed line reads as, which is what records() gives,
    while the run writes and when it is read again; to_json is a copy, so the record stays as it was read."""
    from harness.results.store import RunStore
    store = RunStore.create(tmp_path / "results", {"config": {"cache_dir": str(tmp_path / "cache")}})
    draft = finish(new_record("level1/001_x", "level1/001_x/c", "cpu", store.run_id), Status.OK)
    draft.speedup, draft.speedup_ci = float("nan"), [1.0, 2.0]
    appended = store.append(draft)
    store.finish()
    reread = RunStore.open(tmp_path / "results", store.run_id).records()
    assert isinstance(appended, Record) and store.records() == reread == [appended]
    assert appended.speedup is None and appended.speedup_ci == (1.0, 2.0) and appended.run_id == store.run_id
    (line,) = store.results_path.read_text().splitlines()
    assert appended.to_json() == json.loads(line) and appended.to_json()["speedup"] == "nan"
    appended.to_json()["status"] = "crashed"
    assert appended.to_json()["status"] == "ok" and store.done_keys() == {("level1/001_x", "level1/001_x/c")}


def test_the_store_refuses_a_record_that_would_not_read_back(tmp_path):
    """A draft never finished (no status) is a RecordError at append, and nothing is written."""
    from harness.results.records import RecordError
    from harness.results.store import RunStore
    store = RunStore.create(tmp_path / "results", {"config": {"cache_dir": str(tmp_path / "cache")}})
    with pytest.raises(RecordError, match="results.jsonl:1: unknown status None"):
        store.append(new_record("level1/001_x", "level1/001_x/c", "cpu", store.run_id))
    store.finish()
    assert store.results_path.read_text() == "" and store.records() == []
