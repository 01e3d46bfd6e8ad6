"""Stage 3, execute: schedule problems over the devices (one slot per GPU, or the CPU), one reference worker per
problem and a fresh candidate worker per pair (harness.run.evaluate), and turn whatever happens into exactly one
record per pair."""
from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.run import compilecache, scratch, verdicts
from harness.core import flags
from harness.run import merge as processes
from harness.run.between import Terms
from harness.run.build import BuildResult, Toolchain
from harness.core.config import Config
from harness.core.discover import Pair
from harness.run.evaluate import PairContext, ReferenceSide, run_pair, slug
from harness.shared import messages as m
from harness.shared.messages import CeilingsJob
from harness.run.clients import CeilingsClient
from harness.run.workerproc import (CPU_PAIR_MALLOC_TUNABLES, SpareWorkers, Worker, WorkerExit, same_role_again,
                                    worker_env)
from harness.results.parts import Gpu, Retried
from harness.results.records import RecordDraft, Status, finish, new_record
from harness.core.seeds import RunSeed


@dataclass
class Slot:
    name: str                       # "cuda:3" or "cpu"
    gpu: int | None
    gpu_name: str | None = None
    cpus: tuple[int, ...] = ()      # the cores every worker of this slot runs on (both sides on the same ones)
    visible_as: str | None = None   # the workers' CUDA_VISIBLE_DEVICES (meta.visible: nvidia-smi's index); None: gpu

    def timing_cpus(self, cpu_threads: int = 1) -> tuple[int, ...]:
        """The cores a GPU slot's workers' threads are held to while timed: the first `cpu_threads` of the slot's,
        the same ones for both sides (harness.worker.common.pin_for_timing). Empty on the CPU path: there the
        timed call runs on the core itself, and with both sides held to one core a short call ran far slower
        interleaved than alone (likely each finding the other's data in the core's caches after every switch),
        which the interference check took for a cheat (docs/measurements.md)."""
        return self.cpus[:max(1, cpu_threads)] if self.gpu is not None else ()

    def spare_cpus(self, cpu_threads: int = 1) -> tuple[int, ...]:
        """The cores a GPU slot's spare workers import torch on while a pair is timed (SpareWorkers.quiet): the
        slot's cores other than its timing cores, where at least two are left; else none, and spares are stopped
        while a side is timed."""
        timing = self.timing_cpus(cpu_threads)
        rest = tuple(c for c in self.cpus if c not in timing)
        return rest if self.gpu is not None and len(rest) >= 2 else ()

    @property
    def device(self) -> str:
        return "cpu" if self.gpu is None else "cuda:0"   # each worker sees only its own GPU

    @property
    def cuda_visible(self) -> str:
        """What this slot's workers' CUDA_VISIBLE_DEVICES holds: its one GPU as the machine numbers it."""
        if self.gpu is None:
            return ""
        return self.visible_as if self.visible_as is not None else str(self.gpu)

    def env(self, cpu_threads: int = 1) -> dict[str, str]:
        threads = str(cpu_threads)
        return {"CUDA_VISIBLE_DEVICES": self.cuda_visible, "KB_DEVICE": self.device,
                "KB_CPU_THREADS": threads, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                "OPENBLAS_NUM_THREADS": threads,
                "KB_CPUS": ",".join(map(str, self.cpus)),
                "KB_TIMING_CPUS": ",".join(map(str, self.timing_cpus(cpu_threads))),
                "KB_SPARE_CPUS": ",".join(map(str, self.spare_cpus(cpu_threads)))}


@dataclass
class Context:
    cfg: Config
    run_id: str
    toolchain: Toolchain
    builds: dict[str, BuildResult]
    scratch: Path
    log_dir: Path
    emit: Callable[[RecordDraft | dict[str, Any]], None]     # a pair's record, to the store (a dask task's: JSON)
    seed: RunSeed
    stop: threading.Event = field(default_factory=threading.Event)
    ceilings: dict[str, dict[str, float]] = field(default_factory=dict)   # slot name -> measured ceilings
    started: Callable[[str, Pair, int], None] = lambda slot, pair, process: None   # a pair's measurement begins
    between: Terms | None = None        # the machine's between-process terms, where a pair's CI takes one

    def for_slot(self, slot: "Slot") -> PairContext:
        return PairContext(self.cfg, self.seed, self.builds, self.toolchain, self.ceilings.get(slot.name, {}),
                           self.log_dir, self.between)


