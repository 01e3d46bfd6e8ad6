"""Issue 9, item 2, "Records nobody else can write": every results.jsonl line carries an HMAC under a key of its
run's own that only the parent holds; report, the leaderboard, compare and --resume skip (and name) a line that
does not verify and a second line for a pair; runs from before signing still load, said to be unverified."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli, write_config
from harness.results import signing
from harness.results.signing import KeyFileError, RunKey, Verdict, sign, signed_line, verify_line
from harness.results.store import RunStore

PAIR = ("level1/001_tiny_relu", "level1/001_tiny_relu/same_as_reference")


# ---------------------------------------------------------------- one real run (one pair, ~10 s on the CPU)

@pytest.fixture(scope="module")
def signed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("signed")
    done = run_cli("--config", str(write_config(tmp, FIXTURES / "gpu_small", cache_dir=tmp / "cache")), "--json")
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in (tmp / "results").iterdir() if p.is_dir()]
    return tmp, run_dir


def copy_run(run_dir: Path, dest: Path) -> Path:
    """A copy of the run folder elsewhere; its run.json still names the run's key file."""
    out = dest / "out" / run_dir.name
    shutil.copytree(run_dir, out)
    return out


def line_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def key_of(run_dir: Path) -> RunKey:
    return RunKey.load(json.loads((run_dir / "run.json").read_text())["signing"]["key_file"])


def report(run_dir: Path, *extra: str):
    return run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent), *extra)


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def append_lines(path: Path, *records: dict) -> None:
    with open(path, "a") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def forged(record: dict, **changes) -> dict:
    """A copy of a real line with fields changed; it keeps the real line's hmac."""
    return {**record, **changes}


def unsigned(record: dict, **changes) -> dict:
    return {k: v for k, v in {**record, **changes}.items() if k != "hmac"}


# ---------------------------------------------------------------- (1) a real run signs its lines

def test_a_run_signs_every_line_with_a_key_kept_outside_the_run(signed_run):
    tmp, run_dir = signed_run
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["signing"] == {"algorithm": "hmac-sha256",
                               "key_file": meta["signing"]["key_file"]}
    assert Path(meta["signing"]["key_file"]).parent == (tmp / "cache" / "keys").resolve()
    assert Path(meta["signing"]["key_file"]).name.startswith(run_dir.name + "-")
    key = key_of(run_dir)
    (record,) = line_records(run_dir / "results.jsonl")
    assert (record["problem"], record["solution"]) == PAIR
    assert len(record["hmac"]) == 64 and verify_line(record, key) is Verdict.VALID
    assert stat.S_IMODE(key.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.path.parent.stat().st_mode) == 0o700
    secret = key.secret.hex()                      # the key is nowhere in the run folder (logs: the workers' output)
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


def test_report_shows_a_signed_run_without_a_word_of_warning(signed_run):
    _, run_dir = signed_run
    done = report(run_dir)
    assert done.returncode == 0 and warnings_of(done.stderr) == [], done.stderr
    assert "same_as_reference" in done.stdout and "pairs 1, " in done.stdout


# ---------------------------------------------------------------- (2) forged lines: named, skipped

def test_report_names_forged_lines_and_ignores_them(signed_run, tmp_path):
    _, original = signed_run
    run_dir = copy_run(original, tmp_path)
    results = run_dir / "results.jsonl"
    (real,) = line_records(results)
    better = {"speedup": 42.0, "status": "ok", "correct": True, "flags": [], "error": None}
    append_lines(results, forged(real, solution=PAIR[1] + "_evil_twin", **better),      # old hmac, new content
                 unsigned(real, solution=PAIR[1] + "_evil_unsigned", **better))          # no hmac at all
    done = report(run_dir)
    assert done.returncode == 0, done.stderr
    assert warnings_of(done.stderr) == [f"warning: {results}:2: bad signature; skipped",
                                        f"warning: {results}:3: unsigned line in a signed run; skipped"]
    assert "42.00x" not in done.stdout and "evil" not in done.stdout
    assert "pairs 1, " in done.stdout
    board = (run_dir / "leaderboard.md").read_text()
    assert "42.00x" not in board and "evil" not in board
    assert json.loads(report(run_dir, "--json").stdout) == json.loads(report(original, "--json").stdout) | \
        {"run_id": run_dir.name}                    # the aggregates: exactly those of the untouched run


def test_a_line_changed_in_place_is_skipped(signed_run, tmp_path):
    run_dir = copy_run(signed_run[1], tmp_path)
    results = run_dir / "results.jsonl"
    (real,) = line_records(results)
    results.write_text(json.dumps(forged(real, speedup=42.0)) + "\n")
    done = report(run_dir)
    assert done.returncode == 0 and f"{results}:1: bad signature; skipped" in done.stderr
    assert "42.00x" not in done.stdout and "pairs 0" in done.stdout


# ---------------------------------------------------------------- (3) a second line for a pair

