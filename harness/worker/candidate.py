"""The candidate side of one (problem, candidate) pair: a fresh process per pair.

Order matters: the clocks are bound (import of harness.worker.timing) and every input set is drawn from the problem's
get_inputs() before the candidate's code is imported; where the trials' inputs together are larger than
memplan.KEEP_BYTES they are drawn one trial at a time instead, with torch as it was before candidate code ran
(integrity.clean_torch, as every timed sample's are). The expected outputs never enter this process: the outputs
are written to files that the reference worker compares. Its device memory is capped at the share the parent's plan
left it (CandidateJob.memory_share_bytes, memplan): running out of it is the candidate's `oom`.

On the CPU path (CandidateJob.staged) none of that runs here: the worker builds ModelNew, says so and then only
answers calls on inputs the reference writes into its arena (harness.worker.arena, harness.run.stagedtrials).

The reference's executor (CandidateJob.executor, harness.run.reference_executor) is this worker with the problem's own
Model for ModelNew: it builds it, says so and only answers staged calls, on the CPU and the GPU alike.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from harness.shared import messages as m
from harness.shared.memplan import KEEP_BYTES
from harness.worker import integrity, rawread
from harness.worker.common import (Conn, SkipCandidate, apply_memory_share, as_tensor_list, compiler_summary, describe,
    device_inputs, init_inputs, is_oom, install_extension_hooks, load_module, problem_settings, setup_torch,
    tail_traceback, tensor_bytes, trace, warm_profiler)
from harness.worker.sampler import differs, not_plain, snapshot


class Failed(Exception):
    def __init__(self, status: str, error: str, detail: str | None = None):
        super().__init__(error)
        self.status, self.error, self.detail = status, error, detail


def run(conn: Conn, data: dict[str, Any]) -> None:
    from harness.worker import timing  # noqa: F401 - binds the clocks now, before candidate code exists
    from harness.shared import tensorfile  # noqa: F401 - imported before candidate code, in the snapshot too
    from harness.worker import integrity, rawread, sampler  # noqa: F401 - the timing path, recorded before
    job = m.parse(m.CandidateJob, data)                    # candidate code exists
    device = job.device
    warm_profiler()                 # confined already, so CUPTI's threads are too; before candidate code exists
    trace("candidate profiler warm")
    rawread.bind(cuda=device != "cpu")
    integrity.snapshot()
    try:
        apply_memory_share(job.memory_share_bytes, device)
    except Exception as exc:                           # noqa: BLE001 - no cap is no reason to fail the pair
        print(f"kb-harness: device memory share not applied: {describe(exc)}", flush=True)
    if job.staged or job.executor:
        _serve_staged(conn, job, device)
        return
    try:
        flusher = sampler.device_buffers(device, dataclasses.replace(job.timing, flush_l2=False)
                                         if job.staged_samples else job.timing, job.defenses)
        problem, settings, init, trial_inputs, declared = _problem_side(job, device)
        trace("candidate inputs drawn")
        plan = _plan(declared, job.trials)
        model, log, param_match = _load_candidate(job, device, settings, init)
        trace("candidate loaded")
        report = _correctness(model, trial_inputs, plan, job, device, conn)
        trace("candidate trials")
        conn.reply(m.Outputs(param_match, log.calls, "train" if model.training else "eval", **report))
        del trial_inputs
        trace("candidate trial inputs dropped")
        if job.staged_samples:
            _serve_staged_device(conn, model, job, device)
        else:
            _serve(conn, model, problem, settings, job, device, declared, flusher)
    except Failed as f:
        conn.reply(m.Failed(f.status, f.error, f.detail))


def _serve_staged(conn: Conn, job, device: str) -> None:
    """The CPU path and the reference's executor: the problem for its settings and init inputs, the model built,
    then every call the parent asks for on inputs the reference stages in this worker's arena (harness.worker.arena):
    on the CPU trials and timed samples alike, on the GPU (the executor) timed samples. No input is drawn, no output
    saved and nothing checked here: the parent and the reference do all of it."""
    from harness.worker import arena
    from harness.worker.common import pin_for_timing
    try:
        problem = load_module("kb_problem", job.problem_path)
        settings = problem_settings(problem, job.precision)
        setup_torch(settings)
        model, log, param_match = _load_candidate(job, device, settings, init_inputs(problem))
        if job.executor and job.warm and device != "cpu":
            _warm(model, problem, job, settings, device)
            trace("candidate warm")
        conn.reply(m.Loaded(param_match, log.calls, "train" if model.training else "eval"))
        trace("candidate loaded")
        if device != "cpu":
            _serve_staged_device(conn, model, job, device)
            return
        pin_for_timing()                    # on the reference's timing cores, as its sampler's settle() holds it
        arena.serve(conn, _timed_call(model, job), lambda exc, label: _classify(exc, _NoLog, f"forward ({label})"))
    except Failed as f:
        conn.reply(m.Failed(f.status, f.error, f.detail))


def _warm(model, problem, job, settings, device: str) -> None:
    """The executor's first call, before it says Loaded (CandidateJob.warm): on inputs drawn from the public base seed,
    its output dropped. Its first call's start (cuBLAS and cuDNN handles, lazily loaded modules) so runs beside the
    candidate's trials, where the candidate pays its own, and not in the pair's first reference block."""
    import torch
    inputs = device_inputs(problem, job.seed, settings, device)
    _timed_call(model, job)(inputs)
    torch.cuda.synchronize()
    del inputs


def _serve_staged_device(conn: Conn, model, job, device: str) -> None:
    """The GPU's timed samples (CandidateJob.staged_samples): every call on inputs the reference staged in device
    memory it shares with this worker (harness.worker.arena), timed with CUDA events; no input drawn, no flush, no
    check here. Settled first as the reference's sampler settles (harness.worker.sampler.Sampler.settle)."""
    import torch
    from harness.worker import arena, cudadriver
    from harness.worker.common import pin_for_timing
    pin_for_timing()
    torch.cuda.synchronize()
    trace("candidate synchronized")                # (a trace may show 0.4-2.6 s to the next line: the parent stops
                                                   # this process for the executor's `before` block as soon as the
                                                   # trials pass, and this goes on when it is woken for its first
                                                   # call; docs/measurements.md, twenty-third session)
    torch.cuda.empty_cache()
    trace("candidate cache emptied")
    if cudadriver.set_persisting_l2_limit is not None:
        cudadriver.set_persisting_l2_limit(0)
    spec = job.timing
    calls = arena.DeviceCalls(device, spec.warmup, spec.mode, spec.graph_replays, spec.graph_calls)
    trace("candidate settled")
    arena.serve(conn, _timed_call(model, job), lambda exc, label: _classify(exc, _NoLog, f"forward ({label})"),
                calls)


