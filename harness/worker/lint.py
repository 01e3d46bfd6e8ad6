"""Problem lint, worker side: is this problem worth benchmarking? Runs only problem code (never a candidate).

A problem that a constant or the identity can pass is useless; so is one whose output ignores its inputs or its
weights, holds NaN/Inf, or changes between two identical runs by more than its tolerance. Determinism is reported
on its own, bit for bit: two identical runs that differ only at the rounding level (atomics in cuDNN's
convolutions, split-K reductions) are not degenerate, but a user comparing outputs exactly should know.

Memory: lint holds to the budget (`gpu_memory_gb`, else the card) less its CUDA context. Outputs larger than
memplan.KEEP_BYTES are kept on the host and every comparison runs on the device a slice at a time (verify); a check
that still runs out of memory beside the kept outputs is skipped and named in `skipped`; only the eager forward
itself running out of memory makes the problem `oom`.
"""
from __future__ import annotations

from typing import Any

from harness.shared.memplan import CHUNK_BYTES, CONTEXT_BYTES, KEEP_BYTES, budget_bytes
from harness.worker.common import (Conn, apply_memory_share, as_tensor_list, describe, device_inputs, init_inputs,
    is_oom, load_module, problem_settings, setup_torch, tail_traceback, tensor_bytes)


SAMPLE = 1 << 16           # positions a check looks at first (_passes) and a large output's mean is taken over


def _positions(shape: tuple, device) -> tuple | None:
    """SAMPLE positions of a tensor of `shape` (index tensors on `device`, one per dimension), the same for every
    call; None where the tensor is small enough to take whole."""
    import math
    import torch
    numel = math.prod(shape)
    if numel <= SAMPLE:
        return None
    flat = torch.randint(0, numel, (SAMPLE,), generator=torch.Generator().manual_seed(numel))
    return tuple(i.to(device) for i in _unravel(flat, tuple(shape)))


def _unravel(flat, shape: tuple) -> tuple:
    """torch.unravel_index's indices, without its first call's import of sympy and torch.fx's symbolic shapes
    (up to seconds of every reference's setup; docs/measurements.md)."""
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat = flat // size
    return tuple(reversed(index))


def _sampled(outs: list, refs: list) -> tuple[list, list] | None:
    """The same positions of each output and its reference (outputs on the references' devices), or None where a
    pair's shapes or dtypes differ (the full comparison says so at once) or every output is small."""
    if len(outs) != len(refs) or all(r.numel() <= SAMPLE for r in refs):
        return None
    pairs = []
    for o, r in zip(outs, refs):
        if tuple(o.shape) != tuple(r.shape) or o.dtype != r.dtype:
            return None
        at = _positions(tuple(r.shape), r.device)
        pairs.append((o, r) if at is None else (o[tuple(i.to(o.device) for i in at)].to(r.device), r[at]))
    return [o for o, _ in pairs], [r for _, r in pairs]


def _passes(outs, refs, atol, rtol, device=None) -> bool:
    """Whether `outs` pass against `refs` at every position. A sample of positions first: where it fails, so does
    the whole, and a non-degenerate problem's checks (all of them fail) cost a sample each instead of a pass over
    its outputs each (seconds of a reference's setup where GiBs of outputs lie on the host; issue 29); the full
    comparison runs only where the sample passed."""
    from harness.worker.verify import compare_outputs
    sample = _sampled(outs, refs)
    if sample is not None and not compare_outputs(*sample, atol, rtol, device=device)["ok"]:
        return False
    return compare_outputs(outs, refs, atol, rtol, device=device)["ok"]


def _filled(o, value):
    """A stand-in output of o's shape and dtype holding `value` everywhere, without memory of its own (a 0-d tensor
    expanded): compared a slice at a time, it costs a slice."""
    import torch
    return torch.full_like(o.new_empty(()), value).expand(o.shape)


