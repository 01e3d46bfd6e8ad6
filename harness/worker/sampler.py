"""The one timing path both sides go through. The reference worker and the candidate worker each hold a Sampler
and serve the same requests with the same per-sample work, so an A/A candidate is indistinguishable from the
reference by construction:

  sample(variant, seed): draw the inputs for `seed` on the device (the worker learns the seed only now; graph
      mode: one input set per captured call) and keep a copy (or checksum) for the mutation check, both with torch as
      it was before candidate code ran (harness.worker.integrity.clean_torch), time one call with the mode's
      measurement object (harness.worker.timing), read a few positions of the output from memory the moment it returned
      (read again before the next sample: `changed_after_return`), and reply with where the output lies
      (rawread.export). The output is kept until the next sample.
  check(check_seed, slots): reference only: its own output's values at the positions drawn from `check_seed`
      (harness.shared.points). The candidate's output is never checked here: the parent reads it (CPU,
      harness.run.peek) or the reference does (GPU, harness.worker.peer), after the reply, with the candidate
      stopped, at positions the candidate never learns (README, Hardening: commit, then check).
  keep(check_seed, seed, slot): reference only, before a candidate's output is read whole: the sample's seed and
      captured call kept, so that the full check recomputes the reference's output on the same inputs
      (inputs_for), whichever side ran them first.
  profile(seed, variant): one call under the profiler (harness.worker.profiling), where the parent asks.
  ncu_call(seed, variant, warmup): `run_eval.py profile`'s one call bracketed for Nsight Compute (profiling.ncu_call).
  memory: the process's peak of device memory (torch's allocator) so far, for the record.

Memory: a sample holds its inputs, its output and, for the mutation check, a copy of the inputs where they are
small (memplan.PRISTINE_BYTES) or else a keyed checksum of them (`snapshot`, `differs`: the same verdict as the
copy's, without a second copy of a large input on the device); once the call is checked only its output stays.

Runs only inside worker processes.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from harness.shared import messages as m
from harness.shared.memplan import CHUNK_BYTES, PRISTINE_BYTES
from harness.worker import cudadriver, integrity, profiling, rawread
from harness.worker.common import (Handlers, as_tensor_list, device_input_set_at, device_input_sets, device_inputs,
                                   pin_for_timing)


def same_tensor(a, b) -> bool:
    import torch
    if not isinstance(a, torch.Tensor):
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):                   # one pass, no temporaries: the common case
        return True
    if a.is_floating_point():               # NaN != NaN: equal when they sit at the same places
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return False


def inputs_changed(work: list, pristine: list) -> bool:
    return not all(same_tensor(w, p) for w, p in zip(work, pristine))


# ---------------------------------------------------------------- the mutation check's record of the inputs

_MIX_A, _MIX_B = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9
_BITS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}
PERIOD = 1 << 22                 # the weights repeat every PERIOD elements, each period under a multiplier of its own


class Digest:
    """A keyed checksum of one tensor, standing in for its copy: equal for two tensors exactly when same_tensor says
    they are the same, but for a collision (a weighted sum of their elements' bits mod 2**64 under odd weights this
    process drew at random, times odd multipliers drawn from a key; a single changed element always shows).
    Computed a piece at a time."""

    __slots__ = ("shape", "dtype", "value")

    def __init__(self, t, key: int):
        self.shape, self.dtype, self.value = tuple(t.shape), t.dtype, checksum(t, key)

    def same(self, t, key: int) -> bool:
        return tuple(t.shape) == self.shape and t.dtype == self.dtype and checksum(t, key) == self.value


def _mix(x: int) -> int:
    """A 64-bit mix (splitmix64's finaliser), as a Python int in [0, 2**64)."""
    x &= (1 << 64) - 1
    x = ((x ^ (x >> 30)) * _MIX_A) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * _MIX_B) & ((1 << 64) - 1)
    return x ^ (x >> 31)


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


