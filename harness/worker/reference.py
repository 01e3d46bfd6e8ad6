"""The reference side of one problem: a process where candidate code never runs.

It builds Model, computes the expected outputs of every trial, compiles the torch.compile baselines, writes the
reference's parameters for candidate workers to copy, and then serves the parent: timed samples of eager PyTorch
and the baselines (harness.worker.sampler, the same path the candidate goes through, interleaved with it by the
parent), and 'verify' requests: it loads the outputs a candidate worker wrote and compares them with the expected
ones it kept.
"""
from __future__ import annotations

import os
import time
from typing import Any

from harness.worker.peer import PeerError, PeerReader, slot_values
from harness.worker.common import (Conn, ProblemError, as_tensor_list, describe, device_inputs, init_inputs, is_oom,
                     load_module, problem_settings, setup_torch, tail_traceback)


def run(conn: Conn, data: dict[str, Any]) -> None:
    from harness.worker import verify
    from harness.shared import messages as m
    from harness.worker import integrity, rawread  # noqa: F401 - the same snapshot as the candidate's, so that
    from harness.shared import tensorfile  # noqa: F401
    from harness.worker.sampler import Sampler  # the integrity check after each sample is the same work
    job = m.parse(m.ReferenceJob, data)           # on both sides
    device = job.device
    rawread.bind(cuda=device != "cpu")
    integrity.snapshot()
    try:
        problem, model, settings, inputs, expected, initial_state = _prepare(job, device)
    except BaseException as exc:                       # noqa: BLE001 - a broken problem is a message, not a crash
        conn.send("error", stage=getattr(exc, "stage", "problem"), error=describe(exc),
                  oom=is_oom(exc), traceback=tail_traceback(exc))
        return
    hints = _EvalModeHint(model, initial_state, inputs, settings)
    info: dict[str, Any] = {
        "dtype": settings.dtype, "dtype_source": settings.dtype_source, "atol": settings.atol, "rtol": settings.rtol,
        "allow_tf32": settings.allow_tf32,
        "output_shapes": [list(t.shape) for t in expected[0]],
        "parameters": sum(p.numel() for p in model.parameters()),
        "module_mode": "train" if model.training else "eval",
        "footprint_bytes": _footprint(model, inputs[0], expected[0]),
    }
    from harness.worker.lint import degenerate_checks
    info["lint"] = degenerate_checks(expected[0], expected[1] if len(expected) > 1 else None, inputs[0],
                                     settings.atol, settings.rtol)
    try:
        calls, info["compile"] = _variants(model, job.compile_modes, inputs[0], expected[0], settings)
        info["timer_floor_ms"] = _timer_floor(device)
        spec = job.timing
        sampler = Sampler(calls, problem, settings, device, spec, job.defenses, trusted=True)
        info["cold_probe_ms"] = _probe(sampler, job.probe_seeds)
    except BaseException as exc:                       # noqa: BLE001
        conn.send("error", stage="reference timing", error=describe(exc), oom=is_oom(exc),
                  traceback=tail_traceback(exc))
        return
    sampler.settle()
    conn.send("ready", **info)
    expected64 = None
    full = _FullCheck(model, initial_state, settings, job.defenses)
    peer = PeerReader() if device != "cpu" else None
    while True:
        message = conn.recv()
        op = message.get("op")
        reply = sampler.handle(message)
        if reply is not None:
            conn.send(reply.pop("kind"), **reply)
        elif op == m.DeriveRequest.OP:
            req = m.parse(m.DeriveRequest, message)
            derived, expected64 = _derive(model, initial_state, inputs[0], expected[0], job.defenses, device,
                                          req.flops)
            reply = m.wire(derived)
            conn.send(reply.pop("kind"), **reply)
        elif op == m.ReadRequest.OP and peer is not None:
            reply = m.wire(_read_peer(peer, m.parse(m.ReadRequest, message), sampler, full))
            conn.send(reply.pop("kind"), **reply)
        elif op == "peer_close":
            if peer is not None:
                peer.close()
            sampler.kept.clear()
            conn.send("peer_closed")
        elif op == "verify":
            results = [_verify_file(item, expected, sampler, full, settings, device, verify)
                       for item in message["files"]]
            for result, item in zip(results, message["files"]):
                if item["trial"] == 0 and result.get("outputs") is not None and expected64 is not None:
                    result["fp64_max_abs_err"] = _max_abs(result["outputs"], expected64)
                if not result["ok"] and result.get("outputs") is not None and item["trial"] >= 0:
                    result["hint"] = hints.explain(int(item["trial"]), result["outputs"], verify)
                result.pop("outputs", None)
            conn.send("verified", results=results)
        elif op == "health":
            conn.send("health", ok=_healthy(device))
        else:
            return


