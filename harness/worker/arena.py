"""Inputs placed by trusted code where a worker's call reads them (README, Hardening: the candidate's process runs
the call and nothing else).

On the CPU path every worker is started with an arena: a memfd the parent creates (harness.run.workerproc.Worker),
sealed against shrinking, inherited at KB_ARENA_FD. On the GPU (timing.staged_gpu) the arena is device memory the
reference allocates (cuMemAlloc, an allocation of its own), one for both sides since the two never run at once,
which the candidate maps through its CUDA IPC handle. The reference worker, a process where candidate code never
runs, is the *stager* of both sides of a pair: for each sample it checks that the previous sample's inputs are as it
wrote them (`mutates_inputs`), draws the sample's inputs from its seed and writes them into the arena of the side
that is to run (its own, or the candidate's, opened through the parent's /proc/<pid>/fd/<n> on the CPU); then the
flusher process (harness.worker.flusher) empties the caches, both sides stopped. The side that runs is an
*executor*: it views its arena and, on the parent's "call now" (messages.CallRequest, which names no seed), views
the inputs where the layout says they lie, calls, and answers where its output lies. On the CPU the parent's clock
around that request is the sample's time and the executor reports none; on the GPU the executor times its call with
CUDA events (harness.worker.timing, no flush of its own) and the parent's clock around the request checks them
(`timing_inconsistent`). It draws nothing and checks nothing.

  Stager    reference only: stage(side, seed) -> Layout; pristine copies (or keyed checksums) of what it wrote.
  Executor  both sides: views(layout) -> the call's inputs, read from the arena.
  serve     the candidate's loop of calls, answered from one table of request types (StagedCalls).

Runs only inside worker processes.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any

from harness.shared import messages as m
from harness.shared.points import span

ALIGN = 64                       # every tensor starts on a cache line of its own
GROWTH = 1 << 20                 # an arena grows in whole MiB (fewer remaps when a size changes a little)
ARENA_VAR = "KB_ARENA_FD"


REFERENCE, EXECUTOR, CANDIDATE = "reference", "executor", "candidate"
SIDES = (REFERENCE, EXECUTOR, CANDIDATE)   # whose arena the stager writes: its own (its compile baselines), the
                                           # reference's executor's (its eager samples), the candidate's


class ArenaError(Exception):
    """The arena cannot hold or show a sample's inputs (message says why)."""


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def plain_value(value: Any) -> bool:
    """A non-tensor input the layout can carry as it is (JSON)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(plain_value(v) for v in value)
    return False


class _Map:
    """One mapping of an arena's file: grown (mapped again) when a layout needs more than it maps. Older maps are
    kept while tensors may still view them (an mmap with exported buffers cannot be closed)."""

    def __init__(self, fd: int):
        self.fd, self.maps, self.size = fd, [], 0

    def grow(self, size: int, extend: bool = False) -> mmap.mmap:
        """A mapping of at least `size` bytes; `extend`: the file made that large first (the stager's; an executor
        finds it so, or the layout lies about it)."""
        if size > self.size or not self.maps:
            if os.fstat(self.fd).st_size < size:
                if not extend:
                    raise ArenaError(f"the arena holds {os.fstat(self.fd).st_size} bytes, the layout {size}")
                os.ftruncate(self.fd, size)
            self.maps.append(mmap.mmap(self.fd, max(size, 1), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
            self.size = max(size, 1)
            del self.maps[:-2]                          # the one before may still be viewed by the last sample
        return self.maps[-1]


def _host_bytes(mapped: mmap.mmap):
    import torch
    return torch.frombuffer(mapped, dtype=torch.uint8)


class _Interface:
    """Device memory for torch.as_tensor, without a copy."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}


def _device_bytes(address: int, nbytes: int):
    import torch
    return torch.as_tensor(_Interface(address, nbytes), device="cuda")


