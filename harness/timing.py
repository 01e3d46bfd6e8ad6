"""Stage 5, time: cold-cache samples of one call each, like nvbench's cold mode.

GPU: the device is idle, the L2 is flushed (a write of twice its size), a start event is recorded, the call runs,
an event on the current stream marks where that stream ended, the whole device is synchronized and a second end
event is recorded: the sample is start -> device end, so work the call left on other streams counts. The gap
between the two end events is kept too: a large one means the call returned before its work was done.

CPU: a host clock (perf_counter_ns) around the call.

The clock functions are bound when this module is imported, before any candidate code runs in the worker, so a
candidate that replaces torch.cuda.Event.elapsed_time or time.perf_counter later does not change what we read;
`timers_tampered()` says whether it tried.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_event_synchronize = torch.cuda.Event.synchronize
_synchronize = torch.cuda.synchronize
_ORIGINALS = {
    "time.perf_counter_ns": (time, "perf_counter_ns", _perf_counter_ns),
    "time.perf_counter": (time, "perf_counter", time.perf_counter),
    "torch.cuda.Event": (torch.cuda, "Event", _Event),
    "torch.cuda.Event.record": (torch.cuda.Event, "record", _event_record),
    "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", _event_elapsed),
    "torch.cuda.synchronize": (torch.cuda, "synchronize", _synchronize),
}


def timers_tampered() -> list[str]:
    """Names of clock functions that no longer are the ones bound at import."""
    return [name for name, (owner, attr, original) in _ORIGINALS.items() if getattr(owner, attr, None) is not original]


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


class L2Flusher:
    def __init__(self, device: torch.device):
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or 64 * 1024 * 1024
        self.bytes = max(2 * l2, 128 * 1024 * 1024)
        self.buffer = torch.empty(self.bytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.fill_(0x5A5A5A5A)


def time_calls(prepare: Callable[[int], Any], call: Callable[[Any], Any], device: str, warmup: int, samples: int,
               flush_l2: bool, after_call: Callable[[int, Any, Any], None] | None = None) -> dict[str, Any]:
    """Time `call(prepare(i))` for i in range(samples); warmup calls use prepare(-1), prepare(-2), ...

    `prepare` (inputs for sample i) runs before the device is idled and the L2 flushed; `after_call(i, prepared,
    output)` runs once the sample is complete, outside the timed region.
    """
    if device == "cpu":
        return _time_cpu(prepare, call, warmup, samples, after_call)
    return _time_cuda(prepare, call, torch.device(device), warmup, samples, flush_l2, after_call)


def _time_cpu(prepare, call, warmup, samples, after_call) -> dict[str, Any]:
    for w in range(warmup):
        call(prepare(-1 - w))
    times = []
    for i in range(samples):
        prepared = prepare(i)
        t0 = _perf_counter_ns()
        out = call(prepared)
        t1 = _perf_counter_ns()
        times.append((t1 - t0) / 1e6)
        if after_call is not None:
            after_call(i, prepared, out)
        del out
    return {"clock": "host", "l2_flush": False, **summarize(times)}


def _time_cuda(prepare, call, device, warmup, samples, flush_l2, after_call) -> dict[str, Any]:
    flusher = L2Flusher(device) if flush_l2 else None
    for w in range(warmup):
        call(prepare(-1 - w))
    _synchronize(device)
    start, stream_end, device_end = _Event(enable_timing=True), _Event(enable_timing=True), _Event(enable_timing=True)
    times, lags, host = [], [], []
    for i in range(samples):
        prepared = prepare(i)
        _synchronize(device)
        if flusher is not None:
            flusher()
        h0 = _perf_counter_ns()
        _event_record(start)
        out = call(prepared)
        _event_record(stream_end)
        _synchronize(device)
        _event_record(device_end)
        h1 = _perf_counter_ns()
        _event_synchronize(device_end)
        total = _event_elapsed(start, device_end)
        times.append(total)
        lags.append(total - _event_elapsed(start, stream_end))
        host.append((h1 - h0) / 1e6)
        if after_call is not None:
            after_call(i, prepared, out)
        del out
    result = {"clock": "cuda_event", "l2_flush": flusher is not None, **summarize(times)}
    result["host_median_ms"] = statistics.median(host)
    result["stream_lag_median_ms"] = statistics.median(lags)
    return result


def timer_floor(device: str, samples: int = 50) -> float:
    """Median time of an empty sample: the fixed cost every sample carries (sync latency, event launch)."""
    stats = time_calls(lambda i: None, lambda prepared: None, device, warmup=5, samples=samples, flush_l2=False)
    return stats["median_ms"]
