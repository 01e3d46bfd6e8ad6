"""The record's read side: `Status`, `Record.from_json` (schema_version, required fields, types) and how readers
treat a line that does not read as a record (named by file:line, skipped, the rest of the run still read)."""
from __future__ import annotations

import copy
import json
import re

import pytest

from conftest import REPO
from harness import SCHEMA_VERSION
from harness.cli import main
from harness.results.records import (STATUSES, Record, RecordError, Status, as_records, check_record, finish,
                             new_record)
from harness.results.store import read_records

PROBLEM = "level1/001_linear_relu"


def v2(cand: str = "cuda_fused", status: str = "ok", **extra) -> dict:
    """A schema 2 record shaped like the pipeline's (GPU path, fields as README documents them)."""
    r = {"schema_version": 2, "run_id": "20250101-090000-aaaa", "problem": PROBLEM,
         "solution": f"{PROBLEM}/{cand}", "status": status, "correct": status == "ok", "flags": ["noisy"],
         "error": None if status == "ok" else "boom", "speedup": 1.52, "speedup_ci": [1.49, 1.55],
         "speedup_vs_compile": 1.1, "speedup_vs_compile_ci": [1.05, 1.15], "seed": {"base": 1234, "fixed": True},
         "device": "cuda", "gpu": {"index": 0, "name": "NVIDIA H200"},
         "build": {"status": "ok", "cached": False, "seconds": 4.2, "key": "abc", "extensions": []},
         "precision": {"requested": None, "dtype": "float32", "source": "default"},
         "sandbox": {"mode": "landlock"}, "correctness": {"trials": 3, "trials_passed": 3, "max_abs_err": 1e-6},
         "timing": {"mode": "cold", "rounds": 6, "reference": {"median_ms": 0.61}, "candidate": {"median_ms": 0.4}},
         "worker": {"exit_code": 0, "seconds": 3.1, "log_tail": None, "device_usable_after": True},
         "kernels": {"kernels": 1, "custom_kernels": 1, "custom_share": 1.0, "other_kernels": 0},
         "performance": {"floor_ms": 0.2, "pct_of_peak_bandwidth": 50.0}, "flag_details": {"noisy": "wide CI"},
         "error_detail": None, "started_at": "2025-01-01T09:00:00+00:00",
         "finished_at": "2025-01-01T09:00:05+00:00", "hmac": "00" * 32}
    r.update(extra)
    return r


def v1() -> dict:
    """A schema 1 record: no CI, no compile baseline, no seed."""
    return {"schema_version": 1, "run_id": "old", "problem": PROBLEM, "solution": f"{PROBLEM}/old", "status": "ok",
            "correct": True, "flags": [], "error": None, "speedup": 1.23, "device": "cpu"}


# ---------------------------------------------------------------- Status

def test_status_values_are_the_readmes_statuses():
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `status` |"))
    documented = re.findall(r"`([a-z_]+)`", row)[1:]              # the first is the field's own name
    assert [s.value for s in Status] == documented
    assert STATUSES == tuple(documented)
    assert Status.OK == "ok" and f"{Status.INVALID}" == "invalid" and json.dumps(Status.OOM) == '"oom"'


# ---------------------------------------------------------------- reading a record

def test_a_schema_2_record_reads_typed_and_keeps_everything():
    obj = v2()
    original = copy.deepcopy(obj)
    r = Record.from_json(obj, "results.jsonl:1")
    assert r.status is Status.OK and r.ok and not r.invalid and r.correct is True
    assert r.key == (PROBLEM, f"{PROBLEM}/cuda_fused") and r.candidate == "cuda_fused"
    assert r.speedup == 1.52 and r.speedup_ci == (1.49, 1.55) and r.speedup_vs_compile_ci == (1.05, 1.15)
    assert r.flags == ("noisy",) and r.schema_version == 2 and r.run_id == "20250101-090000-aaaa"
    assert r.timing.candidate.median_ms == 0.4 and r.gpu.name == "NVIDIA H200" and r.median_ms("reference") == 0.61
    assert r.performance.floor_ms == 0.2 and r.flag_details == {"noisy": "wide CI"}
    assert r.correctness.trials_passed == 3 and r.worker.device_usable_after is True and r.build.cached is False
    assert r.raw is obj and r.raw == original                       # nothing lost, nothing changed
    assert r.raw["hmac"] == "00" * 32 and "error_detail" in r.raw
    assert Record.of(r) is r and Record.of(obj) == r


def test_a_schema_1_record_reads_without_ci():
    r = Record.from_json(v1(), "old.jsonl:3")
    assert r.schema_version == 1 and r.speedup == 1.23 and r.speedup_ci is None and r.timing is None
    assert r.speedup_vs_compile is None and r.ok


def test_non_finite_numbers_read_as_none():
    """The store writes NaN and Inf as strings (JSON has neither): no speedup, no CI."""
    r = Record.from_json(v2(speedup="nan", speedup_ci=["inf", 1.0], speedup_vs_compile=float("inf")), "x")
    assert r.speedup is None and r.speedup_ci is None and r.speedup_vs_compile is None


def test_invalid_and_failing_records():
    invalid = Record.from_json(v2(status="invalid", correct=False, flags=["interference"]), "x")
    assert invalid.invalid and not invalid.ok and invalid.status is Status.INVALID
    failed = Record.from_json(v2(status="compile_error", speedup=None, speedup_ci=None), "x")
    assert not failed.ok and failed.error == "boom" and failed.speedup is None