def degenerate_checks(outs: list, outs_other_inputs: list | None, inputs: list, atol: float, rtol: float,
                      device=None) -> dict:
    """The cheap checks, shared with the reference worker (which flags `degenerate_problem` from them). Outputs may
    lie on the host: every comparison runs on `device` (default: the outputs'), a slice at a time."""
    import torch
    from harness.worker.verify import all_finite
    # The constant a cheat would hard-code: the reference's mean over another draw of inputs (for a scalar loss
    # that is last draw's value; taking this output's own mean would make every scalar output "degenerate").
    # The stand-in outputs are expanded scalars: on a 16 GiB output a full copy each would add up.
    source = outs_other_inputs if outs_other_inputs is not None else outs
    zeros_pass = _passes([_filled(o, 0) for o in outs], outs, atol, rtol, device)
    constant_pass = _passes([_filled(o, _mean(s)) for o, s in zip(outs, source)], outs, atol, rtol, device)
    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    identity_passes = (first is not None and len(outs) == 1 and first.shape == outs[0].shape
                       and first.dtype == outs[0].dtype and _passes([first], outs, atol, rtol, device))
    finite = all_finite(outs, device=device)
    checks = {
        "zeros_pass": zeros_pass,
        "constant_pass": constant_pass,
        "identity_pass": bool(identity_passes),
        "nan_or_inf": not finite,
        "input_dependent": None if outs_other_inputs is None else not _passes(outs_other_inputs, outs, atol, rtol,
                                                                                  device),
    }
    reasons = [text for key, bad, text in (
        ("zeros_pass", True, "an all-zeros output passes the tolerance"),
        ("constant_pass", True, "a constant output (the reference's mean) passes the tolerance"),
        ("identity_pass", True, "returning the first input passes the tolerance"),
        ("nan_or_inf", True, "the reference output holds NaN or Inf"),
        ("input_dependent", False, "the output does not change with the inputs"),
    ) if checks[key] is bad]
    return {**checks, "degenerate": bool(reasons), "reasons": reasons}


