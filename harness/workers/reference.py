"""The reference side of one problem: a process where candidate code never runs.

It builds Model, computes the expected outputs of every trial, times eager PyTorch, writes the reference's
parameters for candidate workers to copy, and then serves 'verify' requests: it loads the outputs a candidate
worker wrote and compares them with the expected ones it kept.
"""
from __future__ import annotations

import os
from typing import Any

from .common import (Conn, ProblemError, as_tensor_list, describe, init_inputs, load_module, make_inputs,
                     problem_settings, setup_torch, tail_traceback, to_device)


def run(conn: Conn, job: dict[str, Any]) -> None:
    import torch
    from .. import timing, verify

    device = job["device"]
    try:
        state = _prepare(job, device)
    except BaseException as exc:                       # noqa: BLE001 - a broken problem is a message, not a crash
        conn.send("error", stage=getattr(exc, "stage", "problem"), error=describe(exc),
                  oom=_is_oom(exc), traceback=tail_traceback(exc))
        return
    model, settings, inputs, expected = state
    info: dict[str, Any] = {
        "dtype": settings.dtype, "atol": settings.atol, "rtol": settings.rtol, "allow_tf32": settings.allow_tf32,
        "output_shapes": [list(t.shape) for t in expected[0]],
        "parameters": sum(p.numel() for p in model.parameters()),
        "module_mode": "train" if model.training else "eval",
    }
    if job.get("time_reference", True):
        t = job["timing"]
        info["timing"] = timing.time_calls(lambda k: model(*inputs[k]), t["input_sets"], device, t["warmup"],
                                           t["samples"], t["flush_l2"])
        info["timer_floor_ms"] = timing.timer_floor(device)
    conn.send("ready", **info)
    while True:
        message = conn.recv()
        op = message.get("op")
        if op == "verify":
            conn.send("verified", results=[_verify_file(item, expected, settings, device, verify)
                                           for item in message["files"]])
        elif op == "health":
            conn.send("health", ok=_healthy(device))
        else:
            return


class _StageError(Exception):
    def __init__(self, stage: str, exc: BaseException):
        super().__init__(describe(exc))
        self.stage = stage
        self.__cause__ = exc


def _stage(name: str, fn, *args):
    try:
        return fn(*args)
    except BaseException as exc:                       # noqa: BLE001
        raise _StageError(name, exc) from exc


def _prepare(job: dict[str, Any], device: str):
    import torch
    problem = _stage("problem import", load_module, "kb_problem", job["problem_path"])
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(problem, name):
            raise _StageError("problem", ProblemError(f"no {name} defined"))
    settings = _stage("problem settings", problem_settings, problem)
    setup_torch(settings)
    seed = job["seed"]
    torch.manual_seed(seed)
    args = _stage("get_init_inputs()", init_inputs, problem)
    model = _stage("Model(*get_init_inputs())", lambda: problem.Model(*args))
    model = model.to(device=device, dtype=getattr(torch, settings.dtype))
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    torch.save(state, os.path.join(job["scratch"], "reference_state.pt"))
    inputs = [_stage("get_inputs()", lambda k=k: to_device(make_inputs(problem, seed + k, settings), device))
              for k in range(job["trials"])]
    expected = []
    for k, x in enumerate(inputs):
        torch.manual_seed(seed + k)
        out = _stage("reference forward", model, *x)
        expected.append([t.clone() for t in _stage("reference output", as_tensor_list, out)])
    return model, settings, inputs, expected


def _verify_file(item: dict[str, Any], expected, settings, device: str, verify) -> dict[str, Any]:
    import torch
    label, path, k = item["label"], item["path"], int(item["trial"])
    try:
        outs = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:                           # noqa: BLE001 - a malformed file is a failed check
        return {"label": label, "ok": False, "reason": f"unreadable output file: {describe(exc)}"}
    finally:
        _remove(path)
    if not isinstance(outs, list) or not all(isinstance(t, torch.Tensor) for t in outs):
        return {"label": label, "ok": False, "reason": "output file does not hold a list of tensors"}
    result = verify.compare_outputs(outs, expected[k], settings.atol, settings.rtol)
    return {"label": label, **result}


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _healthy(device: str) -> bool:
    import torch
    try:
        x = torch.arange(1 << 20, device=device, dtype=torch.float32)
        return float(x.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2)
    except Exception:                                  # noqa: BLE001
        return False


def _is_oom(exc: BaseException) -> bool:
    while exc is not None:
        if "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError":
            return True
        exc = exc.__cause__
    return False
