"""The trusted side's read of a candidate's timed output: commit, then check (README, Hardening).

A candidate sample's reply says where its output lies (messages.Exported); the parent stops the candidate's
processes at once, and only then draws the check seed and reads the output at positions drawn from it:

  - on the CPU path the parent reads the candidate's memory itself (harness.run.peek, process_vm_readv);
  - on the GPU the reference worker reads it through CUDA IPC mappings (messages.ReadRequest,
    harness.worker.peer), a process where candidate code never runs.

For a few samples drawn at random (`full`) the whole output is compared with the reference's output on the same
inputs, and both with float64. Nothing about the check (its seed, its positions, whether it is whole) ever reaches
the candidate's process, and its output is fixed before any of it exists.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

from harness.shared import messages as m
from harness.run import peek, scratch
from harness.run.clients import ReferenceClient, Timed
from harness.shared import points
from harness.run.workerproc import Worker, WorkerExit

FULL_CHECK_BYTES = 1 << 30       # CPU path: outputs larger than this are checked at points only


@dataclass
class Checked:
    """One side's output check of one sample."""
    values: list[float]
    shapes: list[list[int]]
    error: str | None = None
    full: m.FileCheck | None = None     # the whole-output comparison, where this sample was drawn for one
    aliased: str | None = None          # the output lies in memory the harness gave the call (one line)
    dtypes: list[str] | None = None     # the dtype of each output of the slot read last, as its reply described it
    layouts: list[tuple[list[int], list[int]]] | None = None    # and each one's (shape, strides)


def slots_for(check_seed: int, count: int, extra: int = 2) -> list[int]:
    """Which captured calls' outputs are read (graph mode; cold and host samples have one), drawn from the check seed:
    the last captured call's and `extra` others at points, and listed last the one read whole where the sample is
    checked whole, any of them, so that no captured call can count on being looked at only at points."""
    if count <= 1:
        return [0]
    import random
    draw = random.Random(check_seed)
    whole = draw.randrange(count)
    points_only = set(draw.sample(range(count - 1), min(extra, count - 1))) | {count - 1}
    return sorted(points_only - {whole}) + [whole]


