"""Stage 5, time: one measurement object per timing mode, as in nvbench. Each measures one sample of a call.

- `ColdCuda` (mode `cold`): the device is idle, the L2 is flushed (a write of twice its size), a start event is
  recorded, the call runs, an event on the current stream marks where that stream ended, the whole device is
  synchronized and a second end event is recorded: the sample is start -> device end, so work the call left on
  other streams counts. The gap between the two end events is kept too: a large one means the call returned
  before its work was done.
- `GraphCuda` (mode `graph`, for calls so short that launch overhead dominates): `graph_calls` calls are captured
  once in a CUDA graph over static input buffers; a sample copies fresh inputs into those buffers, flushes the
  L2, replays the graph between the same events and divides by `graph_calls`.
- `HostClock` (the CPU path): perf_counter_ns around the call.

The clock functions are bound when this module is imported, before any candidate code runs in the worker, so a
candidate that replaces torch.cuda.Event.elapsed_time or time.perf_counter later does not change what we read;
`timers_tampered()` says whether it tried.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_event_synchronize = torch.cuda.Event.synchronize
_synchronize = torch.cuda.synchronize
_graph_replay = torch.cuda.CUDAGraph.replay
_ORIGINALS = {
    "time.perf_counter_ns": (time, "perf_counter_ns", _perf_counter_ns),
    "time.perf_counter": (time, "perf_counter", time.perf_counter),
    "torch.cuda.Event": (torch.cuda, "Event", _Event),
    "torch.cuda.Event.record": (torch.cuda.Event, "record", _event_record),
    "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", _event_elapsed),
    "torch.cuda.synchronize": (torch.cuda, "synchronize", _synchronize),
    "torch.cuda.CUDAGraph.replay": (torch.cuda.CUDAGraph, "replay", _graph_replay),
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


@dataclass(frozen=True)
class SampleTimes:
    ms: float                   # what the sample is worth: device time (events) or host time (CPU)
    host_ms: float
    lag_ms: float = 0.0


class L2Flusher:
    def __init__(self, device: torch.device):
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or 64 * 1024 * 1024
        self.bytes = max(2 * l2, 128 * 1024 * 1024)
        self.buffer = torch.empty(self.bytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.fill_(0x5A5A5A5A)


Call = Callable[[list], Any]


class HostClock:
    mode = "host"
    clock = "host"

    def measure(self, call: Call, inputs: list) -> tuple[SampleTimes, Any, list]:
        t0 = _perf_counter_ns()
        out = call(inputs)
        t1 = _perf_counter_ns()
        ms = (t1 - t0) / 1e6
        return SampleTimes(ms, ms), out, inputs


class ColdCuda:
    mode = "cold"
    clock = "cuda_event"

    def __init__(self, device: torch.device, flusher: L2Flusher | None):
        self.device, self.flusher = device, flusher
        self.start, self.stream_end, self.device_end = (_Event(enable_timing=True) for _ in range(3))

    def measure(self, call: Call, inputs: list) -> tuple[SampleTimes, Any, list]:
        _synchronize(self.device)
        if self.flusher is not None:
            self.flusher()
        h0 = _perf_counter_ns()
        _event_record(self.start)
        out = call(inputs)
        _event_record(self.stream_end)
        _synchronize(self.device)
        _event_record(self.device_end)
        h1 = _perf_counter_ns()
        _event_synchronize(self.device_end)
        total = _event_elapsed(self.start, self.device_end)
        lag = total - _event_elapsed(self.start, self.stream_end)
        return SampleTimes(total, (h1 - h0) / 1e6, lag), out, inputs


class GraphCaptureError(Exception):
    """The call cannot be captured in a CUDA graph (a host sync, a CPU tensor, dynamic shapes...)."""


class GraphCuda(ColdCuda):
    mode = "graph"

    def __init__(self, device: torch.device, flusher: L2Flusher | None, calls: int):
        super().__init__(device, flusher)
        self.calls = calls
        self.graph = None
        self.static_inputs: list = []
        self.static_out: Any = None

    def capture(self, call: Call, inputs: list) -> None:
        try:
            self.static_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    call(self.static_inputs)
            torch.cuda.current_stream(self.device).wait_stream(side)
            _synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(self.calls):
                    out = call(self.static_inputs)
            _synchronize(self.device)
        except Exception as exc:                       # noqa: BLE001 - any failure means: not capturable
            self.graph = None
            raise GraphCaptureError(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}") from None
        self.graph, self.static_out = graph, out

    def measure(self, call: Call, inputs: list) -> tuple[SampleTimes, Any, list]:
        if self.graph is None:
            self.capture(call, inputs)
        for static, fresh in zip(self.static_inputs, inputs):
            if isinstance(static, torch.Tensor):
                static.copy_(fresh)
        _synchronize(self.device)
        if self.flusher is not None:
            self.flusher()
        h0 = _perf_counter_ns()
        _event_record(self.start)
        _graph_replay(self.graph)
        _event_record(self.stream_end)
        _synchronize(self.device)
        _event_record(self.device_end)
        h1 = _perf_counter_ns()
        _event_synchronize(self.device_end)
        total = _event_elapsed(self.start, self.device_end)
        lag = total - _event_elapsed(self.start, self.stream_end)
        n = self.calls
        return SampleTimes(total / n, (h1 - h0) / 1e6 / n, lag / n), self.static_out, self.static_inputs


def measurement(mode: str, device: str, flusher: L2Flusher | None, graph_calls: int):
    """The measurement object for a mode ('cold' | 'graph'; any mode on the CPU is the host clock)."""
    if device == "cpu":
        return HostClock()
    if mode == "graph":
        return GraphCuda(torch.device(device), flusher, graph_calls)
    return ColdCuda(torch.device(device), flusher)


def time_calls(prepare: Callable[[int], list], call: Call, device: str, warmup: int, samples: int,
               flush_l2: bool) -> dict[str, Any]:
    """Plain cold timing of `call(prepare(i))` for i in range(samples), for lint and the timer floor (pairs are
    timed by the paired protocol, harness.evaluate)."""
    flusher = L2Flusher(torch.device(device)) if flush_l2 and device != "cpu" else None
    meter = measurement("cold", device, flusher, 1)
    for w in range(warmup):
        call(prepare(-1 - w))
    times = []
    for i in range(samples):
        sample, out, _ = meter.measure(call, prepare(i))
        times.append(sample.ms)
        del out
    return {"clock": meter.clock, "l2_flush": flusher is not None, **summarize(times)}


def timer_floor(device: str, samples: int = 50) -> float:
    """Median time of an empty sample: the fixed cost every sample carries (sync latency, event launch)."""
    stats = time_calls(lambda i: [], lambda inputs: None, device, warmup=5, samples=samples, flush_l2=False)
    return stats["median_ms"]