def _bitwise_equal(a: list, b: list) -> bool:
    """Same shapes, dtypes and bytes (NaN at the same places counts as equal)."""
    import torch
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point() or x.is_complex():
            same = (x == y) | (torch.isnan(x) & torch.isnan(y))
            if not bool(same.all()):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def _bitwise_equal_pieces(a: list, b: list, device=None) -> bool:
    """_bitwise_equal a slice at a time (outputs on the host compared on the device)."""
    import torch
    from harness.worker.verify import pieces, piece
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        where = y.device if device is None else torch.device(device)
        limit = max(1, CHUNK_BYTES // max(1, x.element_size()))
        for _, prefix, span in pieces(tuple(x.shape), limit):
            if not _bitwise_equal([piece(x, prefix, span).to(where)], [piece(y, prefix, span).to(where)]):
                return False
    return True


def _max_abs_diff(a: list, b: list, device=None) -> float | None:
    """The largest |a - b| over finite elements of matching outputs (None when shapes differ), a slice at a time."""
    import torch
    from harness.worker.verify import pieces, piece
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return None
        where = y.device if device is None else torch.device(device)
        for _, prefix, span in pieces(tuple(x.shape), max(1, CHUNK_BYTES // 8)):
            d = (piece(x, prefix, span).to(where).double() - piece(y, prefix, span).to(where).double()).abs()
            d = d[torch.isfinite(d)]
            worst = max(worst, float(d.max()) if d.numel() else 0.0)
    return worst


def _large(t) -> bool:
    return t.numel() * 8 > CHUNK_BYTES


def _mean(t) -> float:
    if not t.numel():
        return 0.0
    if _large(t):                                      # over SAMPLE positions: the constant a cheat would guess
        part = t[_positions(tuple(t.shape), t.device)].double()
        if t.is_floating_point():
            part = part[~part.isnan()]
        value = float(part.mean()) if part.numel() else float("nan")
    else:
        value = float(t.double().nanmean()) if t.is_floating_point() else float(t.double().mean())
    return value if t.is_floating_point() else round(value)


def scale(outs: list) -> dict[str, float]:
    import math
    import torch
    if any(_large(o) for o in outs):                   # float64 sums a slice at a time
        from harness.worker.verify import flat_pieces
        n, s1, s2, s_abs = 0, 0.0, 0.0, 0.0
        for o in outs:
            for _, part in flat_pieces(o, CHUNK_BYTES, 8):
                part = part.double()
                part = part[torch.isfinite(part)]
                n += part.numel()
                s1, s2, s_abs = s1 + float(part.sum()), s2 + float((part * part).sum()), s_abs + float(part.abs().sum())
        if not n:
            return {"mean_abs": float("nan"), "std": 0.0}
        var = max(0.0, (s2 - s1 * s1 / n) / (n - 1)) if n > 1 else 0.0
        return {"mean_abs": s_abs / n, "std": math.sqrt(var)}
    flat = torch.cat([o.float().reshape(-1) for o in outs if o.numel()]) if outs else None
    if flat is None or not flat.numel():
        return {"mean_abs": 0.0, "std": 0.0}
    finite = flat[torch.isfinite(flat)]
    return {"mean_abs": float(finite.abs().mean()) if finite.numel() else float("nan"),
            "std": float(finite.std()) if finite.numel() > 1 else 0.0}


def run(conn: Conn, data: dict[str, Any]) -> None:
    from harness.shared import messages as m
    from harness.shared.containment import is_memory_error
    stage = ["loading the problem"]                    # what was being done, for the error (an oom says where)
    try:
        conn.reply(m.from_fields(m.LintReport, _lint(m.parse(m.LintJob, data), stage)))
    except BaseException as exc:                       # noqa: BLE001 - a broken problem is a lint result
        conn.reply(m.Error(describe(exc), stage[0], is_memory_error(exc), tail_traceback(exc)))


def _lint(job, stage: list[str]) -> dict[str, Any]:
    """The problem's lint at its main size and, where it declares several (SIZES), at each of them: a size whose
    checks fail makes the problem degenerate, named in its reasons."""
    from harness.worker import sizes
    device = job.device
    try:
        card = apply_memory_share(None, device)
        if card:                                       # the budget less this process's context
            apply_memory_share(max(0, budget_bytes(job.gpu_memory_gb, card) - CONTEXT_BYTES), device)
    except Exception:                                  # noqa: BLE001 - a device that fails says so at its first use
        pass
    problem = load_module("kb_problem", job.problem_path)
    settings = problem_settings(problem, job.precision)
    setup_torch(settings)
    stage[0] = "SIZES"
    declared = sizes.declared(problem)
    if len(declared) == 1:
        return _lint_size(problem, settings, job, stage, None)
    sizes.check_init(problem, declared, init_inputs(problem))
    report = _lint_size(problem, settings, job, stage, None)
    per = []
    for size in declared:           # the main size's checks are the report's own; each other size's are its own
        one = report if size.main else _lint_size(problem, settings, job, stage, size)
        per.append(_size_summary(size, one))
    report["sizes"] = per
    report["reasons"] += [f"size {s['name']!r}: {'; '.join(s['reasons'])}" for s in per if s["reasons"] and
                          not s["main"]]
    report["degenerate"] = bool(report["reasons"])
    return report


def _size_summary(size, report: dict[str, Any]) -> dict[str, Any]:
    """One size's lint, in brief (LintReport.sizes)."""
    return {"name": size.name, "main": size.main, "sets": dict(size.overrides),
            "verdict": "degenerate" if report["degenerate"] else "ok", "reasons": list(report["reasons"]),
            "output_shapes": report["output_shapes"], "eager_ms": report["eager_ms"],
            "peak_memory_gb": report["peak_memory_gb"], "skipped": list(report["skipped"])}


def _lint_size(problem, settings, job, stage: list[str], size) -> dict[str, Any]:
    """The checks at one of the problem's sizes (harness.worker.sizes; None: the main one)."""
    import torch
    from harness.worker import timing
    device, seed = job.device, job.seed
    where_size = "" if size is None else f" at size {size.name!r}"
    dtype = getattr(torch, settings.dtype)
    skipped: list[str] = []
    on_host = [False]

    def build(s):
        stage[0] = "Model(*get_init_inputs())"
        torch.manual_seed(s)
        return problem.Model(*init_inputs(problem)).to(device=device, dtype=dtype)

    def keep(raw: list) -> list:
        """An output kept for the checks: a copy on the device, or on the host where large."""
        if device != "cpu" and tensor_bytes(raw) > KEEP_BYTES:
            on_host[0] = True
            return [o.to("cpu") for o in raw]
        return [o.clone() for o in raw]

    def forward(model, s_in, what):
        stage[0] = f"get_inputs() ({what}){where_size}"
        x = device_inputs(problem, s_in, settings, device, size)
        stage[0] = f"forward ({what})"
        torch.manual_seed(s_in)
        return x, keep(as_tensor_list(model(*x)))

    def optional(check: str, what, fn):
        """A check beyond the eager forward: on running out of memory it is skipped and named, not an `oom`."""
        try:
            return fn()
        except Exception as exc:                       # noqa: BLE001 - only running out of memory is skipped
            if not is_oom(exc):
                raise
            if device != "cpu":
                torch.cuda.empty_cache()
            skipped.append(f"{check}: out of memory in {what} ({describe(exc)[:160]})")
            return None

    model = build(seed)
    stage[0] = f"get_inputs(){where_size}"
    inputs = device_inputs(problem, seed, settings, device, size)
    if device != "cpu":                                # the problem's own footprint: model, inputs, one forward
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    stage[0] = f"forward{where_size}"
    torch.manual_seed(seed)
    raw = as_tensor_list(model(*inputs))
    peak = torch.cuda.max_memory_allocated() if device != "cpu" else None
    outs = keep(raw)
    del raw
    if on_host[0]:
        del inputs                                     # drawn again where a check needs them
        inputs = None
    atol, rtol = settings.atol, settings.rtol
    where = device if device != "cpu" else None
    # one comparison output alive at a time, each dropped once checked (a KernelBench conv's output is 16 GiB)
    other = optional("input_dependent", "the forward on other inputs",
                     lambda: forward(model, seed + 1, "other inputs")[1])
    stage[0] = "checks"
    first = inputs if inputs is not None else device_inputs(problem, seed, settings, device, size)
    checks = degenerate_checks(outs, other, first, atol, rtol, device=where)
    del other, first
    again = optional("deterministic", "a second identical run",
                     lambda: forward(build(seed), seed, "second identical run")[1])
    stage[0] = "checks"
    agree = True
    checks["deterministic"] = checks["run_to_run_max_abs"] = None
    if again is not None:
        checks["deterministic"] = _bitwise_equal_pieces(again, outs, where)
        checks["run_to_run_max_abs"] = _max_abs_diff(again, outs, where)
        agree = _passes(again, outs, atol, rtol, where)
    del again
    has_params = any(True for _ in model.parameters())
    checks["param_dependent"] = None
    if has_params:
        other_params = optional("param_dependent", "the forward with other weights",
                                lambda: forward(build(seed + 1), seed, "other weights")[1])
        stage[0] = "checks"
        if other_params is not None:
            checks["param_dependent"] = not _passes(other_params, outs, atol, rtol, where)
        del other_params
    if checks["param_dependent"] is False:
        checks["reasons"].append("the output does not change with the weights")
    if not agree:
        checks["reasons"].append("two identical runs disagree beyond the tolerance")
    checks["degenerate"] = bool(checks["reasons"])
    stage[0] = "timing"
    timed = inputs if inputs is not None else device_inputs(problem, seed, settings, device, size)
    stats = optional("eager_ms", "the timed calls", lambda: timing.time_calls(
        lambda i: timed, lambda x: model(*x), device, 3, job.samples, device != "cpu"))
    return {**checks, **scale(outs), "dtype": settings.dtype, "atol": atol, "rtol": rtol,
            "output_shapes": [list(o.shape) for o in outs], "eager_ms": stats["median_ms"] if stats else None,
            "peak_memory_gb": None if peak is None else peak / 1e9, "skipped": skipped,
            "outputs_on_host": on_host[0]}