@dataclass
class Outlook:
    """What a slot will still ask its spare workers for (SpareWorkers' `upcoming`), so that a spare is started only
    for a job that is sure to come: a candidate for each pair its reference process has yet to serve (the first
    one's starts beside the reference), and both roles again while the problem has process pairs to go or
    `more_groups()` says another problem may come to this slot. A candidate taken again for a retried pair starts
    without a spare, as does a fresh reference after a pair left the device unusable."""
    more_groups: Callable[[], bool]
    pairs_left: int = 0             # pairs of the current reference process whose candidate is not yet taken
    processes_after: int = 0        # process pairs of the current problem after this one (timing.processes)
    executor: bool = False          # each pair also takes a reference executor (harness.run.reference_executor)

    def upcoming(self, role: str) -> tuple[str, ...]:
        pair = ("candidate", "executor") if self.executor else ("candidate",)
        if self.processes_after > 0 or self.more_groups():
            return ("reference",) + pair
        if role == "executor":          # taken before its pair's candidate: that one is still to come
            return ("candidate",)
        return pair if self.pairs_left > 0 else ()


def serve_slot(slot: Slot, ctx: Context, next_group: Callable[[], list[Pair] | None],
               spares: SpareWorkers | None = None, more_groups: Callable[[], bool] = lambda: True) -> None:
    """One slot's share of a run (any executor): the GPU's ceilings once (defenses on; kept in ctx.ceilings), then
    every problem group next_group() hands out until it says None, with the slot's spare workers (`spares`, kept by
    the caller, or the slot's own, closed at the end). `more_groups`: whether next_group() may hand out another
    group after the current one (the slot's own spares are started only for jobs that will come: Outlook)."""
    outlook = Outlook(more_groups, executor=takes_executor(ctx.cfg, slot))
    own = spares is None
    spares = slot_spares(ctx, slot, outlook.upcoming) if own else spares
    try:
        if slot.gpu is not None and ctx.cfg.defenses and slot.name not in ctx.ceilings:
            if own and spares.quiet and more_groups():
                spares.prime(outlook.upcoming("reference"))     # the first problem's workers, beside the ceilings
            ctx.ceilings[slot.name] = measure_ceilings(ctx, slot)
        while (group := next_group()) is not None:
            run_problem(group, ctx, slot, spares, outlook)
    finally:
        if own:
            spares.close()


def takes_executor(cfg: Config, slot: Slot) -> bool:
    """Whether each pair of this slot also takes a reference executor (harness.run.reference_executor)."""
    return slot.gpu is None or cfg.timing.staged_gpu


def first_roles(cfg: Config, slot: Slot) -> tuple[str, ...]:
    """The workers a slot's first problem takes (its reference, and its first pair's): started beside the GPU's
    ceilings by a slot whose spares have cores of their own."""
    return Outlook(lambda: True, executor=takes_executor(cfg, slot)).upcoming("reference")


def slot_spares(ctx: Context, slot: Slot,
                upcoming: Callable[[str], tuple[str, ...]] = same_role_again) -> SpareWorkers:
    return SpareWorkers(slot_worker_env(ctx.cfg, ctx.toolchain, slot), ctx.log_dir, slot.name.replace(":", ""),
                        spares_enabled(ctx.cfg, slot), upcoming)


def slot_worker_env(cfg: Config, toolchain: Toolchain, slot: Slot) -> dict[str, str]:
    """The environment a slot's pair workers start with (the reference's, the candidate's, the executor's)."""
    return {**pair_worker_env(cfg, slot), **compile_warm_env(cfg, toolchain)}


def compile_warm_env(cfg: Config, toolchain: Toolchain) -> dict[str, str]:
    """A run with torch.compile baselines: its reference workers warm the compile stack before their job arrives
    (harness.worker.compilewarm.begin: the imports, torch_key, the CPU's vector ISA probe, none of it the problem's),
    into the compile cache's entry, so that a spare started ahead pays it while it waits (docs/measurements.md,
    "torch.compile baselines' second run on the CPU")."""
    if not cfg.timing.compile_modes:
        return {}
    return {"KB_COMPILE_WARM": "1", "KB_COMPILE_CACHE": str(compilecache.entry(cfg.cache_dir, toolchain))}


def pair_worker_env(cfg: Config, slot: Slot) -> dict[str, str]:
    """The environment of a slot's reference and candidate workers. On a GPU slot with the defenses on (the profiled
    calls), they start CUDA tracing once before the rounds (KB_WARM_PROFILER, harness.worker.common.warm_profiler):
    the reference as its job arrives, the candidate once confined, so the first profiled call does not stall a
    round. A spare only imports torch before its job (no CUDA), on the slot's spare cores (Slot.spare_cpus) or,
    where there are none, stopped while a side is timed. On a CPU slot their heap keeps what they free
    (workerproc.CPU_PAIR_MALLOC_TUNABLES)."""
    env = worker_env(slot.env(cfg.cpu_threads))
    if slot.gpu is not None and cfg.defenses:
        env["KB_WARM_PROFILER"] = "1"
    if slot.gpu is None:
        env["GLIBC_TUNABLES"] = CPU_PAIR_MALLOC_TUNABLES
    return env


