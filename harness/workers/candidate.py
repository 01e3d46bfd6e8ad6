"""The candidate side of one (problem, candidate) pair: a fresh process per pair.

Order matters: the clocks are bound (import of harness.timing) and every input set is drawn from the problem's
get_inputs() before the candidate's code is imported. The expected outputs never enter this process: the outputs
are written to files that the reference worker compares.
"""
from __future__ import annotations

import os
from typing import Any

from .common import (Conn, SkipCandidate, as_tensor_list, compiler_summary, describe, init_inputs,
                     install_extension_hooks, load_module, make_inputs, problem_settings, setup_torch,
                     tail_traceback, to_device)


class Failed(Exception):
    def __init__(self, status: str, error: str, detail: str | None = None):
        super().__init__(error)
        self.status, self.error, self.detail = status, error, detail


def run(conn: Conn, job: dict[str, Any]) -> None:
    from .. import timing                              # binds the clocks now, before candidate code exists
    device = job["device"]
    try:
        problem, settings, init, cpu_inputs = _problem_side(job)
        model, log, param_match = _load_candidate(job, device, settings, init)
        report = _correctness(model, cpu_inputs, job, device, settings)
        conn.send("outputs", param_match=param_match, extensions=log.calls,
                  module_mode="train" if model.training else "eval", **report)
        if conn.recv().get("op") != "time":
            return
        conn.send("timed", **_timing(model, cpu_inputs, job, device, timing))
    except Failed as f:
        conn.send("failed", status=f.status, error=f.error, detail=f.detail)


def _problem_side(job):
    problem = load_module("kb_problem", job["problem_path"])
    settings = problem_settings(problem)
    setup_torch(settings)
    seed = job["seed"]
    init = init_inputs(problem)
    cpu_inputs = [make_inputs(problem, seed + k, settings) for k in range(job["trials"])]
    return problem, settings, init, cpu_inputs


def _classify(exc: BaseException, log, stage: str) -> Failed:
    if isinstance(exc, SkipCandidate):
        return Failed("skipped", log.skip_reason or str(exc))
    if log.compile_errors:
        line, detail = compiler_summary(log.compile_errors[-1])
        return Failed("compile_error", line, detail)
    if _is_oom(exc):
        return Failed("oom", f"{stage}: {describe(exc)}", tail_traceback(exc))
    status = "load_error" if stage in ("import", "ModelNew(*get_init_inputs())") else "runtime_error"
    return Failed(status, f"{stage}: {describe(exc)}", tail_traceback(exc))


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _load_candidate(job, device, settings, init):
    import torch
    log = install_extension_hooks("cpu" if device == "cpu" else "cuda")
    try:
        module = load_module("kb_candidate", job["candidate_path"])
    except BaseException as exc:                       # noqa: BLE001 - candidate code may raise anything
        raise _classify(exc, log, "import") from None
    if log.compile_errors:                             # a failed build the candidate caught and hid
        line, detail = compiler_summary(log.compile_errors[-1])
        raise Failed("compile_error", line, detail)
    model_cls = getattr(module, "ModelNew", None)
    if model_cls is None:
        raise Failed("load_error", "the candidate defines no ModelNew")
    torch.manual_seed(job["seed"])
    try:
        model = model_cls(*init)
    except BaseException as exc:                       # noqa: BLE001
        raise _classify(exc, log, "ModelNew(*get_init_inputs())") from None
    if not isinstance(model, torch.nn.Module):
        raise Failed("load_error", f"ModelNew(...) returned a {type(model).__name__}, not an nn.Module")
    param_match = _copy_reference_state(model, job["state_path"])
    try:
        model = model.to(device=device, dtype=getattr(torch, settings.dtype))
    except BaseException as exc:                       # noqa: BLE001
        raise _classify(exc, log, "moving ModelNew to the device") from None
    return model, log, param_match


def _copy_reference_state(model, state_path: str) -> str:
    """'state_dict' when the candidate has every reference key with the same shape (values copied in),
    'seed' when it does not (it keeps what seeded construction gave it)."""
    import torch
    reference = torch.load(state_path, map_location="cpu", weights_only=True)
    if not reference:
        return "no_parameters"
    own = model.state_dict()
    if all(k in own and tuple(own[k].shape) == tuple(v.shape) for k, v in reference.items()):
        model.load_state_dict(reference, strict=False)
        return "state_dict"
    return "seed"


def _same(a, b) -> bool:
    import torch
    if not isinstance(a, torch.Tensor):
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def _inputs_changed(work: list, pristine: list) -> bool:
    return not all(_same(w, p) for w, p in zip(work, pristine))


def _save(outs: list, scratch: str, label: str) -> str:
    import torch
    path = os.path.join(scratch, f"{label}.pt")
    torch.save([t.to("cpu").contiguous().clone() for t in outs], path)
    return path


def _forward(model, args, stage: str, log=None):
    try:
        return model(*args)
    except BaseException as exc:                       # noqa: BLE001
        raise _classify(exc, log or _NoLog, stage) from None


class _NoLog:
    compile_errors: list = []
    skip_reason = None


def _correctness(model, cpu_inputs, job, device, settings) -> dict[str, Any]:
    import torch
    files, mutated = [], False
    for k, cpu in enumerate(cpu_inputs):
        pristine = to_device(cpu, device)
        work = [x.clone() if isinstance(x, torch.Tensor) else x for x in pristine]
        torch.manual_seed(job["seed"] + k)
        out = _forward(model, work, f"forward (trial {k})")
        try:
            if device != "cpu":
                torch.cuda.synchronize()
            outs = as_tensor_list(out)
        except ValueError as exc:
            raise Failed("incorrect", f"trial {k}: {exc}") from None
        except BaseException as exc:                   # noqa: BLE001 - asynchronous CUDA errors surface here
            raise _classify(exc, _NoLog, f"forward (trial {k})") from None
        mutated = mutated or _inputs_changed(work, pristine)
        files.append({"label": f"trial{k}", "trial": k, "path": _save(outs, job["scratch"], f"trial{k}")})
    return {"files": files, "mutates_inputs": mutated}


def _timing(model, cpu_inputs, job, device, timing) -> dict[str, Any]:
    import torch
    t = job["timing"]
    n_sets = t["input_sets"]
    pristine = [to_device(cpu_inputs[k], device) for k in range(n_sets)]
    work = [[x.clone() if isinstance(x, torch.Tensor) else x for x in p] for p in pristine]
    samples = t["samples"]
    last = {k: max(i for i in range(samples) if i % n_sets == k) for k in range(min(n_sets, samples))}
    state = {"mutated": False, "files": []}

    def call(k):
        return model(*work[k])

    def after_call(i, k, out):
        if i == k or i == last.get(k):                 # the first and last timed output of every input set
            try:
                outs = as_tensor_list(out)
            except ValueError as exc:
                raise Failed("incorrect", f"timed call {i}: {exc}") from None
            label = f"timed{i}"
            state["files"].append({"label": label, "trial": k, "path": _save(outs, job["scratch"], label)})
        if _inputs_changed(work[k], pristine[k]):
            state["mutated"] = True
            for w, p in zip(work[k], pristine[k]):
                if isinstance(w, torch.Tensor):
                    w.copy_(p)

    try:
        stats = timing.time_calls(call, n_sets, device, t["warmup"], samples, t["flush_l2"], after_call)
    except Failed:
        raise
    except BaseException as exc:                       # noqa: BLE001
        raise _classify(exc, _NoLog, "forward (timing)") from None
    return {"timing": stats, "files": state["files"], "mutates_inputs": state["mutated"],
            "tampered_timers": timing.timers_tampered()}
