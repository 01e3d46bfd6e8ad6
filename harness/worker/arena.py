"""The CPU path's inputs, placed by trusted code where a worker's call reads them (README, Hardening: the
candidate's process runs the call and nothing else).

Every worker is started with an arena: a memfd the parent creates (harness.run.workerproc.Worker), sealed against
shrinking, inherited at KB_ARENA_FD. The reference worker, a process where candidate code never runs, is the
*stager* of both sides of a pair: for each sample it checks that the previous sample's inputs are as it wrote them
(`mutates_inputs`), draws the sample's inputs from its seed and writes them into the arena of the side that is to
run (its own, or the candidate's, opened through the parent's /proc/<pid>/fd/<n>); then the flusher process
(harness.worker.flusher) flushes the caches, both sides stopped. The side
that runs is an *executor*: it maps its arena and, on the parent's "call now" (messages.CallRequest, which names
no seed), views the inputs where the layout says they lie, calls, and answers where its output lies. The parent's
clock around that request is the sample's time; the executor reports no time, draws nothing and checks nothing.

  Stager    reference only: stage(side, seed) -> Layout; pristine copies (or keyed checksums) of what it wrote.
  Executor  both sides: views(layout) -> the call's inputs, read from the mapped arena.

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


def _tensors(mapped: mmap.mmap, layout: m.Layout) -> list:
    """The inputs a layout describes, viewed in `mapped` (tensors) or as the values it carries."""
    import torch
    base = torch.frombuffer(mapped, dtype=torch.uint8)
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
        flat = raw.view(dtype) if count else torch.empty(0, dtype=dtype)
        out.append(torch.as_strided(flat, entry.shape, entry.strides) if count else
                   torch.empty(entry.shape, dtype=dtype))
    return out


class Executor:
    """A worker's side of a staged sample: its arena mapped, the inputs viewed where the layout says."""

    def __init__(self, fd: int | None = None):
        if fd is None:
            fd = int(os.environ[ARENA_VAR])
        self.map = _Map(fd)
        self.layout: m.Layout | None = None
        self.inputs: list = []
        self._raw_layout: Any = None

    def request(self, message: dict[str, Any]) -> m.CallRequest:
        """The call request, its layout parsed once per layout (the same dict sample after sample: checking it
        again field by field would cost both sides tens of microseconds inside the parent's clock)."""
        raw = message.get("layout")
        if self.layout is not None and raw == self._raw_layout:
            return m.CallRequest(str(message.get("variant")), self.layout, message.get("manual_seed"),
                                 str(message.get("label") or ""))
        req = m.parse(m.CallRequest, message)
        self._raw_layout = raw
        return req

    def views(self, layout: m.Layout) -> list:
        """The call's inputs, fresh tensor objects over the arena every call (a call that changes its input's
        shape or strides in place changes nothing for the next), the arena's views themselves made once per
        layout (the values in them are this sample's: the stager wrote them)."""
        if layout != self.layout:
            self.inputs, self.layout = _tensors(self.map.grow(layout.bytes), layout), layout
        return [x.as_strided(x.shape, x.stride()) if hasattr(x, "as_strided") else x for x in self.inputs]


def arena_fd() -> int | None:
    """This worker's arena (KB_ARENA_FD), or None where it was started without one."""
    try:
        return int(os.environ[ARENA_VAR])
    except (KeyError, ValueError):
        return None


@dataclass
class _Side:
    """The stager's hold on one side's arena: its file, its mapping and what it wrote there last."""
    fd: int
    map: _Map
    layout: m.Layout | None = None
    written: list | None = None             # the tensors as written (views of the arena)
    pristine: Any = None                    # their copy or keyed checksum (sampler.snapshot)
    seed: int | None = None