def spares_enabled(cfg: Config, slot: Slot) -> bool:
    """'auto': on GPU slots, where a starting worker only uses an idle core; off on the CPU, where it would
    compete with the host-clock timing."""
    return cfg.spare_workers == "on" or (cfg.spare_workers == "auto" and slot.gpu is not None)


def measure_ceilings(ctx: Context, slot: Slot) -> dict[str, float]:
    """Copy bandwidth and matmul throughput of this GPU, once per run (a worker of its own)."""
    worker = Worker("ceilings", slot_worker_env(ctx.cfg, ctx.toolchain, slot),     # forked as the pair workers are
                    ctx.log_dir / f"ceilings_{slot.name.replace(':', '')}.log")
    try:
        reply = CeilingsClient(worker).measure(CeilingsJob(slot.device), time.monotonic() + 300)
    except WorkerExit:
        return {}
    finally:
        worker.close()
    return m.payload(reply)


def pair_record(pair: Pair, run_id: str, device: str, builds: dict[str, BuildResult],
                slot: Slot | None = None) -> RecordDraft:
    """A new record for a pair, with its build and (on a GPU slot) the GPU: here and on a dask worker."""
    record = new_record(pair.problem_id, pair.candidate.id, device.split(":")[0], run_id)
    if slot is not None and slot.gpu is not None:
        record.gpu = Gpu(slot.gpu, slot.gpu_name)
    build = builds.get(pair.candidate.id)
    record.build = build.record() if build else None
    return record


def _base_record(pair: Pair, ctx: Context, slot: Slot) -> RecordDraft:
    return pair_record(pair, ctx.run_id, slot.device, ctx.builds, slot)


BUILD_STATUSES = {"compile_error": Status.COMPILE_ERROR, "skipped": Status.SKIPPED, "timeout": Status.TIMEOUT,
                  "oom": Status.OOM}      # a build that did not end `built`: its pair's status (else crashed)


def _decided_without_running(pair: Pair, ctx: Context, slot: Slot) -> RecordDraft | None:
    return decided_without_running(pair, ctx.builds, _base_record(pair, ctx, slot))


def decided_without_running(pair: Pair, builds: dict[str, BuildResult], record: RecordDraft) -> RecordDraft | None:
    """`record` finished for a pair that cannot run (missing or broken problem, unloadable candidate, failed build),
    or None when it can: here and in `run_eval.py profile`."""
    if pair.problem is None:
        return finish(record, Status.LOAD_ERROR, f"no problem file for this candidate ({pair.problem_id}.py)")
    if pair.problem.error:
        return finish(record, Status.LOAD_ERROR, f"problem: {pair.problem.error}")
    if pair.candidate.error:
        return finish(record, Status.LOAD_ERROR, pair.candidate.error)
    build = builds.get(pair.candidate.id)
    if build is None:
        return finish(record, Status.CRASHED, "no build result (harness fault)")
    if build.status == "built":
        return None
    return finish(record, BUILD_STATUSES.get(build.status, Status.CRASHED), build.error)


RETRIED_FLAGS = flags.RETRIED    # verdicts a burst of load can also produce (flags.FLAGS: `retry`)


def _load_sensitive(record: RecordDraft) -> str | None:
    """The first invalidating flag, when an `invalid` pair's invalidating flags are all ones a busy machine can also
    raise (the table's `retry` flags, harness.core.flags): the reference ran slower while the candidate was alive
    (`interference`), or the parent's clock saw more
    time around the candidate's samples than around the reference's (`timing_inconsistent`); a burst of load often
    raises both. A cheat does that every time; a burst of load on a shared machine rarely lands twice, so such a
    pair is measured once more (fresh candidate process, fresh samples) and the second try's record stands."""
    if record.status is not Status.INVALID:
        return None
    return flags.retryable(record.flags)


WRITE_FAULTS = (Status.CRASHED, Status.LOAD_ERROR, Status.RUNTIME_ERROR, Status.INCORRECT)   # what one became