def _timed_call(model, job):
    """The timed call: the model on a sample's inputs, each output copied into the layout it is held to (the
    reference's, where that is contiguous) where it is in another (harness.shared.layout: the copy is timed)."""
    from harness.shared.layout import conform
    orders = job.output_orders
    if not orders:
        return lambda x: model(*x)
    return lambda x: conform(model(*x), orders)


def _problem_side(job, device):
    """The problem, its settings, init inputs, every trial's inputs (harness.worker.sizes: `trials` per declared
    size) and its declared sizes, all before candidate code exists."""
    from harness.worker import sizes
    problem = load_module("kb_problem", job.problem_path)
    integrity.watch_module(problem)
    settings = problem_settings(problem, job.precision)
    setup_torch(settings)
    seed = job.seed
    init = init_inputs(problem)
    declared = sizes.declared(problem)
    plan = _plan(declared, job.trials)
    lazy = _Lazy(problem, seed, settings, device, plan)
    first = lazy.draw(0)
    if device != "cpu" and tensor_bytes(first) * len(plan) > KEEP_BYTES:
        del first
        return problem, settings, init, lazy, declared
    return problem, settings, init, [first] + [lazy.draw(j) for j in range(1, len(plan))], declared


def _plan(declared: list, trials: int) -> list:
    from harness.worker import sizes
    return sizes.plan(declared, trials)


