"""harness.results.report: aggregates over a run's records."""
from __future__ import annotations

import pytest

from harness.results import report


def test_aggregate_fast_p_and_geomean():
    recs = [{"status": "ok", "correct": True, "speedup": 2.0}, {"status": "ok", "correct": True, "speedup": 0.5},
            {"status": "incorrect", "correct": False, "speedup": None}, {"status": "timeout", "correct": False,
                                                                        "speedup": None}]
    agg = report.aggregate(recs)
    assert agg["correctness_rate"] == 0.5
    assert agg["geomean_speedup"] == pytest.approx(1.0)
    assert agg["fast_p"] == {"0.0": 0.5, "1.0": 0.25, "1.5": 0.25, "2.0": 0.0}