def write_fault(record: RecordDraft, folder: Path, footprint: int | None = None) -> RecordDraft:
    """`record`, `skipped` and flagged `harness_write` when its pair failed because the harness could not write in
    `folder` (the problem's scratch; issue 49): a write of the parent's there failed (scratch.own_failure), or
    the failure's words name a failed write and the parent cannot now write there what the pair needs
    (scratch.room: `footprint`, one trial's files, or more than a file a worker left cut short). Without it, a
    write of the reference worker's that failed (its arena, its torch.save) read `crashed`, or the problem's
    `load_error`. A parent's write that failed for want of space while the candidate's own files in the pair's
    folder held at least what it needed is the candidate's doing: `runtime_error` (a `skipped` pair passes `ci`)."""
    own = scratch.own_failure(folder)
    if record.status not in WRITE_FAULTS:
        return record
    if own is not None and own.candidates():
        finish(record, Status.RUNTIME_ERROR, f"the candidate filled the file system the harness writes its outputs "
                                             f"to: {own.error}, with {own.others:,} bytes in the candidate's own "
                                             f"files there (the write needed {own.size:,})")
        return record
    worker = record.worker.log_tail if record.worker is not None else None
    detail = record.error_detail if isinstance(record.error_detail, str) else None
    said = scratch.names_a_failed_write(record.error, detail, worker)
    cause = own.error if own is not None else (scratch.room(folder, scratch.need(folder, footprint)) if said else None)
    if cause is None:
        return record
    finish(record, Status.SKIPPED, f"harness_write: {cause}" + ("" if own else f"; the pair ended: {record.error}"))
    verdicts.flag(record, flags.HARNESS_WRITE, record.error)
    return record


def run_problem(group: list[Pair], ctx: Context, slot: Slot, spares: SpareWorkers, outlook: Outlook) -> None:
    runnable = []
    for pair in group:
        record = _decided_without_running(pair, ctx, slot)
        if record is None:
            runnable.append(pair)
        else:
            ctx.emit(record)
    if not runnable:
        return
    problem_dir = ctx.scratch / slot.name.replace(":", "") / slug(runnable[0].problem_id)
    problem_dir.mkdir(parents=True, exist_ok=True)
    count = ctx.cfg.timing.processes
    done: dict[tuple[str, str], list[RecordDraft]] = {pair.key: [] for pair in runnable}
    known: dict[str, Any] = {}          # what the first reference process worked out that the next need not

    def deliver(pair: Pair, record: RecordDraft) -> None:
        if count == 1:
            ctx.emit(record)
        else:
            done[pair.key].append(record)

    try:
        for process in range(count):
            pending = [p for p in runnable if all(r.ok for r in done[p.key])]
            if not pending or ctx.stop.is_set():
                break
            outlook.processes_after = count - process - 1
            _one_process(pending, ctx, slot, spares, problem_dir, process, deliver, known, outlook)
    finally:
        for pair in runnable:                   # what was measured stands, even when the run stops early
            if done[pair.key]:
                ctx.emit(processes.merge(done[pair.key], count))
        shutil.rmtree(problem_dir, ignore_errors=True)


def _retried(reason: str, first: RecordDraft) -> Retried:
    """The second try's `retried`: why, the first try's reading of that flag, and where the first try's time went
    (its worker.phases, which the second record's replace)."""
    return Retried(reason, first.flag_detail(reason), first.worker.phases if first.worker is not None else None)


def _one_process(pairs: list[Pair], ctx: Context, slot: Slot, spares: SpareWorkers, problem_dir: Path,
                 process: int, deliver: Callable[[Pair, RecordDraft], None], known: dict[str, Any],
                 outlook: Outlook) -> None:
    """Every pair of one problem against one reference process (a fresh one after a pair left the device unusable)."""
    pc = ctx.for_slot(slot)
    reference = None
    try:
        for i, pair in enumerate(pairs):
            if ctx.stop.is_set():
                return
            if reference is None:
                outlook.pairs_left = len(pairs) - i             # this pair's candidate and those after it
                reference = ReferenceSide(pairs[0], pc, slot.device, problem_dir, spares, known, early_flusher=True)
            outlook.pairs_left = len(pairs) - i - 1
            record = _base_record(pair, ctx, slot)
            if reference.error is not None:
                deliver(pair, write_fault(reference.failed(record), problem_dir))
                continue
            ctx.started(slot.name, pair, process)
            run_pair(pair, record, reference, pc, slot.device, problem_dir, spares, process=process)
            reason = _load_sensitive(record)
            if reason and reference.worker.alive() and not ctx.stop.is_set():
                first = record
                record = _base_record(pair, ctx, slot)
                run_pair(pair, record, reference, pc, slot.device, problem_dir, spares, attempt=1, process=process)
                record.retried = _retried(reason, first)
            write_fault(record, problem_dir, reference.ready.footprint_bytes if reference.ready else None)
            if reference.ready is not None and reference.ready.lint.degenerate:
                verdicts.flag(record, flags.DEGENERATE_PROBLEM, "; ".join(reference.ready.lint.reasons))
            deliver(pair, record)
            if (record.worker is not None and record.worker.device_usable_after is False) or not reference.worker.alive():
                reference.close()                       # the next pair gets a fresh reference process too
                reference = None
    finally:
        if reference is not None:
            reference.close()