def test_what_the_write_side_builds_reads_back():
    record = finish(new_record(PROBLEM, f"{PROBLEM}/c", "cpu", "r"), Status.TIMEOUT, "took\ntoo long")
    r = Record.from_json(json.loads(json.dumps(record.to_json())), "x")
    assert r.status is Status.TIMEOUT and r.error == "took too long" and r.schema_version == SCHEMA_VERSION
    assert check_record(record) == []


# ---------------------------------------------------------------- schema check errors

@pytest.mark.parametrize("change, words", [
    ({"schema_version": SCHEMA_VERSION + 1}, f"schema_version {SCHEMA_VERSION + 1} is newer than this harness "
                                             f"reads (up to {SCHEMA_VERSION})"),
    ({"schema_version": None}, "schema_version None is not a version number"),
    ({"schema_version": "2"}, "schema_version '2' is not a version number"),
    ({"schema_version": 0}, "schema_version 0 is not a version number"),
    ({"status": "fast"}, "unknown status 'fast'"),
    ({"status": None}, "unknown status None"),
    ({"status": ["not", "hashable"]}, "unknown status ['not', 'hashable']"),
    ({"correct": "yes"}, "'correct' is str, not true or false"),
    ({"flags": "noisy"}, "'flags' is not a list of strings"),
    ({"flags": [1]}, "'flags' is not a list of strings"),
    ({"error": 3}, "'error' is int, not a string"),
    ({"problem": None}, "'problem' is null, not a string"),
    ({"speedup": "fast"}, "'speedup' is str, not a number"),
    ({"speedup": True}, "'speedup' is bool, not a number"),
    ({"speedup_ci": [1.0]}, "'speedup_ci' is not [lo, hi]"),
    ({"speedup_ci": ["a", 1.0]}, "'speedup_ci' is str, not a number"),
    ({"timing": [1, 2]}, "'timing' is list, not an object"),
])
def test_a_bad_record_is_one_line_naming_where_and_what(change, words):
    with pytest.raises(RecordError) as caught:
        Record.from_json(v2(**change), "results.jsonl:7")
    message = str(caught.value)
    assert message == f"results.jsonl:7: {words}" and "\n" not in message
    assert caught.value.where == "results.jsonl:7" and caught.value.what == words


@pytest.mark.parametrize("field", ["schema_version", "problem", "solution", "status", "correct", "flags", "error",
                                   "speedup", "device"])
def test_a_missing_required_field_is_named(field):
    obj = v2()
    del obj[field]
    with pytest.raises(RecordError, match=f"^r:2: missing field '{field}'$"):
        Record.from_json(obj, "r:2")


def test_several_missing_fields_and_not_an_object():
    with pytest.raises(RecordError, match="^x: missing field 'problem', 'device'$"):
        Record.from_json({k: v for k, v in v1().items() if k not in ("problem", "device")}, "x")
    for obj in ([1, 2], "ok", None):
        with pytest.raises(RecordError, match="^x: not an object$"):
            Record.from_json(obj, "x")


def test_as_records_names_the_bad_one():
    good = Record.from_json(v1(), "x")
    assert as_records([good, v2()])[0] is good
    with pytest.raises(RecordError, match="^baseline 2: unknown status 'nope'$"):
        as_records([v1(), v2(status="nope")], "baseline")


# ---------------------------------------------------------------- readers of results.jsonl

def write_run(root, run_id, lines):
    d = root / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"schema_version": 2, "run_id": run_id}))
    (d / "results.jsonl").write_text("".join(line + "\n" for line in lines))
    return d


def bad_lines():
    return [json.dumps(v2("a")), json.dumps(v2("b", schema_version=SCHEMA_VERSION + 1)),
            json.dumps(v2("c", status="fast")), json.dumps(v1())]


def test_read_records_skips_a_bad_line_by_file_and_line_and_reads_the_rest(tmp_path):
    results = write_run(tmp_path, "r", bad_lines()) / "results.jsonl"
    warnings: list[str] = []
    records = list(read_records(results, warnings.append))
    assert all(isinstance(r, Record) for r in records)
    assert [r.candidate for r in records] == ["a", "old"]
    assert warnings[:2] == [
        f"{results}:2: bad record (schema_version {SCHEMA_VERSION + 1} is newer than this harness reads (up to "
        f"{SCHEMA_VERSION})); skipped",
        f"{results}:3: bad record (unknown status 'fast'); skipped"]
    assert "2 records unverified" in warnings[2] and len(warnings) == 3


def test_report_and_compare_name_a_bad_line_and_keep_going(tmp_path, capsys):
    out = tmp_path / "results"
    results = write_run(out, "run-a", bad_lines()) / "results.jsonl"
    write_run(out, "run-b", [json.dumps(v2("a")), json.dumps(v1())])
    assert main(["report", "run-a", "--output-dir", str(out), "--csv"]) == 0
    captured = capsys.readouterr()
    rows = captured.out.strip().splitlines()
    assert len(rows) == 3 and rows[1].startswith(f"{PROBLEM},{PROBLEM}/a,ok,true,1.52,1.49,1.55,1.1,0.4,0.61")
    assert f"{results}:2: bad record (schema_version {SCHEMA_VERSION + 1} is newer" in captured.err
    assert f"{results}:3: bad record (unknown status 'fast'); skipped" in captured.err
    assert "Traceback" not in captured.err
    assert main(["compare", "run-a", "run-b", "--output-dir", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    verdicts = [json.loads(line)["verdict"] for line in captured.out.splitlines()]
    assert verdicts == ["SAME", "SAME"] and f"{results}:2: bad record" in captured.err