class DeviceBuffer:
    """Device memory of the arena's own (cuMemAlloc, outside torch's allocator: the IPC handle the candidate gets
    maps this allocation and nothing else of the reference's), as a uint8 tensor."""

    def __init__(self, nbytes: int):
        from harness.worker import cudadriver
        if cudadriver.mem_alloc is None:
            raise ArenaError("the CUDA driver is not bound in this worker")
        address, result = cudadriver.mem_alloc(nbytes)
        if address is None:
            raise ArenaError(f"cannot allocate {nbytes} bytes of device memory for the arena (CUresult {result})")
        self.address, self.nbytes = address, nbytes
        self.bytes = _device_bytes(address, nbytes)
        self._handle = ""
        from harness.worker.sampler import held_outside
        held_outside(nbytes)

    def handle(self) -> str:
        """Its CUDA IPC handle (base64), for the candidate to map."""
        if not self._handle:
            import base64
            from harness.worker import cudadriver
            raw, base = cudadriver.export(self.address)
            if raw is None or base != self.address:
                raise ArenaError(f"cannot export the arena's device memory (CUresult {base})")
            self._handle = base64.b64encode(raw).decode("ascii")
        return self._handle

    def free(self) -> None:
        from harness.worker import cudadriver
        self.bytes = None
        if self.address:
            cudadriver.synchronize()
            cudadriver.mem_free(self.address)
            self.address = 0
            from harness.worker.sampler import held_outside
            held_outside(-self.nbytes)


class _DeviceMemory:
    """The stager's device arena: grown (allocated again) when a layout needs more; the one before is kept while
    the last sample's views may still use it."""

    def __init__(self, export: bool):
        self.export, self.buffers = export, []

    def grow(self, size: int):
        if not self.buffers or self.buffers[-1].nbytes < size:
            self.buffers.append(DeviceBuffer(size))
            for old in self.buffers[:-2]:
                old.free()
            del self.buffers[:-2]
        return self.buffers[-1].bytes[:size]

    def describe(self) -> tuple[str, int]:
        return (self.buffers[-1].handle(), 0) if self.export and self.buffers else ("", 0)

    def handles(self) -> set[str]:
        """The IPC handles of the arena's buffers that were handed out."""
        return {b._handle for b in self.buffers if b._handle}

    def close(self) -> None:
        for old in self.buffers:
            old.free()
        self.buffers = []


class _FileMemory:
    """The stager's hold on one side's CPU arena (a memfd)."""

    def __init__(self, fd: int):
        self.fd, self.map = fd, _Map(fd)

    def grow(self, size: int):
        return _host_bytes(self.map.grow(size, extend=True))

    def describe(self) -> tuple[str, int]:
        return "", 0

    def close(self) -> None:
        if self.fd != arena_fd():
            os.close(self.fd)


class _Mapped:
    """An executor's mappings of device arenas it was given (by IPC handle): the last two kept open."""

    def __init__(self) -> None:
        self.opened: dict[str, tuple[int, int]] = {}

    def bytes_of(self, layout: m.Layout):
        import base64
        from harness.worker import cudadriver
        found = self.opened.get(layout.handle)
        if found is None:
            if cudadriver.open_handle is None:
                raise ArenaError("the CUDA driver is not bound in this worker")
            try:
                raw = base64.b64decode(layout.handle.encode("ascii"), validate=True)
            except (ValueError, UnicodeEncodeError):
                raise ArenaError("the arena's IPC handle is not base64") from None
            opened = cudadriver.open_handle(raw)
            if isinstance(opened, int):
                raise ArenaError(f"cannot map the arena (CUresult {opened})")
            for old in list(self.opened)[:-1]:
                cudadriver.close_handle(self.opened.pop(old)[0])
            found = self.opened[layout.handle] = opened
        address, nbytes = found
        if layout.base < 0 or layout.base + layout.bytes > nbytes:
            raise ArenaError(f"the layout reaches past the arena's {nbytes} bytes")
        return _device_bytes(address + layout.base, layout.bytes)

    def place(self, t) -> dict[str, Any] | None:
        """Where output `t` lies, described by the arena's own handle, when it lies in an arena (a view of an input,
        or of the room beside it; it could not be exported as memory of this process's), so that the trusted side
        names it (`aliased_output`); None for memory of its own."""
        from harness.worker import rawread
        address = rawread.address_of(t)
        for handle, (base, nbytes) in self.opened.items():
            if base <= address < base + nbytes:
                return {"dtype": str(t.dtype), "shape": list(t.shape), "strides": list(t.stride()),
                        "address": address - base, "handle": handle}
        return None


