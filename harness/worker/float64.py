"""The float64 reference in the reference worker (a process where candidate code never runs): the model's forward
in float64 on trial 0's inputs, against which each candidate's trial 0 is measured (`fp64_max_abs_err`, the
reduced-precision check), and the reduced-precision signature forwards beside it (harness.worker.precision,
docs/precision.md). On a GPU the float32 inputs wait on the host while float64 work runs (Parked), so that a large
input's float32 and float64 copies are never on the device together (issue 44 item 8: the reference within 2x the
problem's eager peak + 1.5 GiB)."""
from __future__ import annotations

from typing import Any

from harness.shared.memplan import KEEP_BYTES
from harness.worker.common import as_tensor_list, describe, is_oom, tensor_bytes, trace
from harness.worker.hostpin import host_empty

NO_PRODUCTS = "skipped: no matmul or convolution"    # the signature's note where the forward has none to round


class Float64:
    """The float64 reference's outputs on trial 0's inputs, against which each candidate's trial 0 is measured
    (`fp64_max_abs_err`, the reduced-precision check). Where the trials' outputs are small they stay on the device
    for the reference's life; where they are large, only until the first candidate's trial 0 is measured, then
    they are dropped and computed again for the next candidate's (within the float64 share the plan gave the
    reference), instead of going to the host and back (twice the float32 output's bytes each way: seconds of the
    first trial's check for a large output)."""

    def __init__(self, model, initial_state, trials: Any, device: str):
        """`trials`: the reference's correctness trials (harness.worker.reference._Trials)."""
        self.model, self.initial_state, self.trials, self.device = model, initial_state, trials, device
        self.outputs: list | None = None               # reference._derive's, or made again for a later candidate
        self.made = False                              # whether reference._derive made them (the plan and the ops
                                                       # allow it)
        self.sample: list | None = None                # the elements the signatures are measured on (docs/precision.md)
        self.emulated: dict[str, list] = {}            # scheme -> its float64 outputs at `sample`, until make()
        self.exact: list | None = None                 # the float64 outputs at `sample`
        self.signatures: dict[str, list] = {}          # scheme -> its own error at `sample` (verify.rounding_error)
        self.signature_note: str | None = None         # why there are none
        self.host = park_host(device)                  # where the float32 inputs wait meanwhile (Parked)
        self.products = True                           # False: the forward has no product to round (reference._derive;
                                                       # reference._FullCheck reads it too)

    def wanted(self) -> bool:
        """Whether each candidate's trial 0 is measured against them."""
        return self.made

    def make_signatures(self) -> None:
        """Each reduced-precision scheme's float64 outputs on trial 0's inputs, at a secret sample: before make()."""
        import secrets
        if not self.products:
            self.signature_note = NO_PRODUCTS
            return
        with Parked(lambda: self.trials.inputs(0), self.trials, self.host, self.device) as draw:
            self.emulated, self.sample, self.signature_note = emulated(
                self.model, self.initial_state, draw, secrets.randbelow(1 << 30), draw.device)

    def make(self) -> tuple[list | None, str | None]:
        """The float64 reference on trial 0's inputs: (outputs, None), or (None, why not). The first time, each
        scheme's own error at the sample too (verify.rounding_error)."""
        from harness.worker.verify import rounding_error, take
        with Parked(lambda: self.trials.inputs(0), self.trials, self.host, self.device,
                     keep_draw=_converts_on_device(self.trials)) as draw:
            outs, note = float64_reference(self.model, self.initial_state, draw, device=draw.device)
        if outs is not None and self.emulated:
            self.exact = take(outs, self.sample)
            self.signatures = {s: rounding_error(e, self.exact) for s, e in self.emulated.items()}
        self.emulated = {}
        return outs, note

    def signature(self, outs: list) -> dict[str, Any] | None:
        """Trial 0's share of each scheme's signature (verify.signature_figures), or None."""
        from harness.worker.verify import signature_figures
        if not self.signatures:
            return None
        return signature_figures(outs, self.exact, self.signatures, self.sample, device=self.device)

    def max_abs_err(self, outs: list) -> float | None:
        from harness.worker.verify import max_abs_diff64
        if self.outputs is None:
            self.outputs = self.make()[0]
            if self.outputs is None:
                return None
        err = max_abs_diff64(outs, self.outputs, device=self.device)
        if not self.trials.keep_outputs:
            self.outputs = None
            if self.device != "cpu":
                import torch
                torch.cuda.empty_cache()
        return err


