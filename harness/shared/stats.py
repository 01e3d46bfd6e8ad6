"""Timing arithmetic the parent needs without torch: a side's sample summary and graph mode's replays per sample.
harness.worker.timing (the workers' clocks, which import torch) re-exports these."""
from __future__ import annotations

import math
import statistics
from typing import Any

GRAPH_SAMPLE_MS = 3.0           # graph mode: a sample replays the graph until it holds about this much device time
GRAPH_MAX_REPLAYS = 200


def summarize(samples_ms: list[float]) -> dict[str, Any]:
    ordered = sorted(samples_ms)
    n = len(ordered)
    if n == 0:
        return {"n": 0}
    quartiles = statistics.quantiles(ordered, n=4) if n >= 2 else [ordered[0]] * 3
    return {
        "n": n,
        "median_ms": statistics.median(ordered),
        "mean_ms": statistics.fmean(ordered),
        "stdev_ms": statistics.stdev(ordered) if n >= 2 else 0.0,
        "min_ms": ordered[0],
        "max_ms": ordered[-1],
        "iqr_ms": quartiles[2] - quartiles[0],
        "samples_ms": [round(s, 6) for s in samples_ms],
    }


def graph_replays(call_ms: float | None, graph_calls: int) -> int:
    """Replays per graph sample for GRAPH_SAMPLE_MS of device time, from one call's replay time (`call_ms`, the
    reference's, measured with one replay a sample)."""
    if not isinstance(call_ms, (int, float)) or not call_ms > 0:
        return 1
    return max(1, min(GRAPH_MAX_REPLAYS, round(GRAPH_SAMPLE_MS / (graph_calls * call_ms))))


def geomean(values: list[float | None]) -> float | None:
    """The geometric mean of positive values; None when there are none or one is missing or not positive."""
    if not values or any(v is None or not v > 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