def _tensors(base, layout: m.Layout) -> list:
    """The inputs a layout describes, viewed in `base` (a uint8 tensor over the arena) or as the values it carries."""
    import torch
    out: list = []
    for entry in layout.entries:
        if entry.dtype == "":
            out.append(tuple(entry.value) if isinstance(entry.value, list) and entry.tuple else entry.value)
            continue
        dtype = getattr(torch, entry.dtype)
        size = torch.empty((), dtype=dtype).element_size()
        count = span(entry.shape, entry.strides)
        raw = base[entry.offset:entry.offset + count * size]
        if raw.numel() != count * size:
            raise ArenaError(f"input {len(out)} lies past the arena's end")
        flat = raw.view(dtype) if count else torch.empty(0, dtype=dtype, device=base.device)
        out.append(torch.as_strided(flat, entry.shape, entry.strides) if count else
                   torch.empty(entry.shape, dtype=dtype, device=base.device))
    return out


class Executor:
    """A worker's side of a staged sample: its arena viewed, the inputs viewed where the layout says. `bytes_of`:
    the arena's bytes for a layout (default: this worker's memfd on the CPU, or the device arena the layout's
    IPC handle names)."""

    def __init__(self, fd: int | None = None, bytes_of=None, device: bool = False):
        self.mapped = _Mapped() if bytes_of is None and device else None
        if self.mapped is not None:
            bytes_of = self.mapped.bytes_of
        elif bytes_of is None:
            arena = _Map(int(os.environ[ARENA_VAR]) if fd is None else fd)
            bytes_of = lambda layout: _host_bytes(arena.grow(layout.bytes))      # noqa: E731
        self.bytes_of = bytes_of
        self.layout: m.Layout | None = None
        self.inputs: list = []
        self.generation = 0                 # bumped when the views are made again (a new layout)
        self._raw_layout: Any = None

    def request(self, message: dict[str, Any]) -> m.CallRequest:
        """The call request, its layout parsed once per layout (the same dict sample after sample: checking it
        again field by field would cost both sides tens of microseconds inside the parent's clock)."""
        raw = message.get("layout")
        if self.layout is not None and raw == self._raw_layout:
            return m.CallRequest(str(message.get("variant")), self.layout, message.get("manual_seed"),
                                 str(message.get("label") or ""), message.get("profile") is True)
        req = m.parse(m.CallRequest, message)
        self._raw_layout = raw
        return req

    def views(self, layout: m.Layout) -> list:
        """The call's inputs, fresh tensor objects over the arena every call (a call that changes its input's
        shape or strides in place changes nothing for the next), the arena's views themselves made once per
        layout (the values in them are this sample's: the stager wrote them)."""
        if layout != self.layout:
            self.inputs, self.layout = _tensors(self.bytes_of(layout), layout), layout
            self.generation += 1
        return [x.as_strided(x.shape, x.stride()) if hasattr(x, "as_strided") else x for x in self.inputs]

    def sets(self, layout: m.Layout) -> list[list]:
        """The views split into the layout's input sets (graph mode: one per captured call)."""
        views = self.views(layout)
        count = max(1, layout.sets)
        if len(views) % count:
            raise ArenaError(f"{len(views)} inputs do not split into {count} sets")
        per = len(views) // count
        return [views[k * per:(k + 1) * per] for k in range(count)]