def test_a_second_line_for_a_pair_is_named_and_the_first_kept(signed_run, tmp_path):
    run_dir = copy_run(signed_run[1], tmp_path)
    results = run_dir / "results.jsonl"
    (real,) = line_records(results)
    append_lines(results, forged(real, speedup=42.0), real)    # a forgery, then a replay of the real line
    done = report(run_dir)
    assert done.returncode == 0, done.stderr
    assert warnings_of(done.stderr) == [
        f"warning: {results}:2: bad signature; skipped",
        f"warning: {results}:3: a second line for ({PAIR[0]}, {PAIR[1]}); the first, line 1, is kept; skipped"]
    assert "pairs 1, " in done.stdout and f"{real['speedup']:.2f}x" in done.stdout


# ---------------------------------------------------------------- (4) compare

def test_compare_ignores_forged_lines(signed_run, tmp_path):
    _, a = signed_run
    b = copy_run(a, tmp_path)
    results = b / "results.jsonl"
    (real,) = line_records(results)
    results.write_text(json.dumps(forged(real, speedup=42.0, speedup_ci=[41.0, 43.0], status="ok", correct=True,
                                         flags=[], error=None)) + "\n")
    append_lines(results, unsigned(real, solution=PAIR[1] + "_unsigned"))
    done = run_cli("compare", str(a), str(b), "--json")
    assert done.returncode == 0, done.stderr                    # no FASTER from the forgery, no ONLY_B either
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["solution"], r["verdict"]) for r in rows] == [(PAIR[1], "ONLY_A")]
    assert warnings_of(done.stderr)[:2] == [f"warning: {results}:1: bad signature; skipped",
                                            f"warning: {results}:2: unsigned line in a signed run; skipped"]
    same = run_cli("compare", str(a), str(a), "--json")
    verdict = json.loads(same.stdout)["verdict"]
    assert same.returncode == 0 and verdict in ("SAME", "FAILING")      # FAILING: a pair the timing found invalid
    lines = [line for line in warnings_of(same.stderr)
             if not line.startswith(("pairs measured on the CPU read", "A ", "B "))]
    assert len(lines) == 1 and "warning" not in same.stderr     # the summary line only (and the CPU floor's note and
    #                                                              each run's ranking line)


# ---------------------------------------------------------------- --resume

def test_resume_signs_with_the_runs_key_and_removes_a_forged_line(signed_run, tmp_path):
    run_dir = copy_run(signed_run[1], tmp_path)
    results = run_dir / "results.jsonl"
    (real,) = line_records(results)
    results.write_text(json.dumps(forged(real, speedup=42.0)) + "\n")          # the pair's only line: forged
    done = run_cli("--output-dir", str(run_dir.parent), "--resume", run_dir.name, "--json")
    assert done.returncode == 0, done.stderr
    assert f"warning: {results}:1: bad signature; removed" in done.stderr
    (again,) = line_records(results)                                           # the pair ran again
    assert (again["problem"], again["solution"]) == PAIR and again["speedup"] != 42.0
    assert verify_line(again, key_of(run_dir)) is Verdict.VALID
    after = report(run_dir)
    assert after.returncode == 0 and warnings_of(after.stderr) == [], after.stderr


def without_key(run_dir: Path, key_file: str | None) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    if key_file is None:
        meta.pop("signing")
    else:
        meta["signing"]["key_file"] = key_file
    (run_dir / "run.json").write_text(json.dumps(meta))


def test_resume_without_the_key_file_is_one_line_and_exit_2(signed_run, tmp_path):
    run_dir = copy_run(signed_run[1], tmp_path)
    gone = tmp_path / "gone.key"
    without_key(run_dir, str(gone))
    done = run_cli("--output-dir", str(run_dir.parent), "--resume", run_dir.name)
    assert done.returncode == 2 and len(warnings_of(done.stderr)) == 1, done.stderr
    assert f"key file {gone} is missing" in done.stderr and "cannot be resumed" in done.stderr
    assert "Traceback" not in done.stderr
    shown = report(run_dir)                                    # report still shows it, said to be unverified
    assert shown.returncode == 0 and "pairs 1, " in shown.stdout
    assert warnings_of(shown.stderr) == [f"warning: {run_dir / 'results.jsonl'}: 1 record unverified: its key "
                                         f"file {gone} is missing"]
    without_key(run_dir, None)                                 # run.json stripped of "signing": not resumable
    done = run_cli("--output-dir", str(run_dir.parent), "--resume", run_dir.name)
    assert done.returncode == 2 and len(warnings_of(done.stderr)) == 1 and "names no signing key" in done.stderr
    shown = report(run_dir)                                    # ... and its signed lines do not pass for old ones
    assert warnings_of(shown.stderr) == [f"warning: {run_dir / 'results.jsonl'}: 1 record unverified: its lines "
                                         f"carry signatures but its run.json names no signing key"]


# ---------------------------------------------------------------- (6) runs from before signing