_weights_cache: dict = {}
_WEIGHTS_SEED = int.from_bytes(os.urandom(8), "little") >> 1     # this process's, drawn once


def _weights(device, wide: bool = True):
    """PERIOD odd weights, drawn once per process and device from this process's own seed: int64 (32 MiB) for
    8-byte elements (`wide`), else their low 31 bits as int32 (16 MiB; the int64 draw is not kept beside them).
    What differs between snapshots is the key, in each period's multiplier (checksum)."""
    import torch
    found = _weights_cache.get((str(device), PERIOD, wide))
    if found is None:
        g = torch.Generator(device=device)
        g.manual_seed(_WEIGHTS_SEED)
        found = torch.randint(-(1 << 62), 1 << 62, (PERIOD,), generator=g, device=device, dtype=torch.int64) * 2 + 1
        if not wide:
            found = (found & 0x7FFFFFFF).to(torch.int32)                # still odd
        _weights_cache[(str(device), PERIOD, wide)] = found
    return found


def _nan_stand_in(key: int) -> float:
    """The value every NaN counts as (so that all NaNs are one, as same_tensor takes them): drawn from the key, so a
    tensor that holds it where the other held a NaN collides only by a guess at this process's key."""
    return -(1.0 + (_mix(key ^ 0x5EED) % 1021) / 1024.0) * 2.0 ** -9


def _bits(part, key: int):
    """A flat piece as integers: a float's bits after +0.0 (-0.0 counts as 0.0) with every NaN as one value, as
    `same_tensor` compares; a complex piece as its real and imaginary parts; a bool as uint8."""
    import torch
    if part.is_complex():
        part = torch.view_as_real(part).reshape(-1)
    if part.is_floating_point():
        part = torch.nan_to_num(part, nan=_nan_stand_in(key), posinf=float("inf"), neginf=float("-inf"))
        return part.add_(0.0).view(getattr(torch, _BITS[part.element_size()]))
    return part.view(torch.uint8) if part.dtype == torch.bool else part


def _multipliers(key: int, count: int, device):
    """R(0), ..., R(count - 1): each period's odd multiplier, drawn from the key."""
    import torch
    return torch.tensor([_signed(_mix(i ^ key) | 1) for i in range(count)], dtype=torch.int64, device=device)