def arena_fd() -> int | None:
    """This worker's arena (KB_ARENA_FD), or None where it was started without one."""
    try:
        return int(os.environ[ARENA_VAR])
    except (KeyError, ValueError):
        return None


@dataclass
class _Side:
    """The stager's hold on one side's arena: its memory and what it wrote there last."""
    memory: Any                             # _FileMemory or _DeviceMemory
    layout: m.Layout | None = None
    written: list | None = None             # the tensors as written (views of the arena)
    pristine: Any = None                    # their copy or keyed checksum (sampler.snapshot)
    seed: int | None = None


class Stager:
    """Reference only: draws each sample's inputs and writes them into the arena of the side that runs it."""

    def __init__(self, draw, defenses: bool, device: bool = False):
        """`draw(seed)`: the sample's input sets (the sampler's, with torch as it was: one set, or graph mode's one
        per captured call); `device`: the arena is device memory (the GPU), one for both sides."""
        self.draw, self.defenses, self.device = draw, defenses, device
        self.sides: dict[str, _Side] = {}
        self.shared = _DeviceMemory(export=True) if device else None

    def attach(self, side: str, path: str | None) -> None:
        """The arena of `side`: on the CPU the parent's /proc path of the candidate's memfd, or None for this
        worker's own; on the GPU the one device arena of both sides (the two never run at once: each sample's
        inputs are written over the last one's, once those are checked), which the candidate maps by its IPC
        handle. A side attached again (the next pair's candidate) forgets the old one."""
        self.close(side)
        if self.shared is not None:
            self.sides[side] = _Side(self.shared)
            return
        fd = arena_fd() if path is None else os.open(path, os.O_RDWR | os.O_CLOEXEC)
        if fd is None:
            raise ArenaError("this worker was started without an arena")
        self.sides[side] = _Side(_FileMemory(fd))

    def check(self, side: str) -> bool:
        """Whether the inputs last written into `side`'s arena changed since (the call that read them wrote to
        them); then they are forgotten."""
        held = self.sides.get(side)
        if held is None or held.written is None:
            return False
        from harness.worker import integrity
        from harness.worker.sampler import differs
        with integrity.clean_torch():
            mutated = self.defenses and differs(held.written, held.pristine)
        held.written = held.pristine = None
        return bool(mutated)

    def stage(self, side: str, seed: int, inputs: list | None = None) -> tuple[m.Layout, bool]:
        """The previous inputs of `side` checked, then the inputs for `seed` (or `inputs`, a trial's) drawn and
        written into its arena: their layout, and whether the previous ones had changed. The flush comes after."""
        held = self.sides.get(side)
        if held is None:
            raise ArenaError(f"no arena attached for the {side}")
        mutated = self.check(side)
        if self.shared is not None:            # the other side's last inputs are about to be written over
            mutated = any([self.check(other) for other in self.sides if other != side]) or mutated
        sets = self.draw(seed) if inputs is None else [inputs]
        count = len(sets)
        flat = [x for one in sets for x in one]
        del inputs, sets
        layout = layout_of(flat)
        held.layout = None
        arena = held.memory.grow(layout.bytes)
        handle, base = held.memory.describe()
        held.layout = m.Layout(layout.entries, layout.bytes, handle, base, max(1, count))
        held.written = _write(arena, held.layout, flat)
        del flat
        if self.defenses:
            from harness.worker import integrity
            from harness.worker.sampler import snapshot
            with integrity.clean_torch():
                held.pristine = snapshot(held.written)
        held.seed = seed
        return held.layout, mutated

    def own_bytes(self, layout: m.Layout):
        """The reference's own arena (on the GPU the one arena), for its executor."""
        return self.sides[REFERENCE].memory.grow(layout.bytes)

    def close(self, side: str) -> None:
        """`side` forgotten (its arena closed; the GPU's one arena stays for the next pair)."""
        held = self.sides.pop(side, None)
        if held is not None:
            held.written = held.pristine = None
            if held.memory is not self.shared:
                held.memory.close()