def _derive(model, initial_state, inputs: list, expected: list, defenses: bool, device: str, flops: bool):
    """What m.DeriveRequest asks for, and the float64 outputs the verifications compare against (None with the
    defenses off). Runs while the candidate worker starts and runs its trials (after them for a large problem):
    it leaves nothing in the allocator's cache, so the candidate finds the device's memory as `ready` left it."""
    from harness.shared import messages as m
    if not defenses:
        return m.Derived(None), None
    work = _work(model, inputs, expected) if flops else None
    expected64 = _float64_reference(model, initial_state, inputs)
    derived = m.Derived(work, _max_abs(expected, expected64), _max_magnitude(expected64))
    if device != "cpu":
        import torch
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return derived, expected64


def _variants(model, modes: list[str], inputs: list, expected: list, settings) -> tuple[dict, dict]:
    """The calls the reference side times: eager, and torch.compile in each mode that compiles and computes the
    same outputs as eager on trial 0's inputs (a failure is noted, not fatal)."""
    import torch
    from harness.worker.verify import compare_outputs
    calls = {"eager": lambda x: model(*x)}
    notes: dict[str, Any] = {}
    for mode in modes:
        started = time.monotonic()
        try:
            compiled = torch.compile(model, mode=mode)
            torch.manual_seed(0)
            result = compare_outputs(as_tensor_list(compiled(*inputs)), expected, settings.atol, settings.rtol)
            if not result["ok"]:
                raise ValueError(f"its outputs differ from eager: {result['reason']}")
        except Exception as exc:                       # noqa: BLE001 - a baseline that fails is noted
            notes[mode] = {"error": describe(exc), "compile_seconds": round(time.monotonic() - started, 2)}
            continue
        calls[f"compile:{mode}"] = lambda x, c=compiled: c(*x)
        notes[mode] = {"error": None, "compile_seconds": round(time.monotonic() - started, 2)}
    return calls, notes


def _probe(sampler, seeds: list[int]) -> float | None:
    """The eager call's median over a few cold samples: what timing mode `auto` decides on."""
    import statistics
    from harness.shared import messages as m
    saved, sampler.mode = sampler.mode, ("host" if sampler.device == "cpu" else "cold")
    times = [sampler.sample(m.SampleRequest("eager", s)).ms for s in seeds]
    sampler.last = None
    sampler.mode = saved
    sampler.meters.clear()
    return statistics.median(times) if times else None


def _timer_floor(device: str) -> float:
    from harness.worker import timing
    return timing.timer_floor(device)


def _work(model, inputs, outputs):
    """FLOPs of one forward (torch.utils.flop_counter) and the fewest bytes it must move: every input, parameter
    and buffer read once, every output written once."""
    from torch.utils.flop_counter import FlopCounterMode
    try:
        counter = FlopCounterMode(display=False)
        with counter:
            model(*inputs)
        flops = int(counter.get_total_flops())
    except Exception:                                  # noqa: BLE001 - an op the counter does not know
        flops = None
    from harness.shared import messages as m
    return m.Work(flops, _footprint(model, inputs, outputs))