def checksum(t, key: int, chunk_bytes: int | None = None) -> int:
    """sum(S(b) * R(b)) mod 2**64 over t's periods b of PERIOD elements in row-major order (a complex element counts
    as its two parts), where S(b) is the sum of p(i) = bits(t[i]) * W[i mod PERIOD] over the period, taken mod 2**32
    (unsigned) for elements of up to 4 bytes and mod 2**64 for 8; W odd and drawn once per process, R odd and drawn
    from `key`. The same for any cutting into pieces: a period cut between pieces adds its parts into one S(b) before
    the reduction. A single changed element always shows (S changes by a non-zero amount under 2**32, or mod 2**64,
    and R is odd). Bits as `_bits` takes them. A piece is its bits and its products (`chunk_bytes` for both, the
    products and their sums in the element's own width, so nothing wider is made), then one product and sum for all
    of its whole periods at once; one sync at the end."""
    import torch
    from harness.worker.verify import flat_pieces
    parts = 2 if t.is_complex() else 1
    wide = t.element_size() // parts > 4
    acc = torch.int64 if wide else torch.int32
    weights = _weights(t.device, wide)
    mults = _multipliers(key, -(-t.numel() * parts // PERIOD), t.device)
    sums = torch.zeros(mults.numel(), dtype=torch.int64, device=t.device)       # S(b), each period's sum
    for offset, part in flat_pieces(t, chunk_bytes or 2 * CHUNK_BYTES, parts * (16 if wide else 8)):
        bits = _bits(part, key)
        at, done, n = offset * parts, 0, bits.numel()
        while done < n:
            block, start = divmod(at + done, PERIOD)
            whole = (n - done) // PERIOD if start == 0 else 0
            if whole:                                  # every whole period of the piece in one product and sum
                rows = bits[done:done + whole * PERIOD].view(whole, PERIOD)
                sums[block:block + whole] += (rows * weights).sum(dim=1, dtype=acc)
                done += whole * PERIOD
                continue
            span = min(n - done, PERIOD - start)
            sums[block] += (bits[done:done + span] * weights[start:start + span]).sum(dtype=acc)
            done += span
    if not wide:
        sums &= 0xFFFFFFFF
    return int((sums * mults).sum()) % (1 << 64)


def snapshot(inputs: list) -> tuple[int, list] | None:
    """What the mutation check compares the inputs with after the call: copies where the inputs are small, else
    one Digest per tensor (non-tensors: None); `differs` compares."""
    import torch
    flat = _flat(inputs)
    size = sum(x.numel() * x.element_size() for x in flat if isinstance(x, torch.Tensor))
    if size <= PRISTINE_BYTES:
        return 0, _clone_all(flat)
    key = (int.from_bytes(os.urandom(8), "little") >> 2) | 1     # never 0: 0 means copies
    return key, [Digest(x, key) if isinstance(x, torch.Tensor) else None for x in flat]


def differs(used: list, snap: tuple[int, list] | None) -> bool:
    """Whether the inputs a call saw (`used`) differ from their snapshot taken before it."""
    if snap is None:
        return False
    key, kept = snap
    flat = _flat(used)
    if not key:
        return inputs_changed(flat, kept)
    return not all(d is None or d.same(x, key) for x, d in zip(flat, kept))


def not_plain(out) -> bool:
    """A tensor subclass or a lazy object can defer its work past the end of the timed region."""
    import torch
    items = out if isinstance(out, (list, tuple)) else [out]
    return any(type(t) is not torch.Tensor for t in items)


WARMUP_SEED = 7_777_777          # warm-up calls are not checked; their inputs need not be secret


def device_buffers(device: str, spec: m.TimingSpec, defenses: bool):
    """A worker's long-lived timing buffers, made first thing, before the problem's inputs and outputs: the cold
    samples' flusher (its L2-sized buffer; returned, None where `spec` does not flush) and the checksum's weights.
    Made after them, they were carved out of a freed input's cached segment, which then stayed reserved around them:
    a reference held about its inputs' size more than it had allocated and outgrew its planned share at its first
    paired sample (`harness_oom`)."""
    from harness.worker import timing
    flusher = timing.make_flusher(device, cudadriver.reset_persisting_l2) if spec.flush_l2 else None
    if defenses and device != "cpu":
        import torch
        _weights(torch.empty(0, device=device).device)
    return flusher


_OWN = object()      # Sampler(flusher=_OWN): it makes its own


class Sampler:
    def __init__(self, calls: dict[str, Callable[[list], Any]], problem, settings, device: str,
                 spec: m.TimingSpec, defenses: bool, trusted: bool = False, sizes: list | None = None,
                 flusher: Any = _OWN):
        from harness.worker import timing
        self.calls, self.problem, self.settings, self.device = calls, problem, settings, device
        self.sizes = sizes or []            # the problem's declared sizes (harness.worker.sizes), read before
        self.size = None                    # candidate code ran; the one samples are drawn at (None: the main one)
        self.spec, self.defenses, self.trusted = spec, defenses, trusted     # trusted: the reference
        self.timing = timing
        if flusher is _OWN:                 # (device_buffers made first is what the workers pass)
            flusher = timing.make_flusher(device, cudadriver.reset_persisting_l2) if spec.flush_l2 else None
        self.flusher = flusher
        self.meters: dict[str, Any] = {}
        self.mode, self.graph_replays = spec.mode, spec.graph_replays
        self.last: tuple[int, list, tuple[int, list[float]] | None] | None = None   # the last sample: seed, outputs
        self.changed_earlier = False        # an output read before a profiled call had changed after its return
        self.kept: dict[int, tuple[int, int]] = {}     # reference: check seed -> (sample seed, captured call)
        self.fixed = None if defenses else device_inputs(problem, WARMUP_SEED, settings, device)
        self._handlers: Handlers | None = None     # handle's table, made at its first request

    def set_size(self, req: m.SizeRequest) -> m.SizeSet:
        """Samples from now on drawn at `req.size`: every meter starts again (warm-up, graph capture at the new
        shapes), as after a mode change."""
        from harness.worker.sizes import by_name
        size = by_name(self.sizes, req.size)
        self.size = None if size.main else size
        self.meters.clear()
        self.changed_earlier = self._drop_last()
        if self.fixed is not None:
            self.fixed = device_inputs(self.problem, WARMUP_SEED, self.settings, self.device, self.size)
        return m.SizeSet(size.name)

    def settle(self) -> None:
        """Called by both sides right before the parent starts timing: the device idle, the allocator's cache
        empty and no L2 set aside for persisting accesses, so neither side starts from a different memory state;
        every thread held to the same timing cores as the other side's (common.pin_for_timing)."""
        pin_for_timing()
        if self.device != "cpu":
            import torch
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            if cudadriver.set_persisting_l2_limit is not None:      # best effort: a GPU without it keeps none
                cudadriver.set_persisting_l2_limit(0)

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        """The timing requests this side serves, each with its answer (common.Handlers): the check only where the
        side is trusted (the reference)."""
        table: dict[type, Callable[[Any], Any]] = {
            m.SampleRequest: self.sample, m.ProfileRequest: self._profile, m.NcuRequest: self._ncu,
            m.ModeRequest: self._mode, m.SizeRequest: self.set_size, m.MemoryRequest: self._memory}
        if self.trusted:
            table[m.CheckRequest] = self.check
            table[m.KeepRequest] = self.keep
        return table

    def handle(self, message: dict[str, Any]) -> Any:
        """The reply to a timing request, or None when the message is not one."""
        if self._handlers is None:
            self._handlers = Handlers(self.handlers())
        return self._handlers.reply(message)

    def _profile(self, req: m.ProfileRequest) -> m.ProfileResult:
        self.changed_earlier = self._drop_last()       # checked already: room for the profiled call's
        return m.ProfileResult(profiling.profile_call(self.calls[req.variant], self._clean_inputs(req.seed),
                                                      self.device))

    def _ncu(self, req: m.NcuRequest) -> m.NcuCalled:
        self.changed_earlier = self._drop_last()
        return profiling.ncu_call(self.calls[req.variant], self._clean_inputs(req.seed), req.warmup, self.device)

    def _mode(self, req: m.ModeRequest) -> m.ModeSet:
        self.mode, self.graph_replays = req.mode, req.graph_replays
        if req.graph_calls > 0:
            self.spec = dataclasses.replace(self.spec, graph_calls=req.graph_calls)   # the parent's cap (memplan)
        self.meters.clear()
        self.changed_earlier = self._drop_last()
        return m.ModeSet(self.mode)

    def _memory(self, req: m.MemoryRequest) -> m.MemoryPeak:
        return peak_memory(self.device)

    def _inputs(self, seed: int) -> list:
        if self.fixed is not None:
            return self.fixed
        return device_inputs(self.problem, seed, self.settings, self.device, self.size)

    def _clean_inputs(self, seed: int) -> list:
        with integrity.clean_torch():
            return self._inputs(seed)

    def clean_input_sets(self, seed: int) -> list[list]:
        """The sample's input sets for `seed`, drawn with torch as it was (the stager's, harness.worker.arena): graph
        mode's one per captured call on the device, else the one."""
        with integrity.clean_torch():
            drawn = self._sample_inputs(seed)
        return drawn if self.mode == "graph" and self.device != "cpu" else [drawn]

    def _sample_inputs(self, seed: int) -> list:
        """Graph mode: one input set per captured call (drawn one after another from the sample's seed), so that no
        captured call sees the inputs of another; otherwise the sample's one set."""
        if self.mode == "graph" and self.device != "cpu":
            if self.fixed is not None:
                return [self.fixed] * self.spec.graph_calls
            return device_input_sets(self.problem, seed, self.settings, self.device, self.spec.graph_calls,
                                     self.size)
        return self._inputs(seed)

    def inputs_for(self, seed: int, slot: int = -1) -> list:
        """The inputs the sample with `seed` gave its captured call `slot` (-1: the last; cold: its one set), drawn
        again as _sample_inputs drew them: what the full check recomputes the reference's output on."""
        if self.fixed is not None:
            return self.fixed
        if self.mode == "graph" and self.device != "cpu":
            count = self.spec.graph_calls
            return device_input_set_at(self.problem, seed, self.settings, self.device, slot % count, self.size)
        return device_inputs(self.problem, seed, self.settings, self.device, self.size)

    def _meter(self, variant: str):
        meter = self.meters.get(variant)
        if meter is None:
            call = self.calls[variant]
            for _ in range(self.spec.warmup):
                call(self._clean_inputs(WARMUP_SEED))
            meter = self.timing.measurement(self.mode, self.device, self.flusher, self.spec.graph_calls,
                                               self.graph_replays)
            self.meters[variant] = meter
        return meter

    def _draw(self, seed: int) -> tuple[list, tuple[int, list] | None]:
        with integrity.clean_torch():                      # nothing of the candidate's runs while inputs are made
            inputs = self._sample_inputs(seed)
            return inputs, (snapshot(inputs) if self.defenses else None)

    def sample(self, req: m.SampleRequest) -> m.SampleResult:
        changed = self._drop_last()
        meter = self._meter(req.variant)            # its warm-up calls draw inputs of their own: not beside these
        inputs, pristine = self._draw(req.seed)
        call = self.calls[req.variant]
        try:
            times, out, used = meter.measure(call, inputs)
        except self.timing.GraphCaptureError as exc:
            return m.SampleResult(0.0, 0.0, 0.0, self.tampered(), f"graph capture failed: {exc}")
        slots = list(out) if getattr(meter, "mode", "") == "graph" else [out]
        at_return = self._at_return(slots[-1])
        self.last = (req.seed, slots, at_return)
        exported, error = self._export(slots)
        with integrity.clean_torch():                      # compared with torch as it was, as the copy was made
            mutated = differs(used, pristine)
        del inputs, used, pristine                         # only the output stays until the next sample
        return m.SampleResult(times.ms, times.host_ms, times.lag_ms, self.tampered(), flush_ms=times.flush_ms,
                              outputs=exported, output_error=error, not_plain=any(not_plain(o) for o in slots),
                              mutated=bool(mutated), changed_after_return=changed)

    def _export(self, slots: list) -> tuple[list[list[dict[str, Any]]], str | None]:
        try:
            return [rawread.export(as_tensor_list(o)) for o in slots], None
        except (ValueError, rawread.RawReadError) as exc:
            return [], str(exc)

    def _at_return(self, out) -> tuple[int, list[float]] | None:
        """A few positions of the output read from memory the moment the call returned, drawn from this process's
        own randomness (nothing in it knew them before): read again before the next sample, so that work still
        running after the call returned (a thread, another stream) shows as a change."""
        if not self.defenses:
            return None
        try:
            seed = rawread.fresh_seed()
            return seed, rawread.read(as_tensor_list(out), seed, rawread.RETURN_POINTS)
        except (ValueError, rawread.RawReadError):
            return None                                    # the trusted read reports what is wrong with it

    def _drop_last(self) -> bool:
        """Whether the last sample's output changed after its call returned (or one before it, read when a profiled
        call came between), then that output let go. A profiled call drops it first: its inputs and output beside
        the last sample's would have made each side's peak an eager call plus one output more than a sample's."""
        changed = self._changed_after_return() or self.changed_earlier
        self.last, self.changed_earlier = None, False
        return changed

    def _changed_after_return(self) -> bool:
        if self.last is None or self.last[2] is None:
            return False
        seed, values = self.last[2]
        try:
            return not rawread.same(rawread.read(as_tensor_list(self.last[1][-1]), seed, rawread.RETURN_POINTS),
                                    values)
        except (ValueError, rawread.RawReadError):
            return False

    def tampered(self) -> list[str]:
        """Clocks replaced since import, harness functions and globals replaced since the snapshot taken before
        candidate code ran, and methods of this sampler hidden by instance attributes."""
        return self.timing.timers_tampered() + integrity.changed() + integrity.shadowed(self)

    def keep(self, req: m.KeepRequest) -> m.Kept:
        """Reference only: sample `req.seed`'s captured call `req.slot` kept under the check seed, for the full check
        of the candidate's output on the same inputs (the reference's own output is recomputed from them then)."""
        if req.seed < 0:
            return m.Kept(f"sample seed {req.seed} is a correctness trial's, not a timed sample's")
        self.kept[req.check_seed] = (req.seed, req.slot)
        return m.Kept()

    def check(self, req: m.CheckRequest) -> m.CheckResult:
        """Reference only: its own last output at the drawn positions."""
        from harness.worker.peer import slot_values
        if self.last is None:
            return m.CheckResult("", [], "no sample to check")
        seed, slots, _ = self.last
        try:
            values: list[float] = []
            for k in req.slots:
                values += slot_values(as_tensor_list(slots[k]), req.check_seed, k)
            shapes = [list(t.shape) for t in as_tensor_list(slots[-1])]
        except (ValueError, IndexError) as exc:
            return m.CheckResult("", [], str(exc))
        return m.CheckResult(m.pack_floats(values), shapes)


_outside = [0, 0]               # device bytes held outside torch's allocator now (the arena), and the most at once:
                                # peak_memory reports the most apart from the allocator's peaks (MemoryPeak.arena_bytes)


def held_outside(delta: int) -> None:
    """`delta` bytes of device memory taken (or, negative, given back) outside torch's allocator: the staged
    samples' arena (harness.worker.arena), whose most at once peak_memory reports beside the allocator's peaks."""
    _outside[0] += delta
    _outside[1] = max(_outside)


_RETRY_KEYS = ("num_alloc_retries", "num_ooms")
_retries_before = {key: 0 for key in _RETRY_KEYS}     # the counts when the pairs' cap was applied (count_retries)


def count_retries(device: str) -> None:
    """From here on, `peak_memory`'s retry counts start at 0 (the reference calls this once its share for the
    pairs is applied: what its setup met under the setup's cap is not the pairs')."""
    if device != "cpu":
        import torch
        stats = torch.cuda.memory_stats()
        _retries_before.update({key: int(stats.get(key, 0)) for key in _RETRY_KEYS})


def peak_memory(device: str) -> m.MemoryPeak:
    """This process's peak of device memory so far in torch's allocator (allocated and reserved), and how often its
    allocator met its cap since count_retries (else since the process began): `alloc_retries` (it freed its cache
    and asked again, a device-wide synchronisation) and `ooms` (it gave up, and the caller, e.g. cuDNN choosing a
    plan with a smaller workspace, caught it); apart from them `arena_bytes`, the most the staged inputs' arena
    held at once (held_outside). The arena is not added to the peaks: it holds the inputs the candidate reads, which
    on the in-process path the candidate's own process holds, so the record counts it on the candidate's side
    (harness.run.memory.record). All None on the CPU."""
    if device == "cpu":
        return m.MemoryPeak()
    import torch
    stats = torch.cuda.memory_stats()
    retries, ooms = (int(stats.get(key, 0)) - _retries_before[key] for key in _RETRY_KEYS)
    return m.MemoryPeak(int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved()), retries, ooms,
                        arena_bytes=_outside[1])


def _clone_all(inputs: list) -> list:
    import torch
    return [_clone_all(x) if isinstance(x, list) else x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _flat(inputs: list) -> list:
    return [y for x in inputs for y in (_flat(x) if isinstance(x, list) else [x])]
