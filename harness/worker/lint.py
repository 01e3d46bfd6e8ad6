"""Problem lint, worker side: is this problem worth benchmarking? Runs only problem code (never a candidate).

A problem that a constant or the identity can pass is useless; so is one whose output ignores its inputs or its
weights, holds NaN/Inf, or changes between two identical runs by more than its tolerance. Determinism is reported
on its own, bit for bit: two identical runs that differ only at the rounding level (atomics in cuDNN's
convolutions, split-K reductions) are not degenerate, but a user comparing outputs exactly should know.
"""
from __future__ import annotations

from typing import Any

from harness.worker.common import (Conn, as_tensor_list, describe, device_inputs, init_inputs, load_module,
    problem_settings, setup_torch, tail_traceback)


def _passes(outs, refs, atol, rtol) -> bool:
    from harness.worker.verify import compare_outputs
    return compare_outputs(outs, refs, atol, rtol)["ok"]


def degenerate_checks(outs: list, outs_other_inputs: list | None, inputs: list, atol: float, rtol: float) -> dict:
    """The cheap checks, shared with the reference worker (which flags `degenerate_problem` from them)."""
    import torch
    # The constant a cheat would hard-code: the reference's mean over another draw of inputs (for a scalar loss
    # that is last draw's value; taking this output's own mean would make every scalar output "degenerate").
    # Each stand-in output is made, compared and dropped before the next: on a 16 GiB output they add up.
    source = outs_other_inputs if outs_other_inputs is not None else outs
    zeros_pass = _passes([torch.zeros_like(o) for o in outs], outs, atol, rtol)
    constant_pass = _passes([torch.full_like(o, _mean(s)) for o, s in zip(outs, source)], outs, atol, rtol)
    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    identity_passes = (first is not None and len(outs) == 1 and first.shape == outs[0].shape
                       and first.dtype == outs[0].dtype and _passes([first], outs, atol, rtol))
    finite = all(bool(torch.isfinite(o).all()) for o in outs if o.is_floating_point())
    checks = {
        "zeros_pass": zeros_pass,
        "constant_pass": constant_pass,
        "identity_pass": bool(identity_passes),
        "nan_or_inf": not finite,
        "input_dependent": None if outs_other_inputs is None else not _passes(outs_other_inputs, outs, atol, rtol),
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


def _max_abs_diff(a: list, b: list) -> float | None:
    """The largest |a - b| over finite elements of matching outputs (None when shapes differ)."""
    import torch
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return None
        if x.numel():
            d = (x.double() - y.double()).abs()
            d = d[torch.isfinite(d)]
            worst = max(worst, float(d.max()) if d.numel() else 0.0)
    return worst


def _mean(t) -> float:
    if not t.numel():
        return 0.0
    value = float(t.double().nanmean()) if t.is_floating_point() else float(t.double().mean())
    return value if t.is_floating_point() else round(value)


def scale(outs: list) -> dict[str, float]:
    import torch
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
        conn.send("lint", **_lint(m.parse(m.LintJob, data), stage))
    except BaseException as exc:                       # noqa: BLE001 - a broken problem is a lint result
        conn.send("error", error=describe(exc), stage=stage[0], oom=is_memory_error(exc),
                  traceback=tail_traceback(exc))


def _lint(job, stage: list[str]) -> dict[str, Any]:
    import torch
    from harness.worker import timing
    device, seed = job.device, job.seed
    problem = load_module("kb_problem", job.problem_path)
    settings = problem_settings(problem, job.precision)
    setup_torch(settings)
    dtype = getattr(torch, settings.dtype)

    def build(s):
        stage[0] = "Model(*get_init_inputs())"
        torch.manual_seed(s)
        return problem.Model(*init_inputs(problem)).to(device=device, dtype=dtype)

    def forward(model, s_in, what):
        stage[0] = f"get_inputs() ({what})"
        x = device_inputs(problem, s_in, settings, device)
        stage[0] = f"forward ({what})"
        torch.manual_seed(s_in)
        return x, [o.clone() for o in as_tensor_list(model(*x))]

    model = build(seed)
    stage[0] = "get_inputs()"
    inputs = device_inputs(problem, seed, settings, device)
    if device != "cpu":                                # the problem's own footprint: model, inputs, one forward
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    stage[0] = "forward"
    torch.manual_seed(seed)
    raw = as_tensor_list(model(*inputs))
    peak = torch.cuda.max_memory_allocated() if device != "cpu" else None
    outs = [o.clone() for o in raw]
    del raw
    atol, rtol = settings.atol, settings.rtol
    # one comparison output alive at a time, each dropped once checked (a KernelBench conv's output is 16 GiB)
    other = forward(model, seed + 1, "other inputs")[1]
    stage[0] = "checks"
    checks = degenerate_checks(outs, other, inputs, atol, rtol)
    del other
    again = forward(build(seed), seed, "second identical run")[1]
    stage[0] = "checks"
    checks["deterministic"] = _bitwise_equal(again, outs)
    checks["run_to_run_max_abs"] = _max_abs_diff(again, outs)
    agree = _passes(again, outs, atol, rtol)
    del again
    has_params = any(True for _ in model.parameters())
    checks["param_dependent"] = None
    if has_params:
        other_params = forward(build(seed + 1), seed, "other weights")[1]
        stage[0] = "checks"
        checks["param_dependent"] = not _passes(other_params, outs, atol, rtol)
        del other_params
    if checks["param_dependent"] is False:
        checks["reasons"].append("the output does not change with the weights")
    if not agree:
        checks["reasons"].append("two identical runs disagree beyond the tolerance")
    checks["degenerate"] = bool(checks["reasons"])
    stage[0] = "timing"
    stats = timing.time_calls(lambda i: inputs, lambda x: model(*x), device, 3, job.samples,
                              device != "cpu")
    return {**checks, **scale(outs), "dtype": settings.dtype, "atol": atol, "rtol": rtol,
            "output_shapes": [list(o.shape) for o in outs], "eager_ms": stats["median_ms"],
            "peak_memory_gb": None if peak is None else peak / 1e9}