def emulated(model, initial_state, draw, offset: int, device: str | None = None,
              products: bool = True) -> tuple[dict[str, list], list | None, str | None]:
    """Each reduced-precision scheme's float64 outputs on the inputs `draw()` returns (harness.worker.precision: the
    float64 forward with its matmul and convolution operands rounded as the scheme rounds them), kept only at a
    strided sample of the elements (verify.sample_index from `offset`): ({scheme: sampled outputs}, the sample,
    None), or ({}, None, why not). One float64 forward at a time (docs/precision.md); `device`: float64_reference's.
    `products` False: the forward is known to have none to round (Float64.products), so none runs."""
    from harness.worker import precision
    from harness.worker.verify import sample_index, take
    if not products:
        return {}, None, NO_PRODUCTS
    found, sample = {}, None
    for scheme in precision.SCHEMES:
        mode = precision.Rounded(scheme)
        outs, note = float64_reference(model, initial_state, draw, mode=mode, device=device)
        if outs is None:
            return {}, None, note
        if not mode.rounded:
            return {}, None, NO_PRODUCTS
        if sample is None:
            sample = sample_index([tuple(t.shape) for t in outs], offset=offset, device=outs[0].device)
        found[scheme] = take(outs, sample)
        del outs
        trace(f"reference signature {scheme}")
    return found, sample, None


def float64_reference(model, initial_state, draw, host: bool = False, mode=None,
                       device: str | None = None) -> tuple[list | None, str | None]:
    """The reference computed in float64 on the inputs `draw()` returns, to show how far fp32 results, the
    reference's and the candidate's, are from the exact function; (outputs, None), or (None, why not). The float32
    inputs go before the float64 forward runs; `host`: the outputs are moved to the host (compared a slice at a
    time on the device). `device`: the floating inputs `draw()` returns wait off the device (Parked): each one's
    float64 copy is made on `device` from it, a slice at a time, and a Rounded `mode` rounds that copy in place
    and writes it back from it (precision.Rounded.source) instead of rounding a second float64 copy beside it."""
    import contextlib
    import copy
    import torch
    try:
        model64 = copy.deepcopy(model)
        model64.load_state_dict(initial_state)
        model64 = model64.double()
        inputs = list(draw())
        x64 = []
        while inputs:                                  # each float32 input goes once its float64 copy exists
            x64.append(_as_float64(inputs.pop(0), device, mode))
        torch.manual_seed(0)
        try:
            with mode if mode is not None else contextlib.nullcontext():      # precision.Rounded: a scheme's forward
                out = as_tensor_list(model64(*x64))
        finally:
            if mode is not None:
                mode.forget()                          # (it held the float64 inputs)
        del model64, x64
        out = [_own_storage(t) for t in out]
        return ([t.to("cpu") for t in out] if host else out), None
    except Exception as exc:                           # noqa: BLE001 - some ops have no float64 kernel
        if is_oom(exc):
            return None, f"skipped: out of memory ({describe(exc)[:200]})"
        return None, f"skipped: {describe(exc)[:200]}"


def _own_storage(t):
    """`t`, or a copy of it where its storage is larger than its elements need: some of torch's reductions
    (smooth_l1_loss, mse_loss) write an input-sized result and resize it to a scalar, which then holds the whole
    buffer (2 GiB of float64 behind huber_loss's 8-byte output) for as long as the output is kept."""
    import torch
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return t
    if t.untyped_storage().nbytes() <= t.numel() * t.element_size() + 4096:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _as_float64(x, device: str | None, mode):
    """An input of float64_reference as the float64 forward takes it."""
    if not _floating(x):
        return x
    if device is None:
        return x.double()
    import torch
    from harness.worker import precision
    x64 = torch.empty_like(x, dtype=torch.float64, device=device)
    precision.copy_into(x64, x)
    if mode is not None:
        mode.source(x64, x)
    return x64


def park_host(device: str) -> str | None:
    """Where the float32 inputs wait while float64 work runs (Parked): the host on the GPU, nowhere on the CPU path
    (they are there already). Tests set an instance's `host` to "cpu" to run the GPU's path on the CPU."""
    return "cpu" if device != "cpu" else None


def _floating(x) -> bool:
    import torch
    return isinstance(x, torch.Tensor) and x.is_floating_point()