def old_record(cand: str, speedup: float | None, version: int = 1) -> dict:
    return {"schema_version": version, "run_id": "old", "problem": "level1/001_linear_relu",
            "solution": f"level1/001_linear_relu/{cand}", "status": "ok" if speedup else "incorrect",
            "correct": bool(speedup), "flags": [], "error": None if speedup else "boom", "speedup": speedup,
            "device": "cpu"}


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_unsigned_run_still_reports_and_compares_with_a_notice(tmp_path, version):
    out = tmp_path / "results"
    for run_id in ("old-a", "old-b"):
        run_dir = out / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"schema_version": version, "run_id": run_id}))
        (run_dir / "results.jsonl").write_text("".join(json.dumps(old_record(c, s, version)) + "\n"
                                                       for c, s in (("a", 1.23), ("b", None))))
    done = run_cli("report", "old-a", "--output-dir", str(out))
    assert done.returncode == 0 and "1.23x" in done.stdout and "pairs 2, correct 1" in done.stdout
    assert warnings_of(done.stderr) == [f"warning: {out / 'old-a' / 'results.jsonl'}: 2 records unverified: its "
                                        f"run.json names no signing key (a run from before records were signed)"]
    compared = run_cli("compare", "old-a", "old-b", "--output-dir", str(out), "--json")
    assert compared.returncode == 0 and "Traceback" not in compared.stderr
    assert sum("records unverified" in line for line in warnings_of(compared.stderr)) == 2
    assert [json.loads(line)["verdict"] for line in compared.stdout.splitlines()] == ["SAME", "FAILING"]


# ---------------------------------------------------------------- (5) sign and verify

def test_sign_verify_round_trip_floats_and_unicode():
    key = os.urandom(32)
    record = {"schema_version": 2, "problem": "level1/ünïcødé_✓_日本", "solution": "s/\u2028 \U0001f680 \"q\"\\",
              "speedup": 1 / 3, "tiny": 5e-324, "huge": 1.7976931348623157e308, "neg_zero": -0.0, "sum": 0.1 + 0.2,
              "big": 2 ** 70, "exp": 1e16, "nested": {"z": [1.5, None, True], "a": {"ci": (0.9, 1.1)}}}
    line = signed_line(record, key)
    back = json.loads(line)
    assert line.endswith(b"\n") and back["hmac"] == sign(back, key) and verify_line(back, key) is Verdict.VALID
    assert back["speedup"] == 1 / 3 and back["nested"]["a"]["ci"] == [0.9, 1.1] and back["problem"] == record["problem"]
    reordered = json.loads(json.dumps(dict(reversed(list(back.items()))), ensure_ascii=False, indent=1))
    assert verify_line(reordered, key) is Verdict.VALID                  # the order and spacing of a line do not count
    assert verify_line({**back, "speedup": 0.34}, key) is Verdict.BAD_SIGNATURE
    assert verify_line({**back, "extra": 1}, key) is Verdict.BAD_SIGNATURE
    assert verify_line({**back, "hmac": back["hmac"].upper()}, key) is Verdict.BAD_SIGNATURE
    assert verify_line({**back, "hmac": 7}, key) is Verdict.BAD_SIGNATURE
    assert verify_line(back, os.urandom(32)) is Verdict.BAD_SIGNATURE
    assert verify_line({k: v for k, v in back.items() if k != "hmac"}, key) is Verdict.UNSIGNED
    assert verify_line(back, None) is Verdict.NO_KEY


def test_run_key_file_round_trip_and_errors(tmp_path):
    key = RunKey.create(tmp_path / "cache", "run-1")
    assert key.path.parent == (tmp_path / "cache" / "keys").resolve() and key.path.name.startswith("run-1-")
    assert RunKey.load(key.path) == key and key.secret.hex() not in repr(key)
    assert key.record() == {"algorithm": "hmac-sha256", "key_file": str(key.path)}
    assert [p.name for p in key.path.parent.iterdir()] == [key.path.name]      # no temporary file left behind
    with pytest.raises(KeyFileError, match="is missing"):
        RunKey.load(tmp_path / "nope.key")
    (tmp_path / "bad.key").write_text("abc\n")
    with pytest.raises(KeyFileError, match="is not a key file"):
        RunKey.load(tmp_path / "bad.key")
    assert signing.lookup({"schema_version": 2}).key is None


def test_store_signs_lines_and_names_unsigned_lines_written_during_the_run(tmp_path):
    warnings: list[str] = []
    store = RunStore.create(tmp_path / "results", {"config": {"cache_dir": str(tmp_path / "cache")}},
                            warnings.append)
    assert "signing" in json.loads(store.run_json.read_text())
    store.append({**old_record("a", float("nan"), 2), "speedup_ci": (float("inf"), 1.0)})     # NaN/Inf: strings
    append_lines(store.results_path, old_record("intruder", 9.0, 2))
    store.append(old_record("b", 1.0, 2))
    store.finish()
    assert len(warnings) == 1 and "was appended to by another process during the run (1 line not signed by " \
                                  "this run: 2)" in warnings[0]
    lines = line_records(store.results_path)
    assert [r["solution"].rsplit("/", 1)[-1] for r in lines] == ["a", "b"]
    assert all(verify_line(r, store._key) is Verdict.VALID for r in lines)
    assert [r.to_json() for r in RunStore.open(tmp_path / "results", store.run_id).records()] == lines
    assert [r.to_json() for r in store.records()] == lines             # the writing store holds what it wrote
