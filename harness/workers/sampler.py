"""The one timing path both sides go through. The reference worker and the candidate worker each hold a Sampler
and serve the same requests with the same per-sample work, so an A/A candidate is indistinguishable from the
reference by construction:

  sample(variant, seed): draw the inputs for `seed` on the device (the worker learns the seed only now) and keep
      a copy for the mutation check, both with torch as it was before candidate code ran (every input here is
      drawn that way: harness.workers.integrity.clean_torch), time one call with the mode's measurement object
      (harness.timing), keep the output until the check;
  check(check_seed, keep_full): the output's values at positions drawn from `check_seed` (chosen by the parent
      after the call returned), read first from its memory (harness.workers.rawread) and then through torch,
      whether the inputs changed, whether the output's memory changed since the call returned, and optionally
      the whole output;
  profile(seed, variant): one call under the profiler (harness.workers.profiling), where the parent asks.

Runs only inside worker processes.
"""
from __future__ import annotations

from typing import Any, Callable

from .. import messages as m
from . import cudadriver, integrity, profiling, rawread
from .common import as_tensor_list, device_inputs, fingerprint, pin_for_timing


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


def not_plain(out) -> bool:
    """A tensor subclass or a lazy object can defer its work past the end of the timed region."""
    import torch
    items = out if isinstance(out, (list, tuple)) else [out]
    return any(type(t) is not torch.Tensor for t in items)


WARMUP_SEED = 7_777_777          # warm-up calls are not checked; their inputs need not be secret


class Sampler:
    def __init__(self, calls: dict[str, Callable[[list], Any]], problem, settings, device: str,
                 spec: m.TimingSpec, defenses: bool, keep_full: Callable[[list], str | None]):
        from .. import timing
        self.calls, self.problem, self.settings, self.device = calls, problem, settings, device
        self.spec, self.defenses, self.keep_full = spec, defenses, keep_full
        self.timing = timing
        self.flusher = timing.make_flusher(device, cudadriver.reset_persisting_l2) if spec.flush_l2 else None
        self.meters: dict[str, Any] = {}
        self.mode, self.graph_replays = spec.mode, spec.graph_replays
        self.last: tuple[list, list | None, Any, tuple[int, list[float]] | None] | None = None   # the last sample
        self.fixed = None if defenses else device_inputs(problem, WARMUP_SEED, settings, device)

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

    def handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The reply to a timing request, or None when the message is not one."""
        op = message.get("op")
        if op == m.SampleRequest.OP:
            return m.wire(self.sample(m.SampleRequest(str(message["variant"]), int(message["seed"]))))
        if op == m.CheckRequest.OP:
            return m.wire(self.check(m.CheckRequest(int(message["check_seed"]), bool(message.get("keep_full")))))
        if op == m.ProfileRequest.OP:
            req = m.ProfileRequest(int(message["seed"]), str(message["variant"]))
            return m.wire(m.ProfileResult(profiling.profile_call(self.calls[req.variant], self._clean_inputs(req.seed),
                                                                 self.device)))
        if op == m.ModeRequest.OP:
            self.mode, self.graph_replays = str(message["mode"]), int(message.get("graph_replays", 1))
            self.meters.clear()
            return {"kind": "mode", "mode": self.mode}
        return None

    def _inputs(self, seed: int) -> list:
        return self.fixed if self.fixed is not None else device_inputs(self.problem, seed, self.settings, self.device)

    def _clean_inputs(self, seed: int) -> list:
        with integrity.clean_torch():
            return self._inputs(seed)

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

    def sample(self, req: m.SampleRequest) -> m.SampleResult:
        import torch
        self.last = None
        call = self.calls[req.variant]
        meter = self._meter(req.variant)
        with integrity.clean_torch():                      # nothing of the candidate's runs while inputs are made
            inputs = self._inputs(req.seed)
            pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs] if self.defenses else None
        try:
            times, out, used = meter.measure(call, inputs)
        except self.timing.GraphCaptureError as exc:
            return m.SampleResult(0.0, 0.0, 0.0, self.tampered(), f"graph capture failed: {exc}")
        self.last = (used, pristine, out, self._at_return(out))
        return m.SampleResult(times.ms, times.host_ms, times.lag_ms, self.tampered(), flush_ms=times.flush_ms)

    def _at_return(self, out) -> tuple[int, list[float]] | None:
        """A few positions of the output read from memory the moment the call returned, drawn from this process's
        own randomness (nothing in it knew them before): the check reads them again, and work still running
        after the call returned (a thread, another stream) shows as a change."""
        if not self.defenses:
            return None
        try:
            seed = rawread.fresh_seed()
            return seed, rawread.read(as_tensor_list(out), seed, rawread.RETURN_POINTS)
        except (ValueError, rawread.RawReadError):
            return None                                    # the check reports what is wrong with the output

    def tampered(self) -> list[str]:
        """Clocks replaced since import, harness functions and globals replaced since the snapshot taken before
        candidate code ran, and methods of this sampler hidden by instance attributes."""
        return self.timing.timers_tampered() + integrity.changed() + integrity.shadowed(self)

    def check(self, req: m.CheckRequest) -> m.CheckResult:
        if self.last is None:
            return m.CheckResult("", [], False, False, None, "no sample to check")
        used, pristine, out, at_return = self.last
        self.last = None
        plain = not not_plain(out)
        try:
            outs = as_tensor_list(out)
            # first: before anything reads the output through torch
            raw = rawread.read(outs, req.check_seed) if self.defenses else []
            changed = at_return is not None and not rawread.same(rawread.read(outs, at_return[0],
                                                                              rawread.RETURN_POINTS), at_return[1])
        except (ValueError, rawread.RawReadError) as exc:
            return m.CheckResult("", [], False, not plain, None, str(exc))
        values, shapes = fingerprint(outs, req.check_seed)
        mutated = pristine is not None and inputs_changed(used, pristine)
        path = self.keep_full(outs) if req.keep_full else None
        return m.CheckResult(m.pack_floats(values.tolist()), shapes, mutated, not plain, path,
                             raw=m.pack_floats(raw), changed_after_return=changed)
