"""Stage 5, time: one measurement object per timing mode, as in nvbench. Each measures one sample of a call.

- `ColdCuda` (mode `cold`): the device is idle, the L2 is flushed (a write of twice its size), a start event is
  recorded, the call runs, an event on the current stream marks where that stream ended, the whole device is
  synchronized and a second end event is recorded. The sample is start -> stream end, plus any device work that
  outlasted the stream by more than an empty sample's sync tail (measured once per meter): work the call left on
  other streams counts, while the constant cost of the host's synchronize and the end event's launch (several
  microseconds, which would shrink every speedup toward 1) does not.
- `GraphCuda` (mode `graph`, for calls so short that launch overhead dominates): `graph_calls` calls are captured
  once in a CUDA graph, each over input buffers of its own and keeping its own output; a sample copies one fresh
  input set into each call's buffers, queues a short
  spin kernel (so the graph's launch hides behind it), replays the graph `replays` times between the same events
  and divides by `graph_calls * replays`. No L2 flush: a replay is a hot batch, as in nvbench's batch measurements.
  The parent picks `replays` (`graph_replays`) from the reference's own replay time so that a sample holds ~3 ms
  of work: the parent's clock around each sample (the `timing_inconsistent` check) cannot see a forged report on a
  sample much shorter than the ~3 ms of per-sample work both sides do, and its noise.
- `HostClock` (the CPU path): the CPU's caches flushed (a write of twice the last-level cache, `HostCacheFlusher`),
  then perf_counter_ns around the call.

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

from harness.worker.flusher import cpu_cache_bytes, flush_bytes  # noqa: F401 - cpu_cache_bytes re-exported
from harness.shared.stats import (  # noqa: F401 - re-exported
    GRAPH_MAX_REPLAYS, GRAPH_SAMPLE_MS, graph_replays, summarize)

_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_event_synchronize = torch.cuda.Event.synchronize
_synchronize = torch.cuda.synchronize
_graph_replay = torch.cuda.CUDAGraph.replay
_copy = torch.Tensor.copy_
_clone = torch.Tensor.clone
_spin = torch.cuda._sleep
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


@dataclass(frozen=True)
class SampleTimes:
    ms: float                   # what the sample is worth: device time (events) or host time (CPU)
    host_ms: float
    lag_ms: float = 0.0         # device work past the stream's end, beyond an empty sample's sync tail
    flush_ms: float = 0.0       # host time of the cache flush before the call (CPU path; on the GPU it is queued)

TAIL_SLACK_MS = 0.005           # off-stream work shorter than this past the stream's end is not told from jitter
TAIL_CAP_MS = 0.2               # the most a sync tail (and its slack) may discount, whatever was running meanwhile


class L2Flusher:
    """Writes 2x the L2 before a cold sample. `reset_persisting` (the driver's cuCtxResetPersistingL2Cache, bound
    before candidate code ran) first makes lines a call marked persisting normal again: the write alone would
    leave a candidate's weights in the persisting part of the L2, warm for its next sample."""

    def __init__(self, device: torch.device, reset_persisting: Callable[[], int] | None = None):
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or 64 * 1024 * 1024
        self.bytes = max(2 * l2, 128 * 1024 * 1024)
        self.buffer = torch.empty(self.bytes // 4, dtype=torch.int32, device=device)
        self.reset_persisting = reset_persisting

    def __call__(self) -> None:
        if self.reset_persisting is not None:
            self.reset_persisting()
        self.buffer.fill_(0x5A5A5A5A)


class HostCacheFlusher:
    """The CPU path's cold sample: writes 2x the last-level cache before the call (32 MiB assumed where sysfs does
    not say; at least 16 MiB, at most 512 MiB), so that a call's inputs, its outputs and the memory the allocator
    hands it come from memory on both sides, not from whatever each process's heap history left in the caches.
    Without it, a short call ran faster in a process whose allocator gave it memory the caches still held, and an
    A/A `calibrate` read one side faster in every process pair; with it (as cold as the GPU path's samples) it reads
    1.0 (docs/measurements.md)."""

    def __init__(self, cache_bytes: int | None = None):
        self.bytes = flush_bytes(cache_bytes)
        self.buffer = torch.empty(self.bytes // 4, dtype=torch.int32)
        self.value = 0

    def __call__(self) -> None:
        self.value = (self.value + 1) & 0x7FFFFFFF     # a new value every time: no write can be skipped
        self.buffer.fill_(self.value)


Call = Callable[[list], Any]


class HostClock:
    """The CPU path's sample in one process (the reference's cold probe, lint): the caches flushed, then the call
    between perf_counter_ns. A pair's samples are staged instead (harness.worker.arena, timed by the parent)."""
    mode = "host"
    clock = "host"

    def __init__(self, flusher: Callable[[], None] | None = None):
        self.flusher = flusher

    def measure(self, call: Call, inputs: list) -> tuple[SampleTimes, Any, list]:
        t0 = _perf_counter_ns()
        if self.flusher is not None:
            self.flusher()
        t1 = _perf_counter_ns()
        out = call(inputs)
        t2 = _perf_counter_ns()
        ms = (t2 - t1) / 1e6
        return SampleTimes(ms, ms, flush_ms=(t1 - t0) / 1e6), out, inputs


class ColdCuda:
    mode = "cold"
    clock = "cuda_event"
    TAIL_SAMPLES = 15

    COVER_CYCLES = 100_000                           # ~50 us of spinning: about what a flush of 128 MiB takes

    def __init__(self, device: torch.device, flusher: L2Flusher | None, cover: bool = False):
        self.device, self.flusher = device, flusher
        self.cover = cover              # staged samples: the L2 was flushed by another process (harness.worker.flusher)
        self.start, self.stream_end, self.device_end = (_Event(enable_timing=True) for _ in range(3))
        self.tail: tuple[float, float] | None = None     # (median, slack) of an empty sample's sync tail, ms

    def _begin(self) -> int:
        """The device idle, then the flush queued before the start event (its ~50 us cover the host's launch of
        the call's first kernels, which then start as the event is recorded); where the flush came from another
        process (`cover`), a spin of as long in its place, which touches no memory."""
        _synchronize(self.device)
        if self.flusher is not None:
            self.flusher()
        elif self.cover:
            _spin(self.COVER_CYCLES)
        h0 = _perf_counter_ns()
        _event_record(self.start)
        return h0

    def _end(self, h0: int, calls: int = 1) -> SampleTimes:
        """Stream time, plus whatever device work outlasted the stream by more than an empty sample's tail (the
        host's synchronize and the end event's launch, which every sample would otherwise carry as a constant)."""
        _event_record(self.stream_end)
        _synchronize(self.device)
        _event_record(self.device_end)
        h1 = _perf_counter_ns()
        _event_synchronize(self.device_end)
        stream = _event_elapsed(self.start, self.stream_end)
        lag = _event_elapsed(self.stream_end, self.device_end)
        tail, slack = self.tail if self.tail is not None else (lag, 0.0)
        beyond = lag - tail
        total = stream + (beyond if beyond > slack else 0.0)
        return SampleTimes(total / calls, (h1 - h0) / 1e6 / calls, beyond / calls)

    def calibrate(self) -> None:
        """The sync tail of an empty sample, measured the way samples are (flush, events, synchronize)."""
        if self.tail is not None:
            return
        lags = []
        for _ in range(self.TAIL_SAMPLES):
            self._begin()
            _event_record(self.stream_end)
            _synchronize(self.device)
            _event_record(self.device_end)
            _event_synchronize(self.device_end)
            lags.append(_event_elapsed(self.stream_end, self.device_end))
        centre = statistics.median(lags)
        spread = statistics.median(abs(x - centre) for x in lags) * 1.4826
        self.tail = (min(centre, TAIL_CAP_MS), min(max(TAIL_SLACK_MS, 4 * spread), TAIL_CAP_MS))

    def measure(self, call: Call, inputs: list) -> tuple[SampleTimes, Any, list]:
        self.calibrate()
        h0 = self._begin()
        out = call(inputs)
        return self._end(h0), out, inputs


class GraphCaptureError(Exception):
    """The call cannot be captured in a CUDA graph (a host sync, a CPU tensor, dynamic shapes...)."""


_warm_up_streams: dict = {}


def _warm_up_stream(device: torch.device) -> torch.cuda.Stream:
    """The one side stream a process warms its captured calls up on: a fresh stream per capture made cuBLAS keep a
    workspace of its own for each (32 MiB on Hopper), so a reference that captured once per pair grew by that much
    a pair until it outgrew its planned share (graph capture's `OutOfMemoryError`)."""
    stream = _warm_up_streams.get(device)
    if stream is None:
        stream = _warm_up_streams[device] = torch.cuda.Stream(device)
    return stream


class GraphCuda(ColdCuda):
    mode = "graph"

    def __init__(self, device: torch.device, flusher: L2Flusher | None, calls: int, replays: int = 1,
                 staged: bool = False):
        super().__init__(device, flusher)
        self.calls, self.replays = calls, max(1, replays)
        self.staged = staged            # the input sets lie where the reference staged them: captured over as they
        self.graph = None               # are, never copied (harness.worker.arena)
        self.static_inputs: list = []
        self.static_out: Any = None

    LAUNCH_COVER_CYCLES = 100_000                    # ~50 us of spinning at 2 GHz: longer than a graph launch

    def _begin(self) -> int:
        """No L2 flush: a replay is a hot batch (calls 2..n find their data in the L2 anyway, as in nvbench's
        batch measurements). A short spin kernel goes first so the host's graph launch overlaps it and the
        start event sees the graph's first kernel start at once."""
        _synchronize(self.device)
        _spin(self.LAUNCH_COVER_CYCLES)
        h0 = _perf_counter_ns()
        _event_record(self.start)
        return h0

    def capture(self, call: Call, inputs: list[list]) -> None:
        """Captures `calls` calls, call k on its own input buffers (a copy of inputs[k]) and keeping its own output:
        a captured call that skips its work and hands back another call's output is checked against the
        reference's output for its own inputs, and fails."""
        try:
            self.static_inputs = inputs if self.staged else [
                [_clone(x) if isinstance(x, torch.Tensor) else x for x in one] for one in inputs]
            side = _warm_up_stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    call(self.static_inputs[0])
            torch.cuda.current_stream(self.device).wait_stream(side)
            _synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            outs = []
            with torch.cuda.graph(graph):
                for k in range(self.calls):
                    outs.append(call(self.static_inputs[k % len(self.static_inputs)]))
            _synchronize(self.device)
        except Exception as exc:                       # noqa: BLE001 - any failure means: not capturable
            self.graph = None
            raise GraphCaptureError(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}") from None
        self.graph, self.static_out = graph, outs

    def measure(self, call: Call, inputs: list[list]) -> tuple[SampleTimes, Any, list]:
        """`inputs`: one input set per captured call. Returns the outputs of every captured call."""
        if self.graph is None:
            self.capture(call, inputs)
        self.calibrate()
        for statics, fresh in zip(self.static_inputs, inputs if not self.staged else []):
            for static, x in zip(statics, fresh):
                if isinstance(static, torch.Tensor):
                    _copy(static, x)
        h0 = self._begin()
        for _ in range(self.replays):
            _graph_replay(self.graph)
        return self._end(h0, self.calls * self.replays), self.static_out, self.static_inputs


def make_flusher(device: str, reset_persisting: Callable[[], int] | None = None) -> L2Flusher | HostCacheFlusher:
    """What a cold sample flushes first: the GPU's L2, or on the CPU path its caches."""
    if device == "cpu":
        return HostCacheFlusher()
    return L2Flusher(torch.device(device), reset_persisting)


def measurement(mode: str, device: str, flusher: L2Flusher | HostCacheFlusher | None, graph_calls: int,
                graph_replays: int = 1, staged: bool = False):
    """The measurement object for a mode ('cold' | 'graph'; any mode on the CPU is the host clock); `staged`: the
    inputs lie where the reference staged them (graph mode captures over them instead of copies)."""
    if device == "cpu":
        return HostClock(flusher)
    if mode == "graph":
        return GraphCuda(torch.device(device), flusher, graph_calls, graph_replays, staged)
    return ColdCuda(torch.device(device), flusher, cover=staged and flusher is None)


def time_calls(prepare: Callable[[int], list], call: Call, device: str, warmup: int, samples: int,
               flush_l2: bool) -> dict[str, Any]:
    """Plain cold timing of `call(prepare(i))` for i in range(samples), for lint and the timer floor (pairs are
    timed by the paired protocol, harness.run.evaluate)."""
    flusher = make_flusher(device) if flush_l2 else None
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
    """Median time of an empty sample: the smallest time the clock reads (two events with nothing between)."""
    stats = time_calls(lambda i: [], lambda inputs: None, device, warmup=5, samples=samples, flush_l2=False)
    return stats["median_ms"]
