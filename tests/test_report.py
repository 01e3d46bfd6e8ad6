"""harness.results.report: aggregates over a run's records."""
from __future__ import annotations

import pytest

from harness.results import report
from harness.results.records import as_records


def rec(i: int, status: str, speedup: float | None) -> dict:
    problem = f"level1/{i:03d}_p"
    return {"schema_version": 2, "problem": problem, "solution": f"{problem}/c", "status": status,
            "correct": status == "ok", "flags": [], "error": None, "speedup": speedup, "device": "cpu"}


def test_aggregate_fast_p_and_geomean():
    recs = as_records([rec(1, "ok", 2.0), rec(2, "ok", 0.5), rec(3, "incorrect", None), rec(4, "timeout", None)])
    agg = report.aggregate(recs)
    assert agg["correctness_rate"] == 0.5
    assert agg["geomean_speedup"] == pytest.approx(1.0)
    assert agg["fast_p"] == {"0.0": 0.5, "1.0": 0.25, "1.5": 0.25, "2.0": 0.0}