def layout_of(inputs: list) -> m.Layout:
    """Where each input goes in an arena: tensors one after another on cache-line boundaries, keeping their
    strides (non-negative ones; a tensor with a negative stride is written contiguous); plain values carried as
    they are. ArenaError for an input that is neither."""
    import torch
    entries, at = [], 0
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            strides = list(x.stride()) if _dense(x) else list(x.contiguous().stride())
            dtype = str(x.dtype).replace("torch.", "")
            at = _round_up(at, ALIGN)
            entries.append(m.LayoutEntry(dtype, list(x.shape), strides, at))
            at += span(list(x.shape), strides) * x.element_size()
        elif plain_value(x):
            entries.append(m.LayoutEntry("", value=list(x) if isinstance(x, tuple) else x,
                                         tuple=isinstance(x, tuple)))
        else:
            raise ArenaError(f"get_inputs() item {i} is a {type(x).__name__}: staged samples carry tensors and "
                             f"plain values (numbers, strings, lists)")
    return m.Layout(entries, _round_up(max(at, 1), GROWTH))


def _dense(x) -> bool:
    """Whether a tensor's own strides can be kept in the arena: every element at a place of its own and no gaps
    (a permuted or transposed tensor; not an expanded, negatively strided or sliced one)."""
    shape, strides = list(x.shape), list(x.stride())
    return all(s >= 1 for s, d in zip(strides, shape) if d > 1) and span(shape, strides) == x.numel()


def _write(arena, layout: m.Layout, inputs: list) -> list:
    """The inputs copied into the arena (a uint8 tensor over it) where the layout says; the arena's views of them."""
    views = _tensors(arena, layout)
    for view, x in zip(views, inputs):
        if hasattr(view, "copy_") and view.numel():
            view.copy_(x)
    return views


def called(out) -> m.Called:
    """The reply to a call: where its output lies (rawread.export), or why it cannot be read there."""
    from harness.worker import rawread
    from harness.worker.common import as_tensor_list
    from harness.worker.sampler import not_plain
    try:
        exported = rawread.export(as_tensor_list(out))
    except (ValueError, rawread.RawReadError) as exc:
        return m.Called([], str(exc), not_plain(out))
    return m.Called(exported, None, not_plain(out))


class DeviceCalls:
    """The GPU's staged call, on either side: timed with the mode's CUDA events (harness.worker.timing) without a
    flush of its own (the reference wrote the L2 over when it staged a cold sample), after `warmup` calls on the
    staged inputs whenever the views or the mode change; graph mode captures its calls over the arena's input sets
    as they lie (one set per captured call), so a sample copies nothing."""

    def __init__(self, device: str, warmup: int, mode: str = "cold", replays: int = 1, graph_calls: int = 1):
        self.device, self.warmup = device, warmup
        self.mode, self.replays, self.graph_calls = mode, replays, graph_calls
        self.meters: dict[tuple[str, int], Any] = {}

    def follow(self, mode: str, replays: int, graph_calls: int) -> None:
        """The mode from now on (a change starts every meter again)."""
        if (mode, replays, graph_calls) != (self.mode, self.replays, self.graph_calls):
            self.mode, self.replays, self.graph_calls = mode, max(1, replays), max(1, graph_calls)
            self.meters.clear()

    def call(self, executor: Executor, req: m.CallRequest, call) -> tuple[m.Called, list | None]:
        """The reply to `req`, and the outputs of its captured calls (None: a profiled call or a failed capture)."""
        from harness.worker import timing
        sets = executor.sets(req.layout)
        if req.profile:
            from harness.worker import profiling
            return m.Called(profile=profiling.profile_call(call, sets[-1], self.device)), None
        key = (req.variant, executor.generation)
        meter = self.meters.get(key)
        if meter is None:
            for _ in range(self.warmup):
                call(sets[0])
            meter = timing.measurement(self.mode, self.device, None, self.graph_calls, self.replays, staged=True)
            self.meters = {k: v for k, v in self.meters.items() if k[1] == executor.generation}
            self.meters[key] = meter
        try:
            if meter.mode == "graph":
                if len(sets) != meter.calls:
                    raise timing.GraphCaptureError(f"{len(sets)} input sets staged for {meter.calls} captured calls")
                times, outs, _ = meter.measure(call, sets)
                slots = list(outs)
            else:
                times, out, _ = meter.measure(call, sets[0])
                slots = [out]
        except timing.GraphCaptureError as exc:
            self.meters.pop(key, None)
            return m.Called(capture_error=f"graph capture failed: {exc}"), None
        return _device_called(slots, times, executor.mapped), slots