class Reader:
    """Reads the candidate's outputs for the parent. `reference`: the problem's reference worker; `scratch`: the
    pair's folder (the CPU path's whole-output copies)."""

    def __init__(self, reference: ReferenceClient, device: str, scratch: str, deadline: float):
        self.reference, self.device, self.scratch, self.deadline = reference, device, scratch, deadline
        self.full_checks = 0

    def read(self, side: Timed, candidate: bool, result: m.SampleResult, check_seed: int, full: bool,
             stay_stopped: bool = False) -> Checked:
        """One side's output at the drawn positions (and the candidate's whole with `full`), its worker stopped
        (and left stopped with `stay_stopped`: the CPU path's candidate, until its next call). The reference's
        own outputs go the same way on the CPU path (both sides stopped and read by the parent, so that neither
        does more between samples than the other); on the GPU the reference reads its own, and its executor's as
        it reads the candidate's (harness.run.reference_executor)."""
        worker = side.worker
        worker.pause()
        checked = None
        try:
            if result.output_error or not result.outputs:
                return Checked([], [], result.output_error or "the sample reply says where no output lies")
            slots = slots_for(check_seed, len(result.outputs))
            if self.device == "cpu":
                aliased = _aliased(worker, result) if candidate else None
                checked = dataclasses.replace(self._host(worker.proc.pid, result, check_seed, slots,
                                                         full and candidate), aliased=aliased)
            elif candidate:
                checked = self._device(result, check_seed, slots, full)
            elif side is not self.reference:            # the reference's executor: read, never remembered
                checked = dataclasses.replace(self._device(result, check_seed, slots, False, remember=False),
                                              aliased=None)
        finally:
            if not stay_stopped:
                worker.resume()
        if checked is None:
            checked = self._check_request(check_seed, slots)
        return dataclasses.replace(checked, dtypes=_dtypes(result, slots[-1]), layouts=_layouts(result, slots[-1]))

    def keep(self, check_seed: int, seed: int, slot: int = 0) -> None:
        """Before the candidate's output of sample `seed` is read whole: the reference keeps that seed and captured
        call `slot` (KeepRequest), from which it recomputes its own output on the same inputs when it compares. The
        seed is the parent's own record of what was staged, so a sample can be checked whole whether the
        reference's side ran it before the candidate (a round's forward half) or runs it after (its backward half)."""
        with self._awake() as reference:
            kept = reference.keep(check_seed, seed, slot, self._deadline())
        if kept.error:
            raise WorkerExit("protocol", None, f"the reference could not keep a sample: {kept.error}")

    @contextlib.contextmanager
    def _awake(self) -> Iterator[ReferenceClient]:
        """The reference worker (stopped while the candidate is timed) resumed for one request, stopped again after."""
        self.reference.worker.resume()
        try:
            yield self.reference
        finally:
            self.reference.worker.pause()

    def _deadline(self) -> float:
        """A request's to the reference: the pair's, and at least a minute."""
        return max(self.deadline, time.monotonic() + 60)

    def _check_request(self, check_seed: int, slots: list[int]) -> Checked:
        """The reference's own output at the drawn positions (it is trusted)."""
        checked = self.reference.check(check_seed, slots, self._deadline())
        return Checked(_values(checked, "a check"), checked.shapes, checked.error)

    def _host(self, pid: int, result: m.SampleResult, seed: int, slots: list[int], full: bool) -> Checked:
        values: list[float] = []
        try:
            for slot in slots:
                for j, e in enumerate(_exported(result.outputs[slot])):
                    flat = points.output_positions(seed, slot, j, points.numel(e.shape))
                    values += peek.read_points(pid, e.dtype, e.shape, e.strides, e.address, flat)
            last = _exported(result.outputs[slots[-1]])
            shapes = [list(e.shape) for e in last]
            whole = self._host_full(pid, last, seed) if full else None
        except (peek.PeekError, points.PointError, m.ProtocolError) as exc:
            return Checked([], [], f"its memory could not be read: {exc}")
        return Checked(values, shapes, None, whole)

    def _host_full(self, pid: int, exported: list[m.Exported], seed: int) -> m.FileCheck | None:
        """The whole output copied from the candidate's memory into a file, compared by the reference."""
        copied = copy_out(pid, exported, os.path.join(self.scratch, f"timed-full-{self.full_checks}.kbt"))
        if copied is None:
            return None
        path, shapes, strides, _ = copied
        self.full_checks += 1
        timed = m.TrialFile("timed", path, -1, shapes=shapes, strides=strides, check_seed=seed)
        with self._awake() as reference:
            results = reference.verify([timed], self._deadline())
        return results[0] if results else None

    def _device(self, result: m.SampleResult, seed: int, slots: list[int], full: bool,
                remember: bool = True) -> Checked:
        request = m.ReadRequest([result.outputs[k] for k in slots], seed, slots, full, remember)
        with self._awake() as reference:
            read = reference.read_outputs(request, self._deadline())
        return Checked(_values(read, "a read"), read.shapes, read.error, read.full, aliased=read.aliased)

    def close(self) -> None:
        """The pair is over: the reference drops its mappings of the candidate's memory and its kept output."""
        self.reference.worker.resume()
        self.reference.peer_close(time.monotonic() + 60)


def _dtypes(result: m.SampleResult, slot: int) -> list[str] | None:
    """The dtypes of a sample's outputs (one captured call's), as its reply described them; None where it did not."""
    try:
        return [e.dtype for e in _exported(result.outputs[slot])]
    except (m.ProtocolError, IndexError):
        return None


def _layouts(result: m.SampleResult, slot: int) -> list[tuple[list[int], list[int]]] | None:
    """The shape and strides of a sample's outputs (one captured call's), as its reply described them."""
    try:
        return [(list(e.shape), list(e.strides)) for e in _exported(result.outputs[slot])]
    except (m.ProtocolError, IndexError):
        return None


def _span_bytes(e: m.Exported) -> int:
    """Bytes from a strided output's first element to its last, inclusive."""
    size = points.SIZES.get(e.dtype)
    if size is None:
        raise peek.PeekError(f"cannot read dtype {e.dtype} from memory")
    return points.span(e.shape, e.strides) * size