class _Lazy:
    """The trials' inputs drawn one at a time when asked for (under integrity.clean_torch), for inputs too large to
    keep every trial's on the device."""

    def __init__(self, problem, seed: int, settings, device: str, plan: list):
        self.problem, self.seed, self.settings, self.device, self.plan = problem, seed, settings, device, plan

    def __len__(self) -> int:
        return len(self.plan)

    def draw(self, j: int) -> list:
        trial = self.plan[j]
        return device_inputs(self.problem, self.seed + trial.k, self.settings, self.device,
                             None if trial.size.main else trial.size)

    def __getitem__(self, j: int) -> list:
        if not 0 <= j < len(self.plan):
            raise IndexError(j)
        with integrity.clean_torch():
            return self.draw(j)


def _classify(exc: BaseException, log, stage: str) -> Failed:
    if isinstance(exc, SkipCandidate):
        return Failed("skipped", log.skip_reason or str(exc))
    if log.compile_errors:
        line, detail = compiler_summary(log.compile_errors[-1])
        return Failed("compile_error", line, detail)
    if is_oom(exc):
        return Failed("oom", f"{stage}: {describe(exc)}", tail_traceback(exc))
    status = "load_error" if stage in ("import", "ModelNew(*get_init_inputs())") else "runtime_error"
    return Failed(status, f"{stage}: {describe(exc)}", tail_traceback(exc))


def _load_candidate(job, device, settings, init):
    import torch
    log = install_extension_hooks("cpu" if device == "cpu" else "cuda")
    try:
        module = load_module("kb_candidate", job.candidate_path)
    except BaseException as exc:                       # noqa: BLE001 - candidate code may raise anything
        raise _classify(exc, log, "import") from None
    if log.compile_errors:                             # a failed build the candidate caught and hid
        line, detail = compiler_summary(log.compile_errors[-1])
        raise Failed("compile_error", line, detail)
    name = "Model" if job.executor else "ModelNew"     # the executor builds the problem's own
    model_cls = getattr(module, name, None)
    if model_cls is None:
        raise Failed("load_error", f"the candidate defines no {name}")
    torch.manual_seed(job.seed)
    try:
        model = model_cls(*init)
    except BaseException as exc:                       # noqa: BLE001
        raise _classify(exc, log, "ModelNew(*get_init_inputs())") from None
    if not isinstance(model, torch.nn.Module):
        raise Failed("load_error", f"ModelNew(...) returned a {type(model).__name__}, not an nn.Module")
    param_match = _copy_reference_state(model, job.state_path)
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


def _save(outs: list, scratch: str, label: str) -> str:
    from harness.shared.tensorfile import write_tensors
    return write_tensors(outs, os.path.join(scratch, f"{label}.kbt"))


def _forward(model, args, stage: str, log=None):
    try:
        return model(*args)
    except BaseException as exc:                       # noqa: BLE001
        raise _classify(exc, log or _NoLog, stage) from None


class _NoLog:
    compile_errors: list = []
    skip_reason = None


def _sync(device: str) -> None:
    import torch
    if device != "cpu":
        torch.cuda.synchronize()


def _changed_after_return(outs: list, device: str, meanwhile=None, settle_s: float = 0.05) -> bool:
    """True when an output's values change after the call returned and the device went idle: work finished
    later by a background thread or an unsynchronized stream (against a copy of the outputs, or a checksum where
    they are large: sampler.snapshot). `meanwhile()` runs inside the settle time (the in-place check's wait)."""
    before = snapshot(outs)
    t0 = time.monotonic()
    if meanwhile is not None:
        meanwhile()
    time.sleep(max(0.0, settle_s - (time.monotonic() - t0)))
    _sync(device)
    return differs(outs, before)


def _exported(outs: list) -> list[dict[str, Any]] | None:
    """Where a trial's outputs lie, for the reference to map (rawread.export), or None where they cannot be."""
    try:
        return rawread.export(outs)
    except rawread.RawReadError:
        return None


def _in_place(conn: Conn, label: str, j: int, outs: list, exported: list, device: str, defenses: bool) -> bool:
    """Hand trial `j`'s outputs over where they lie (messages.TrialOut) and wait while the reference compares them,
    this process stopped; with `defenses`, whether they changed after the call returned (that wait counts towards
    the settle time). Anything but `next` from the parent ends the worker."""
    def handed_over() -> None:
        conn.reply(m.TrialOut(label, j, exported))
        if conn.recv().get("op") != m.NextRequest.OP:
            raise SystemExit(0)
        trace(f"candidate {label} checked")

    if not defenses:
        handed_over()
        return False
    return _changed_after_return(outs, device, handed_over)