def _device_called(slots: list, times, mapped: _Mapped | None = None) -> m.Called:
    """The reply to a timed call on the GPU: where each captured call's outputs lie (rawread.export; an output in
    the arena, by the arena's handle: `mapped.place`) and the call's times."""
    from harness.worker import rawread
    from harness.worker.common import as_tensor_list
    from harness.worker.sampler import not_plain
    lazy = any(not_plain(o) for o in slots)
    try:
        exported = []
        for out in slots:
            described: list[dict[str, Any]] = []
            for t in as_tensor_list(out):
                found = mapped.place(t) if mapped is not None else None
                described += [found] if found is not None else rawread.export([t])
            exported.append(described)
    except (ValueError, rawread.RawReadError) as exc:
        return m.Called([], str(exc), lazy, times.ms, times.host_ms, times.lag_ms)
    return m.Called(exported[-1], None, lazy, times.ms, times.host_ms, times.lag_ms, exported)


class ReferenceStaging:
    """The reference worker's part in staged samples: the stager of both sides, and the executor of its own.
    `peer`: on the GPU, its reader of the candidate's outputs (harness.worker.peer), asked at each of the candidate's
    stages whether the output it read last changed since (`unsynchronized_work`)."""

    def __init__(self, sampler, trials, defenses: bool, device: str = "cpu", peer=None):
        self.sampler, self.trials, self.device, self.peer = sampler, trials, device, peer
        on_device = device != "cpu"
        self.stager = Stager(sampler.clean_input_sets, defenses, device=on_device)
        self.stager.attach(REFERENCE, None)
        self.executor = Executor(bytes_of=self.stager.own_bytes) if on_device else Executor()
        self.calls = DeviceCalls(device, sampler.spec.warmup) if on_device else None

    def handlers(self) -> tuple[dict[type, Any], dict[type, Any]]:
        """The staging requests, each with its answer, and the call's own parser (common.Handlers)."""
        return ({m.ArenaRequest: self._arena, m.StageRequest: self._stage, m.CallRequest: self._call},
                {m.CallRequest: self.executor.request})

    def _call(self, req: m.CallRequest) -> m.Called:
        seed = self.stager.sides[REFERENCE].seed
        call = self.sampler.calls[req.variant]
        if self.calls is None:
            self.sampler.last = None                    # checked already: room for this one's
            out = call(self.executor.views(req.layout))
            self.sampler.last = (seed, [out], None)
            return called(out)
        sampler = self.sampler
        self.calls.follow(sampler.mode, sampler.graph_replays, sampler.spec.graph_calls)
        if not req.profile:
            sampler.last = None
        reply, slots = self.calls.call(self.executor, req, call)
        if slots is not None:
            sampler.last = (seed, slots, None)
        return reply

    def _arena(self, req: m.ArenaRequest) -> m.ArenaSet:
        try:
            if req.side not in SIDES:
                raise ArenaError(f"no side {req.side!r}")
            if req.path or self.device != "cpu":
                self.stager.attach(req.side, req.path)
            else:
                self.stager.close(req.side)
        except (OSError, ArenaError) as exc:
            return m.ArenaSet(f"the {req.side}'s arena: {exc}")
        return m.ArenaSet()

    def _stage(self, req: m.StageRequest) -> m.Staged:
        changed = bool(req.side == CANDIDATE and self.peer is not None and self.peer.changed_since_read())
        if req.seed is None and req.trial is None:
            return m.Staged(None, self.stager.check(req.side), changed_after_return=changed)
        try:
            if req.trial is not None:
                return self._stage_trial(req.side, req.trial)
            layout, mutated = self.stager.stage(req.side, req.seed)
        except ArenaError as exc:
            return m.Staged(None, False, str(exc))
        if self.device != "cpu":               # written before the reply: the flusher runs next, then the call
            import torch
            torch.cuda.synchronize()
        return m.Staged(layout, mutated, changed_after_return=changed)

    def _stage_trial(self, side: str, j: int) -> m.Staged:
        """Correctness trial `j` of the plan: its inputs (drawn from base + k, the trial's public seed) and the seed
        its call is made after."""
        if not 0 <= j < len(self.trials.plan):
            raise ArenaError(f"there is no trial {j}")
        layout, mutated = self.stager.stage(side, -1, self.trials.inputs(j))
        return m.Staged(layout, mutated, manual_seed=self.trials.seed + self.trials.plan[j].k)