def _footprint(model, inputs, outputs) -> int:
    """Bytes of one trial's inputs and outputs and of the model's parameters and buffers: what a forward moves at
    least (`work.bytes`), and what the float64 reference doubles (the parent decides from it whether that may run
    beside the candidate's trials)."""
    import torch
    tensors = ([x for x in inputs if isinstance(x, torch.Tensor)] + list(model.parameters()) + list(model.buffers())
               + list(outputs))
    return int(sum(t.numel() * t.element_size() for t in tensors))


def _float64_reference(model, initial_state, inputs):
    """The reference computed in float64 (trial 0), to show how far fp32 results, the reference's and the
    candidate's, are from the exact function."""
    import copy
    import torch
    try:
        model64 = copy.deepcopy(model)
        model64.load_state_dict(initial_state)
        model64 = model64.double()
        x64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        torch.manual_seed(0)
        out = as_tensor_list(model64(*x64))
        del model64
        return out
    except Exception:                                  # noqa: BLE001 - some ops have no float64 kernel
        return None


def _max_magnitude(outs) -> float | None:
    """The largest |value| of the float64 outputs (the scale one fp32 rounding error is measured against)."""
    try:
        vals = [float(o.abs().max()) for o in outs or [] if o.numel() and o.is_floating_point()]
        return max(vals) if vals else None
    except Exception:                                  # noqa: BLE001
        return None


def _max_abs(outs, refs) -> float | None:
    import torch
    try:
        if len(outs) != len(refs):
            return None
        vals = [float((o.to(r.device, torch.float64) - r).abs().max()) for o, r in zip(outs, refs)
                if o.shape == r.shape and o.numel()]
        return max(vals) if vals else None
    except Exception:                                  # noqa: BLE001
        return None


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


def _prepare(job, device: str):
    import torch
    from harness.worker import integrity
    problem = _stage("problem import", load_module, "kb_problem", job.problem_path)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(problem, name):
            raise _StageError("problem", ProblemError(f"no {name} defined"))
    integrity.watch_module(problem)                    # the same after-sample checks as the candidate's
    settings = _stage("problem settings", problem_settings, problem, job.precision)
    setup_torch(settings)
    seed = job.seed
    torch.manual_seed(seed)
    args = _stage("get_init_inputs()", init_inputs, problem)
    model = _stage("Model(*get_init_inputs())", lambda: problem.Model(*args))
    model = model.to(device=device, dtype=getattr(torch, settings.dtype))
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    torch.save(state, os.path.join(job.scratch, "reference_state.pt"))
    inputs = [_stage("get_inputs()", lambda k=k: device_inputs(problem, seed + k, settings, device))
              for k in range(job.trials)]
    expected = []
    for k, x in enumerate(inputs):
        torch.manual_seed(seed + k)
        out = _stage("reference forward", model, *x)
        expected.append([t.clone() for t in _stage("reference output", as_tensor_list, out)])
    return problem, model, settings, inputs, expected, state


def _verify_file(item: dict[str, Any], expected, sampler, full: "_FullCheck", settings, device: str,
                 verify) -> dict[str, Any]:
    """A trial's output file against its expected output; trial -1: a timed output the parent copied out of a CPU
    candidate's memory (one 1-D tensor per output with `shapes` and `strides` beside it), against the output kept
    at that sample's CheckRequest (keep_full), with the float64 figures of _FullCheck."""
    from harness.shared.tensorfile import read_tensors
    label, path, k = item["label"], item["path"], int(item["trial"])
    kept = sampler.kept.pop(int(item.get("check_seed", -1)), None) if k < 0 else None
    if k < 0 and kept is None:
        _remove(path)
        return {"label": label, "ok": False, "reason": "no expected output for this call"}
    try:
        outs = read_tensors(path, device)
        if k < 0:
            outs = [t.as_strided(list(shape), list(strides)) for t, shape, strides in
                    zip(outs, item.get("shapes") or [], item.get("strides") or [])]
    except Exception as exc:                           # noqa: BLE001 - a malformed file is a failed check
        return {"label": label, "ok": False, "reason": f"unreadable output file: {describe(exc)}"}
    finally:
        _remove(path)
    if k < 0:
        return {"label": label, **full.compare(outs, kept)}
    result = verify.compare_outputs(outs, expected[k], settings.atol, settings.rtol)
    return {"label": label, **result, "outputs": outs}