def _trial_checks(job, first: bool) -> bool:
    """Whether this process checks a trial of its own (inputs changed by the call, outputs changed after it
    returned). On the staged GPU path only the first trial: there the reference checks every timed sample's inputs
    before it writes the next ones, and reads again at the candidate's next stage the output positions it read, with
    this process stopped (README, Hardening). A check here could be switched off by the candidate, so it only names
    an honest bug early (`unsynchronized_work` at trial 0 rather than a trial that fails to match), and on every
    trial it cost about 0.15-0.18 s a pair with five trials and 0.6-0.7 s with fifteen (docs/measurements.md,
    twenty-third session). An output that cannot be handed over where it lies (not in exportable device memory) is
    checked on every trial: nothing trusted reads it again."""
    return job.defenses and (first or not job.staged_samples)


def _correctness(model, trial_inputs, plan, job, device, conn) -> dict[str, Any]:
    """Every trial of the plan (harness.worker.sizes), labelled with the trial and, away from the main size, its
    size (`trial0@small`). On the GPU each trial's outputs are handed over where they lie and compared by the
    reference before the next trial runs (_in_place); where they cannot be (the CPU path, or an output that is not
    in exportable device memory), they are written to a file for the reference to read."""
    import torch
    files, mutated, unsynchronized, lazy = [], False, False, False
    for n, trial in enumerate(plan):
        j, label = trial.index, trial.label
        defenses = _trial_checks(job, n == 0)
        name = f"trial {trial.k}" + ("" if trial.size.main else f" at size {trial.size.name!r}")
        work = trial_inputs[j]                         # the call gets these; a copy (or checksum) is the pristine
        if isinstance(trial_inputs, list):
            trial_inputs[j] = None                     # ... and nothing else holds them once the trial is done
        pristine = snapshot(work) if defenses else None
        torch.manual_seed(job.seed + trial.k)
        out = _forward(model, work, f"forward ({name})")
        try:
            _sync(device)
            trace(f"candidate {label} called")
            lazy = lazy or not_plain(out)
            outs = as_tensor_list(out)
            exported = _exported(outs) if device != "cpu" else None
            path = "" if exported is not None else _save(outs, job.scratch, label)   # the values as the call
            trace(f"candidate {label} out")                                         # left them
            if job.defenses and exported is None:
                unsynchronized = unsynchronized or _changed_after_return(outs, device)
        except ValueError as exc:                      # not tensors, or a dtype no file can carry
            raise Failed("incorrect", f"{name}: {exc}") from None
        except BaseException as exc:                   # noqa: BLE001 - asynchronous CUDA errors surface here
            raise _classify(exc, _NoLog, f"forward ({name})") from None
        if exported is not None:
            unsynchronized = _in_place(conn, label, j, outs, exported, device, defenses) or unsynchronized
        mutated = mutated or (defenses and differs(work, pristine))
        del work, pristine, out, outs
        files.append(m.TrialFile(label, path, j))
    return {"files": files, "mutates_inputs": mutated, "unsynchronized_work": unsynchronized,
            "output_not_plain_tensor": lazy}


def _serve(conn, model, problem, settings, job, device, sizes: list, flusher) -> None:
    """Timed samples on the parent's request (harness.worker.sampler, the path the reference goes through too),
    and profiled calls where the parent asks for them, until told to exit. A sample's seed arrives with the
    request for it; its output is checked by the parent or the reference, never here."""
    from harness.worker.sampler import Sampler

    sampler = Sampler({"candidate": _timed_call(model, job)}, problem, settings, device, job.timing, job.defenses,
                      sizes=sizes, flusher=flusher)
    sampler.settle()
    trace("candidate settled")
    while True:
        message = conn.recv()
        try:
            reply = sampler.handle(message)
        except BaseException as exc:                   # noqa: BLE001 - candidate code raised under timing
            raise _classify(exc, _NoLog, "forward (timing)") from None
        if reply is None:
            return
        conn.reply(reply)