class Stager:
    """Reference only: draws each sample's inputs and writes them into the arena of the side that runs it."""

    def __init__(self, draw, defenses: bool):
        """`draw(seed)`: the sample's inputs (the sampler's, with torch as it was)."""
        self.draw, self.defenses = draw, defenses
        self.sides: dict[str, _Side] = {}

    def attach(self, side: str, path: str | None) -> None:
        """The arena of `side`: the parent's /proc path of the candidate's memfd, or None for this worker's own.
        A side attached again (the next pair's candidate) forgets the old one."""
        old = self.sides.pop(side, None)
        if old is not None and path is not None:
            os.close(old.fd)
        fd = arena_fd() if path is None else os.open(path, os.O_RDWR | os.O_CLOEXEC)
        if fd is None:
            raise ArenaError("this worker was started without an arena")
        self.sides[side] = _Side(fd, _Map(fd))

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
        written into its arena: their layout, and whether the previous ones had changed. The flush comes after,
        from the flusher."""
        held = self.sides.get(side)
        if held is None:
            raise ArenaError(f"no arena attached for the {side}")
        mutated = self.check(side)
        if inputs is None:
            inputs = self.draw(seed)
        held.layout = layout_of(inputs)
        held.written = _write(held.map.grow(held.layout.bytes, extend=True), held.layout, inputs)
        del inputs
        if self.defenses:
            from harness.worker import integrity
            from harness.worker.sampler import snapshot
            with integrity.clean_torch():
                held.pristine = snapshot(held.written)
        held.seed = seed
        return held.layout, mutated

    def close(self, side: str) -> None:
        held = self.sides.pop(side, None)
        if held is not None and held.fd != arena_fd():
            os.close(held.fd)


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
            raise ArenaError(f"get_inputs() item {i} is a {type(x).__name__}: the CPU path carries tensors and "
                             f"plain values (numbers, strings, lists)")
    return m.Layout(entries, _round_up(max(at, 1), GROWTH))


def _dense(x) -> bool:
    """Whether a tensor's own strides can be kept in the arena: every element at a place of its own and no gaps
    (a permuted or transposed tensor; not an expanded, negatively strided or sliced one)."""
    shape, strides = list(x.shape), list(x.stride())
    return all(s >= 1 for s, d in zip(strides, shape) if d > 1) and span(shape, strides) == x.numel()


def _write(mapped: mmap.mmap, layout: m.Layout, inputs: list) -> list:
    """The inputs copied into the arena where the layout says; the arena's views of them."""
    views = _tensors(mapped, layout)
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


class ReferenceStaging:
    """The reference worker's part in staged samples: the stager of both sides, and the executor of its own."""

    def __init__(self, sampler, trials, defenses: bool):
        self.sampler, self.trials = sampler, trials
        self.stager = Stager(sampler.clean_inputs, defenses)
        self.stager.attach("reference", None)
        self.executor = Executor()

    def handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The reply to a staging request, or None when the message is not one."""
        op = message.get("op")
        if op == m.ArenaRequest.OP:
            return m.wire(self._arena(m.parse(m.ArenaRequest, message)))
        if op == m.StageRequest.OP:
            return m.wire(self._stage(m.parse(m.StageRequest, message)))
        if op == m.CallRequest.OP:
            req = self.executor.request(message)
            self.sampler.last = None                    # checked already: room for this one's
            out = self.sampler.calls[req.variant](self.executor.views(req.layout))
            self.sampler.last = (self.stager.sides["reference"].seed, [out], None)
            return m.wire(called(out))
        return None

    def _arena(self, req: m.ArenaRequest) -> m.ArenaSet:
        try:
            if req.path:
                self.stager.attach("candidate", req.path)
            else:
                self.stager.close("candidate")
        except (OSError, ArenaError) as exc:
            return m.ArenaSet(f"the candidate's arena: {exc}")
        return m.ArenaSet()

    def _stage(self, req: m.StageRequest) -> m.Staged:
        if req.seed is None and req.trial is None:
            return m.Staged(None, self.stager.check(req.side))
        try:
            if req.trial is not None:
                return self._stage_trial(req.side, req.trial)
            layout, mutated = self.stager.stage(req.side, req.seed)
        except ArenaError as exc:
            return m.Staged(None, False, str(exc))
        return m.Staged(layout, mutated)

    def _stage_trial(self, side: str, j: int) -> m.Staged:
        """Correctness trial `j` of the plan: its inputs (drawn from base + k, the trial's public seed) and the seed
        its call is made after."""
        if not 0 <= j < len(self.trials.plan):
            raise ArenaError(f"there is no trial {j}")
        layout, mutated = self.stager.stage(side, -1, self.trials.inputs(j))
        return m.Staged(layout, mutated, manual_seed=self.trials.seed + self.trials.plan[j].k)


def serve(conn, call, failed) -> None:
    """The candidate worker's calls on the CPU path, trials and timed samples alike, until told to exit: each
    CallRequest runs `call` on the inputs the reference staged in this worker's arena (a trial's after its public
    torch.manual_seed) and answers where the output lies (kept until the next call). `failed(exc, label)`: what
    candidate code raising in the call `label` names becomes (an exception the caller sends as its failure). Size
    and mode requests are answered and change nothing here: the layout says what the inputs are."""
    executor = Executor()
    last = None
    while True:
        message = conn.recv()
        op = message.get("op")
        if op == m.CallRequest.OP:
            req = executor.request(message)
            last = None
            try:
                if req.manual_seed is not None:
                    import torch
                    torch.manual_seed(req.manual_seed)
                last = call(executor.views(req.layout))
                reply = called(last)
            except BaseException as exc:               # noqa: BLE001 - candidate code raised
                raise failed(exc, req.label or "timing") from None
        elif op == m.SizeRequest.OP:
            reply = m.SizeSet(m.parse(m.SizeRequest, message).size)
        elif op == m.ModeRequest.OP:
            reply = m.ModeSet(str(message.get("mode")))
        else:
            return
        wired = m.wire(reply)
        conn.send(wired.pop("kind"), **wired)