def _read_peer(peer: PeerReader, req, sampler, full: "_FullCheck"):
    """A GPU candidate's timed output, read through its IPC handles at the drawn positions (and whole with
    `full`), while the candidate is stopped (messages.ReadRequest)."""
    from harness.shared import messages as m
    try:
        values: list[float] = []
        shapes: list[list[int]] = []
        for slot, exported in zip(req.slots, req.outputs):
            outs = [peer.tensor(e) for e in exported]
            values += slot_values(outs, req.check_seed, slot)
            shapes = [list(t.shape) for t in outs]
        checked = full.compare(outs, sampler.kept.pop(req.check_seed, None)) if req.full and req.outputs else None
    except (PeerError, RuntimeError, ValueError, TypeError, KeyError) as exc:
        return m.ReadResult("", [], f"its memory could not be read: {describe(exc)}")
    return m.ReadResult(m.pack_floats(values), shapes, full=checked)


class _FullCheck:
    """A whole timed output of the candidate against the reference's output on the same inputs (kept at that
    sample's check), and both against float64 on those inputs, so that reduced precision used only while timed
    shows as it does in the trials (`defenses.check_precision`)."""

    def __init__(self, model, initial_state, settings, defenses: bool):
        self.model, self.initial_state, self.settings, self.defenses = model, initial_state, settings, defenses

    def compare(self, outs: list, kept) -> dict[str, Any]:
        from harness.worker import verify
        if kept is None:
            return {"ok": False, "reason": "no expected output for this call"}
        expected, inputs = kept
        result = verify.compare_outputs(outs, expected, self.settings.atol, self.settings.rtol)
        result = {k: v for k, v in result.items() if k in ("ok", "reason", "max_abs_err", "max_rel_err")}
        if self.defenses and self.settings.dtype == "float32":
            exact = _float64_reference(self.model, self.initial_state, inputs)
            if exact is not None:
                result.update(fp64_max_abs_err=_max_abs(outs, exact),
                              fp64_reference_max_abs_err=_max_abs(expected, exact),
                              fp64_output_scale=_max_magnitude(exact))
        return result


class _EvalModeHint:
    """Explains a common failure: the candidate computes the eval-mode function (running statistics for
    BatchNorm, no dropout) while the reference, as in KernelBench, runs in training mode."""

    MESSAGE = ("it matches the reference in eval mode: the candidate assumes eval-mode BatchNorm/Dropout (running "
               "statistics), but modules run in their default training mode, as in KernelBench")

    def __init__(self, model, initial_state, inputs, settings):
        import torch.nn as nn
        kinds = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd, nn.modules.instancenorm._InstanceNorm)
        self.sensitive = any(isinstance(m, kinds) for m in model.modules())
        self.model, self.initial_state, self.inputs, self.settings = model, initial_state, inputs, settings
        self.eval_model = None

    def explain(self, k: int, outs, verify) -> str | None:
        import copy
        import torch
        if not self.sensitive:
            return None
        try:
            if self.eval_model is None:
                self.eval_model = copy.deepcopy(self.model)
                self.eval_model.load_state_dict(self.initial_state)
                self.eval_model.eval()
            torch.manual_seed(0)
            expected = as_tensor_list(self.eval_model(*self.inputs[k]))
            result = verify.compare_outputs(outs, expected, max(self.settings.atol, 1e-3), max(self.settings.rtol, 1e-3))
        except Exception:                              # noqa: BLE001 - a hint is optional
            return None
        return self.MESSAGE if result["ok"] else None


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

