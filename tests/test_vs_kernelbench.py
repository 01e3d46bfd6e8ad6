"""benchmarks/vs_kernelbench.py: its pure parts, and its --dry-run (KernelBench checkout extracted, kernelbench.eval
imported with the carried wheels and stubs, the 8 problems imported, candidates written, our discovery) where the
KernelBench mirror is on this machine. Nothing here runs a pair."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("vs_kernelbench", REPO / "benchmarks" / "vs_kernelbench.py")
vs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs)

MIRROR = vs.DEFAULT_MIRROR
WHEELS = REPO / ".whl"
KB_DEPS = ("pydantic", "requests", "tqdm", "dotenv")


def test_eight_pairs_three_three_two():
    levels = [level for level, _, _ in vs.PROBLEMS]
    assert (levels.count(1), levels.count(2), levels.count(3)) == (3, 3, 2)
    assert all(stem.split("_", 1)[0] == str(pid) for _, pid, stem in vs.PROBLEMS)


def test_ids_and_candidate():
    assert vs.our_problem_id(1, 1, "1_Square_matrix_multiplication_") == \
        "kernelbench-level1/001_Square_matrix_multiplication_"
    src = vs.aa_source("class Model: pass\n")
    assert src.startswith("class Model: pass\n") and "class ModelNew(Model):" in src


def test_table_reads_records_and_missing_figures():
    record = {"worker": {"phases": {"total": 4.0, "reference_setup": 1.5}}}
    assert vs.phases_s(record) == 5.5 and vs.phases_s({}) is None
    rep = {"index": 0, "order": "kb-ours",
           "kb": {"wall_s": 10.0, "pairs": [{"pair": "level1/x", "wall_s": 10.0, "speedup": 1.0}]},
           "ours": {"wall_s": None, "pairs": []}}
    lines = vs.table(rep) + vs.summary([rep])
    assert any("level1/x" in line and "10.0" in line for line in lines)


def _deps_available() -> bool:
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if any(WHEELS.glob(f"pydantic_core-*-{here}-*.whl")):
        return True
    return all(importlib.util.find_spec(name) is not None for name in KB_DEPS)


@pytest.mark.skipif(not (MIRROR / "HEAD").is_file(), reason=f"no KernelBench mirror at {MIRROR}")
def test_dry_run(tmp_path):
    if not _deps_available():
        pytest.skip("kernelbench.eval's deps: neither installed nor in .whl/ (python benchmarks/vs_kernelbench.py "
                    "--pack)")
    out = tmp_path / "dry.json"
    wheels = ["--wheels", str(WHEELS)] if WHEELS.is_dir() else []
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "vs_kernelbench.py"), "--dry-run",
                           "--kb-root", str(MIRROR), *wheels, "--workdir", str(tmp_path / "work"),
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dry run ok" in done.stdout
    report = json.loads(out.read_text())
    assert len(report["kb_commit"]) == 40
    assert [r["loaded"] for r in report["kb_check"]] == [True] * 8
    assert len(report["ours_check"]["pairs"]) == 8
    for level, pid, stem in vs.PROBLEMS:
        ours = tmp_path / "work" / "problems" / f"{vs.our_problem_id(level, pid, stem)}.py"
        cand = tmp_path / "work" / "solutions" / vs.our_problem_id(level, pid, stem) / f"{vs.CANDIDATE}.py"
        assert cand.read_text() == vs.aa_source(ours.read_text())
