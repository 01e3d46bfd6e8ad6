"""benchmarks/scaling.py's arithmetic (issue 45 item 1): its settings and the efficiency columns of its table, on
made-up runs. Nothing here runs a pair; the GPU runs are scripts/gpu_check.sh's `scaling` phase."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("scaling_bench", REPO / "benchmarks" / "scaling.py")
scaling = importlib.util.module_from_spec(_spec)
sys.modules["scaling_bench"] = scaling                 # (its dataclasses look their module up)
_spec.loader.exec_module(scaling)


def _run(evaluate_s: float, span_s: float) -> dict:
    return {"run_dir": "r", "evaluate_s": evaluate_s, "span_s": span_s, "builds_compiled": 0, "builds_cached": 32,
            "records": {}}


def test_both_executors_run_on_every_count_dask_on_one_gpu_too():
    """Issue 45: 1, 2 and 4 GPUs with the local and the dask executors; dask:1 is dask's own one-GPU baseline."""
    names = [s.name for s in scaling.default_settings([1, 2, 4])]
    assert sorted(names) == ["dask:1", "dask:2", "dask:4", "local:1", "local:2", "local:4"]
    usable = scaling.usable_settings(scaling.default_settings([1, 2, 4]), "cuda", 2, None)
    assert [s.name for s in usable] == ["local:1", "local:2", "dask:2", "dask:1"]     # (4 GPUs: said, left out)


def test_efficiency_against_local_one_against_the_executors_own_one_gpu_and_over_the_spans():
    """A dask run pays a fixed start on one GPU as on two: against local:1 it reads low, against dask:1 it reads
    what two GPUs gave it; the span column leaves out what comes before the first pair."""
    settings = [scaling.Setting("local", 1), scaling.Setting("dask", 1), scaling.Setting("local", 2),
                scaling.Setting("dask", 2)]
    runs = {"local:1": _run(180.0, 170.0), "dask:1": _run(200.0, 172.0), "local:2": _run(95.0, 86.0),
            "dask:2": _run(110.0, 88.0)}
    rows = {r["setting"]: r for r in scaling.figures(runs, settings)}
    assert rows["local:2"]["efficiency"] == rows["local:2"]["own_efficiency"] == 180.0 / (2 * 95.0)
    assert rows["dask:2"]["efficiency"] == 180.0 / (2 * 110.0)
    assert rows["dask:2"]["own_efficiency"] == 200.0 / (2 * 110.0)
    assert rows["dask:2"]["span_efficiency"] == 170.0 / (2 * 88.0)
    assert rows["dask:1"]["own_efficiency"] == 1.0
    lines = scaling.table(list(rows.values()))
    assert "own eff." in lines[0] and "span eff." in lines[0]
    assert "0.909" in next(line for line in lines if line.startswith("dask ") and " 2 " in line)


def test_a_setting_without_its_one_gpu_run_has_no_own_efficiency():
    settings = [scaling.Setting("local", 1), scaling.Setting("dask", 2)]
    rows = scaling.figures({"local:1": _run(180.0, 170.0), "dask:2": _run(110.0, 88.0)}, settings)
    dask2 = next(r for r in rows if r["setting"] == "dask:2")
    assert dask2["own_efficiency"] is None and dask2["efficiency"] == 180.0 / 220.0
    assert "-" in scaling.table(rows)[3]