def shared_between_calls(slots: list[list[dict[str, Any]]]) -> str | None:
    """Graph mode: why two of a sample's captured calls handed back the same memory (one line), or None. Each call's
    output must be its own: the earlier calls' outputs are read after the later calls ran, so one buffer that every
    call writes (a model that keeps its output buffer) holds only the last call's answer. Device outputs are the
    same memory where they lie in one allocation (the same IPC handle) at overlapping bytes."""
    seen: list[tuple[int, str, int, int]] = []          # (call, handle, first byte, last byte + 1)
    for call, items in enumerate(slots):
        try:
            exported = _exported(items)
        except m.ProtocolError:
            return None                                 # the read says what is wrong with it
        for e in exported:
            if not e.handle:
                continue
            try:
                start, end = e.address, e.address + _span_bytes(e)
            except peek.PeekError:
                continue
            for other, handle, lo, hi in seen:
                if other != call and handle == e.handle and start < hi and lo < end:
                    return (f"captured calls {other} and {call} handed back the same memory (one output buffer for "
                            f"every call?): in graph mode each call's output must be its own, since the earlier "
                            f"calls' outputs are read after the later ones ran")
            seen.append((call, e.handle, start, end))
    return None


def read_whole(pid: int, exported: list[m.Exported]) -> list[bytes] | None:
    """Each output's bytes, first element to last, read from process `pid`'s memory (it stopped); None past
    FULL_CHECK_BYTES in all. PeekError where its memory cannot be read there."""
    sizes = [_span_bytes(e) for e in exported]
    if sum(sizes) > FULL_CHECK_BYTES:
        return None
    return [peek.read_bytes(pid, e.address, n) if n else b"" for e, n in zip(exported, sizes)]


def copy_out(pid: int, exported: list[m.Exported], path: str) -> tuple[str, list, list, list[bytes]] | None:
    """The whole output copied out of process `pid`'s memory into a raw tensor file at `path` (one flat tensor
    per output, viewed later with its shape and strides): (path, shapes, strides, the bytes), or None where it
    is larger than FULL_CHECK_BYTES. PeekError where its memory cannot be read; a WriteError (the harness's, noted
    for the pair's verdict: schedule.write_fault) where the file cannot be written."""
    from harness.shared.tensorfile import write_raw
    data = read_whole(pid, exported)
    if data is None:
        return None
    entries = [(e.dtype.replace("torch.", ""), len(d) // points.SIZES[e.dtype], d) for e, d in zip(exported, data)]
    try:
        written = write_raw(entries, path)
    except OSError as exc:
        raise scratch.failed_write(path, exc, sum(len(d) for d in data)) from None
    scratch.wrote(written)
    return written, [list(e.shape) for e in exported], [list(e.strides) for e in exported], data


def _aliased(worker: Worker, result: m.SampleResult) -> str | None:
    """CPU path: why the output of a staged call lies in the worker's arena (every mapping of the arena's file in
    its address space, however it mapped it: a view of an input, or of the room beside it), or None. An output the
    trusted read finds right there would be the input's values, not anything the call computed."""
    try:
        ranges = peek.mappings_of(worker.proc.pid, os.fstat(worker.arena_fd).st_ino)
        for slot in result.outputs:
            for j, e in enumerate(_exported(slot)):
                if peek.overlaps(e.address, _span_bytes(e), ranges):
                    return f"output {j} ({e.dtype.replace('torch.', '')}, shape {list(e.shape)}) lies in its inputs' arena"
    except (peek.PeekError, OSError, m.ProtocolError):
        return None                                 # the read says what is wrong with the reply
    return None


def _values(reply: m.CheckResult | m.ReadResult, what: str) -> list[float]:
    """The floats a check or read reply carries (none when it has an error)."""
    try:
        return m.unpack_floats(reply.values) if not reply.error else []
    except m.ProtocolError as exc:
        raise WorkerExit("protocol", None, f"reference answered {what} with {exc}") from None


def _exported(items: list[dict[str, Any]]) -> list[m.Exported]:
    return [m.parse(m.Exported, e) if isinstance(e, dict) else _bad(e) for e in items]


def _bad(item: Any) -> m.Exported:
    raise m.ProtocolError(f"an output description that is a {type(item).__name__}")