class Parked:
    """Float64 work on the GPU with no float32 input on the device beside it (issue 44 item 8: the reference worker
    within 2x the problem's eager peak + 1.5 GiB). The float64 inputs are twice the float32 ones, so these are what
    the plan cannot hold beside them; on the host they cost transfers (seconds for GiBs), not device memory. While
    entered, the trials' kept inputs (trial 0's, up to KEEP_BYTES) wait on `host`: the same lists, each floating
    tensor a copy on the host, and at exit a copy back on its device, bit for bit, with its dtype, shape, strides and
    offset and the memory it shared with another (relocated); every reader takes them from those lists
    (reference._Trials.inputs). Called, it gives what `draw()` gives, drawn once, each floating tensor copied to
    `host` and the device's let go (a draw of large inputs: 4 GiB for matrix_vector), from which each float64
    forward makes its float64 inputs on `device` (float64_reference's `device`: this one's). `host` None (the CPU
    path): nothing moves and `device` is None. `keep_draw`: the draw stays on the device, for a forward that rounds
    no input in place (the exact float64 forward, which needs no float32 value again once converted) and whose
    inputs fit there beside their float64 copies (_converts_on_device): each float32 input is let go as its float64
    copy is made (float64_reference), without crossing to the host and back."""

    def __init__(self, draw, trials: Any, host: str | None, device: str, keep_draw: bool = False):
        self.draw, self.trials, self.host, self.keep_draw = draw, trials, host, keep_draw
        self.device = device if host is not None else None
        self.drawn: list | None = None
        self.parked: list[tuple[list, list]] = []      # (a kept list, each tensor's own device or None)

    def __enter__(self) -> "Parked":
        if self.host is not None and self.trials is not None:
            for kept in self.trials.kept_inputs.values():
                devices = [x.device if _floating(x) else None for x in kept]
                kept[:] = relocated(kept, [None if d is None else self.host for d in devices])
                self.parked.append((kept, devices))
        return self

    def __call__(self) -> list:
        if self.host is None or self.keep_draw:
            return self.draw()
        if self.drawn is None:
            import torch
            drawn, host = self.draw(), torch.device(self.host)
            if tensor_bytes([x for x in drawn if _floating(x)]) <= KEEP_BYTES:
                return drawn            # small: within the plan's slack on the device, not worth the transfers
            self.drawn = relocated(drawn, [self.host if _floating(x) and x.device != host else None for x in drawn])
            trace("reference draw parked")
        return self.drawn

    def __exit__(self, *exc) -> None:
        self.drawn = None
        while self.parked:
            kept, devices = self.parked.pop()
            kept[:] = relocated(kept, devices)


CONVERT_SLACK = 1 << 30      # _converts_on_device: the share of the 1.5 GiB beyond 2x eager a conversion may take


def _converts_on_device(trials: Any) -> bool:
    """Whether the exact float64 forward's inputs may be converted where they were drawn (Parked's `keep_draw`):
    one float32 input beside its float64 copy, up to three times the inputs' bytes, stays within the reference's
    2x eager peak + 1.5 GiB (issue 44 item 8) where the inputs are at most twice the outputs plus CONVERT_SLACK (the
    eager peak holds at least inputs + outputs). Elementwise problems' 2.5 GiB draws then skip a trip to the host
    and back; matrix_vector's 4 GiB input, with its small output, does not (its reference took 12.21 GiB against
    9.88 converting on the device: docs/measurements.md, twentieth session)."""
    return trials.input_bytes <= 2 * trials.output_bytes + CONVERT_SLACK


def relocated(tensors: list, devices: list) -> list:
    """`tensors` with each one whose entry in `devices` is not None copied to that device, memory by memory: those
    that shared memory still do, and each keeps its dtype, shape, strides and offset (its copy holds the whole
    storage it lay in)."""
    import torch
    copies: dict = {}
    out = []
    for x, device in zip(tensors, devices):
        if device is None:
            out.append(x)
            continue
        storage = x.untyped_storage()
        key = (storage.device, storage.data_ptr())
        if key not in copies:
            whole = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
            if storage.device.type == "cuda" and torch.device(device).type == "cpu":     # pinned: fast both ways
                copy = host_empty(whole.shape, torch.uint8)
            else:
                copy = torch.empty(whole.shape, dtype=torch.uint8, device=device)
            copies[key] = copy.copy_(whole).untyped_storage()
            del whole
        y = torch.empty(0, dtype=x.dtype, device=device).set_(copies[key], x.storage_offset(), x.shape, x.stride())
        out.append(y.requires_grad_(x.requires_grad))
    return out