def serve(conn, call, failed, device_calls: DeviceCalls | None = None) -> None:
    """The candidate worker's staged calls until told to exit: each CallRequest runs `call` on the inputs the
    reference staged in this worker's arena and answers where the output lies (kept until the next call). On the
    CPU path these are its trials (each after its public torch.manual_seed) and timed samples alike; on the GPU
    (`device_calls`) its timed samples, each timed with CUDA events, and the profiled calls. `failed(exc, label)`:
    what candidate code raising in the call `label` names becomes (an exception the caller sends as its failure).
    One table of request types answers (StagedCalls.handlers); any other request ends the loop."""
    handlers = StagedCalls(call, failed, device_calls).handlers()
    while True:
        reply = handlers.reply(conn.recv())
        if reply is None:
            return
        conn.reply(reply)


class StagedCalls:
    """What the candidate's loop of staged calls answers, one method per request type: the call; the size (answered,
    and changing nothing here: the layout says what the inputs are); the mode (the GPU's timing mode); on the GPU the
    allocator's peak, for the record."""

    def __init__(self, call, failed, device_calls: DeviceCalls | None):
        self.call, self.failed, self.device_calls = call, failed, device_calls
        self.executor = Executor(device=device_calls is not None)
        self.last = None                        # the last call's outputs, alive until the next call

    def handlers(self):
        from harness.worker.common import Handlers
        table = {m.CallRequest: self._call, m.SizeRequest: self._size, m.ModeRequest: self._mode}
        if self.device_calls is not None:
            table[m.MemoryRequest] = self._memory
        return Handlers(table, {m.CallRequest: self.executor.request})

    def _call(self, req: m.CallRequest) -> m.Called:
        try:
            if self.device_calls is not None:
                if not req.profile:
                    self.last = None
                reply, slots = self.device_calls.call(self.executor, req, self.call)
                self.last = slots if slots is not None else self.last
                return reply
            self.last = None
            if req.manual_seed is not None:
                import torch
                torch.manual_seed(req.manual_seed)
            self.last = self.call(self.executor.views(req.layout))
            return called(self.last)
        except BaseException as exc:               # noqa: BLE001 - candidate code raised
            raise self.failed(exc, req.label or "timing") from None

    def _size(self, req: m.SizeRequest) -> m.SizeSet:
        return m.SizeSet(req.size)

    def _mode(self, req: m.ModeRequest) -> m.ModeSet:
        calls = self.device_calls
        if calls is not None:
            calls.follow(req.mode, req.graph_replays, req.graph_calls or calls.graph_calls)
        return m.ModeSet(req.mode)

    def _memory(self, req: m.MemoryRequest) -> m.MemoryPeak:
        from harness.worker.sampler import peak_memory
        return peak_memory(self.device_calls.device)
