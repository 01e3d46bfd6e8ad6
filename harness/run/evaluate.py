"""One problem's reference side and one pair's protocol, from the parent's side.

Per problem, on one slot: the reference worker (it imports the problem only) computes the expected outputs,
compiles the torch.compile baselines, probes the eager call's time and then serves samples and verifications.
Per pair:
  1. reference blocks alone (the `before` bracket of the interference check);
  2. a fresh candidate worker imports the candidate and runs the correctness trials; the reference verifies;
  3. paired, interleaved rounds (harness.run.interleave) until the speedup's CI reaches its target or the time cap,
     with one call of each side profiled in a few round halves drawn at random;
     every timed output checked by the trusted side after the candidate handed it over (harness.run.trusted), a
     few of them whole; the candidate worker is killed;
  5. reference blocks alone again (the `after` bracket), then the verdict.
"""
from __future__ import annotations

import dataclasses
import hashlib
import shutil
import statistics
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.run import (compilecache, defenses, memory, modes, paired, reference_executor, sizes, stagedtrials,
                        verdicts)
from harness.core import flags
from harness.core.flags import Flag
from harness.run.build import build_env
from harness.run.cachedirs import hidden_from_candidates
from harness.core.config import Config
from harness.core.discover import Pair
from harness.run.clients import CandidateClient, CandidateFailed, FlusherClient, ReferenceClient
from harness.run.interleave import CANDIDATE, EAGER, Collected, GraphFallback, Interleaver, fastest, ratios
from harness.shared import messages as m
from harness.shared.messages import CandidateJob, ReferenceJob
from harness.run.workerproc import SpareWorkers, Worker, WorkerExit
from harness.results.parts import (Baseline, Correctness, Precision, Sandbox, Seed, SideStats, Timing, WorkerRun)
from harness.results.records import RecordDraft, Status, exit_status, finish
from harness.core.seeds import RunSeed
from harness.shared import layout, memplan
from harness.shared.stats import summarize
from harness.run.between import Term, Terms, widen
from harness.run.trusted import Reader


@dataclass
class PairContext:
    """What one pair needs from the run."""
    cfg: Config
    seed: RunSeed
    builds: dict
    toolchain: Any
    ceilings: dict[str, float]
    log_dir: Path
    between: Terms | None = None        # the machine's between-process terms (processes 1, between_process auto)


SLUG_BYTES = 160           # a file name made of ids stays well under NAME_MAX (255 bytes) with its suffix


def slug(text: str) -> str:
    """An id as one file name: '/' as '__'; a long one cut and told apart by a hash of the whole."""
    name = text.replace("/", "__").replace("\0", "")
    data = name.encode("utf-8", errors="surrogatepass")
    if len(data) <= SLUG_BYTES:
        return name
    digest = hashlib.sha256(data).hexdigest()[:12]
    return data[:SLUG_BYTES - 13].decode("utf-8", errors="ignore") + "-" + digest


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


DERIVE_BESIDE_BYTES = 1 << 30      # ReferenceSide.beside_trials: 1 GiB of inputs, outputs and weights, 2 GiB in fp64


class ReferenceSide:
    """The reference worker for one problem on one slot. `early_flusher`: the pairs' flusher (flusher()) is started
    with the reference's job, its start beside the reference's setup (the caller closes this side: close())."""

    def __init__(self, pair: Pair, pc: PairContext, device: str, problem_dir: Path, spares: SpareWorkers,
                 known: dict[str, Any] | None = None, early_flusher: bool = False):
        self.pc, self.device = pc, device
        self.known = known if known is not None else {}     # the problem's figures that no process pair changes
        self.state_path = problem_dir / "reference_state.pt"
        self.error: str | None = None
        self.error_status = Status.LOAD_ERROR
        self.ready: m.Ready | None = None   # its reply to the job
        self.derived = m.Derived(None)      # its reply to DeriveRequest, with the problem's work (`known`)
        self.mode: modes.Mode = modes.initial(device)       # the problem's timing mode (harness.run.modes)
        self.variants = [EAGER]
        self.derive = "not asked"           # -> "asked" (the reply not read yet) -> "read" (into `derived`)
        self.plan: memplan.PairPlan | None = None   # the pairs' device memory (harness.run.memory; None on the CPU)
        self.error_flag: Flag | None = None  # put on the records of the pairs it could not serve (harness_oom)
        cfg = pc.cfg
        started = time.monotonic()
        self.setup_seconds: float | None = None     # its start until `ready`: reported by the first pair it serves
        self.spares, self.problem_id = spares, pair.problem_id
        self._flusher: FlusherClient | None = None  # the cache flush, or the GPU's switch of context (flusher())
        self._flusher_ready = False                 # its FlusherReady read
        self.client = ReferenceClient(spares.take("reference", pc.log_dir / f"{slug(pair.problem_id)}__reference.log"))
        if early_flusher and self._wants_flusher():
            self._begin_flusher()       # its start (on the GPU a CUDA context: ~0.2 s) beside the reference's setup
        probe = pc.seed.stream("probe", pair.problem_id).take(5)
        job = ReferenceJob(
            str(pair.problem.path.resolve()), device, pc.seed.base, cfg.trials, self.mode.spec(cfg, [EAGER]),
            list(cfg.timing.compile_modes), probe, str(problem_dir), cfg.defenses, cfg.precision,
            cfg.gpu_memory_gb, 4 if device != "cpu" and cfg.timing.staged_gpu else 2,     # CUDA contexts: the
            # pair's two, and a staged GPU's flusher and reference executor (a spare holds none before its job)
            env=compilecache.reference_env(cfg.cache_dir, pc.toolchain))
        try:
            reply = self.client.start(job, time.monotonic() + cfg.reference_timeout)
        except WorkerExit as exc:
            self._fail(exc, cfg.reference_timeout)
            return
        self.setup_seconds = time.monotonic() - started
        if isinstance(reply, m.Error):
            self.error_status = Status.LOAD_ERROR
            self.error = f"problem {pair.problem_id}: {reply.stage}: {reply.error}"
            if reply.oom:                       # before any candidate ran: the harness's limit, no one's `oom`
                self._out_of_budget(reply.harness_oom or f"harness_oom: {self.error}")
            return
        self.ready = reply
        self.variants += [f"compile:{mode}" for mode in cfg.timing.compile_modes
                          if mode in reply.compile and reply.compile[mode].error is None]
        self.mode = modes.choose(cfg, device, reply.cold_probe_ms)
        try:
            self.plan = memory.plan(self.client, reply, device, cfg, self.mode.NAME == "graph")
        except WorkerExit as exc:
            self._fail(exc, cfg.reference_timeout)
        if self.plan is not None and self.plan.error:
            self._out_of_budget(self.plan.error)
        elif self.plan is not None:
            self.mode = self.mode.capped(self.plan.graph_calls, self.plan.graph_capped)

    @property
    def worker(self) -> Worker:
        return self.client.worker

    def _out_of_budget(self, line: str) -> None:
        self.error, self.error_status, self.error_flag = line, Status.SKIPPED, flags.HARNESS_OOM

    def failed(self, record: RecordDraft) -> RecordDraft:
        """The record of a pair this reference could not serve (`error`)."""
        if self.error_flag:
            return memory.skipped(record, self.error)
        return finish(record, self.error_status, self.error)

    def _fail(self, exc: WorkerExit, timeout: float) -> None:
        self.error_status = exit_status(exc.kind)
        if self.error_status is Status.TIMEOUT:
            self.error = f"reference side did not finish within {timeout:g} s"
        elif self.error_status is Status.OOM or memory.out_of_budget(self.worker):   # no candidate ran: no one's
            self._out_of_budget(memory.out_of_budget(self.worker) or f"harness_oom: reference side: {exc.detail}")
        else:
            self.error = f"reference side: {exc.detail}: {last_line(self.worker.log_tail())}"

    def beside_trials(self) -> bool:
        """Whether the reference may work out what DeriveRequest asks for while the candidate runs its trials on the
        same device: not when its float64 copy is large (DERIVE_BESIDE_BYTES), where the two could run the device
        out of memory and the candidate's trials would read `oom` for the reference's allocations."""
        return self.ready is not None and self.ready.footprint_bytes <= DERIVE_BESIDE_BYTES

    def ask_derived(self) -> None:
        """Ask for what the checks need from the reference alone (messages.DeriveRequest), once per reference
        process (no-op after that)."""
        if self.derive == "not asked":
            self.worker.resume()
            self.client.ask_derived(flops="work" not in self.known)
            self.derive = "asked"

    def read_derived(self) -> None:
        """The reply to ask_derived, into `derived`; every other request waits for it (one pipe, in order)."""
        if self.derive != "asked":
            return
        self.derive = "read"
        self.worker.resume()
        reply = self.client.derived(time.monotonic() + self.pc.cfg.reference_timeout)
        if reply.work is not None:
            self.known.setdefault("work", reply.work)
        self.derived = dataclasses.replace(reply, work=self.known.get("work"))

    def verify(self, files: list[m.TrialFile]) -> list[m.FileCheck]:
        self.read_derived()
        self.worker.resume()
        return self.client.verify(files, time.monotonic() + self.pc.cfg.reference_timeout)

    def verify_in_place(self, candidate: CandidateClient, trial: m.TrialOut) -> m.FileCheck:
        """One trial's outputs compared where they lie in the candidate's memory, the candidate stopped meanwhile;
        what DeriveRequest works out comes first (trial 0's float64 error needs it)."""
        self.ask_derived()
        candidate.worker.pause()
        try:
            found = self.verify([m.TrialFile(trial.label, "", trial.trial, trial.outputs)])
        finally:
            candidate.worker.resume()
        return found[0] if found else m.FileCheck(False, trial.label, "the reference sent no check")

    def checks(self, files: list[m.TrialFile], in_place: dict[tuple[str, int], m.FileCheck]) -> list[m.FileCheck]:
        """Every trial's check in trial order: those compared in place as the candidate handed them over, the rest
        read from their files now."""
        on_file = [f for f in files if f.path]
        read = iter(self.verify(on_file) if on_file else [])
        never = "its outputs were never handed over"
        return [next(read, m.FileCheck(False, f.label, "the reference sent no check")) if f.path
                else in_place.get((f.label, f.trial), m.FileCheck(False, f.label, never)) for f in files]

    def healthy(self) -> bool:
        if self.error is not None or not self.worker.alive():
            return False
        try:
            self.read_derived()
            self.worker.resume()
            return self.client.health(time.monotonic() + 60)
        except WorkerExit:
            return False

    def flusher(self) -> FlusherClient | None:
        """The flusher on this slot (started with the reference's job where `early_flusher`, else at the problem's
        first pair; kept for the rest): the CPU path's cache flush where timing.flush_l2 is on; with
        timing.staged_gpu the GPU's L2 flush, or in graph mode (or with timing.flush_l2 off) the switch of CUDA
        context before every call (harness.worker.flusher); else None."""
        if not self._wants_flusher():
            return None
        if self._flusher is None or not self._flusher.worker.alive():
            if self._flusher is not None:
                self._flusher.worker.close()
            self._begin_flusher()
        if not self._flusher_ready:
            self._flusher.ready(time.monotonic() + 60)
            self._flusher_ready = True
        return self._flusher

    def _wants_flusher(self) -> bool:
        timing = self.pc.cfg.timing
        return timing.flush_l2 if self.device == "cpu" else timing.staged_gpu

    def _begin_flusher(self) -> None:
        """A flusher started, its job sent; flusher() reads its reply. Started with the reference's job, its start
        runs beside the reference's setup instead of at the problem's first pair (on an H200, 0.19-0.22 s passed there
        between its job and the pair's next step, on five level-2 problems: docs/measurements.md, twentieth
        session)."""
        log = self.pc.log_dir / f"{slug(self.problem_id)}__flusher.log"
        self._flusher = FlusherClient(Worker("flusher", self.spares.env, log))
        self._flusher_ready = False
        self._flusher.begin(m.FlusherJob(device=self.device))

    def close(self) -> None:
        self.worker.resume()
        self.worker.close()
        if self._flusher is not None:
            self._flusher.worker.close()


# ---------------------------------------------------------------- one pair

def run_pair(pair: Pair, record: RecordDraft, reference: ReferenceSide, pc: PairContext, device: str,
             problem_dir: Path, spares: SpareWorkers, attempt: int = 0, process: int = 0) -> None:
    """One pair, start to verdict, into `record`. `attempt` > 0 is a second try (after interference), `process` > 0
    a further process pair (timing.processes): their timed samples and checks come from streams of their own, so
    nothing an earlier try saw repeats."""
    cfg = pc.cfg
    tags = ((pair.key[0], pair.key[1]) + ((f"attempt {attempt}",) if attempt else ())
            + ((f"process {process}",) if process else ()))
    record.seed = Seed(pc.seed.base, pc.seed.fixed)
    pair_dir = problem_dir / slug(pair.candidate.id.rsplit("/", 1)[-1])
    pair_dir.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    if reference.setup_seconds is not None:         # before this pair: outside its `total`
        phases["reference_setup"], reference.setup_seconds = reference.setup_seconds, None
    started = time.monotonic()
    deadline = started + cfg.timeout
    inter = Interleaver(reference.client, reference.variants, cfg.timing.block_samples,
                        pc.seed.stream("samples", *tags), pc.seed.stream("checks", *tags), deadline,
                        cfg.timing.block_warmup, defenses.PROFILED_CALLS if cfg.defenses else 0, spares,
                        Reader(reference.client, device, str(pair_dir), deadline), device=device)
    try:
        beside = False          # the staged GPU path: the executor loads beside the candidate (_executor_beside)
        executor: reference_executor.ExecutorClient | None = None
        before: list[float] = []
        try:
            inter.flusher = reference.flusher()
            reference.mode = reference.mode.prepare(inter, cfg)
            beside = inter.staged and inter.on_device
            if inter.staged and not beside:
                inter.attach_executor(_start_executor(pair, pc, reference, device, pair_dir, spares, deadline))
            if not beside:
                before = _before_blocks(inter, reference, cfg)
            else:                               # its job out first, so that it loads beside the candidate's
                executor = _begin_executor(pair, pc, reference, device, pair_dir, spares,
                                           warm=reference.beside_trials())
        except (WorkerExit, reference_executor.ExecutorFailed) as exc:
            if isinstance(exc, WorkerExit):
                memory.reference_lost(record, reference.worker, f"reference side: {exc.detail}; last output: "
                                                                f"{last_line(reference.worker.log_tail())}")
            else:
                finish(record, Status.CRASHED, f"harness fault: {exc}")
            record.worker = WorkerRun(None, 0.0, None, device_usable_after=False)
            _close_executor(inter)
            return
        phases["baseline_before"] = time.monotonic() - started
        t_start = time.monotonic()
        candidate = CandidateClient(spares.take("candidate", pc.log_dir / f"{slug(pair.candidate.id)}.log"))
        worker = candidate.worker
        candidate.start(candidate_job(pair, pc, reference, device, pair_dir, staged=inter.staged))
        phases["start"] = time.monotonic() - t_start
        collected = None
        try:
            if reference.beside_trials():
                reference.ask_derived()
            if _checked_trials(candidate, record, reference, inter, pc, phases):
                fell = None
                if executor is not None:
                    t0 = time.monotonic()
                    sent, executor = executor, None         # the Interleaver holds it from here, or it is closed
                    before, fell = _executor_beside(inter, sent, candidate, phases)
                    phases["baseline_before"] += time.monotonic() - t0
                collected = _timed_rounds(candidate, reference, inter, pc, phases, fell)
        except WorkerExit as exc:
            _worker_ended(record, exc, reference, worker, cfg.timeout)
        except CandidateFailed as failed:
            candidate_failed(record, failed.reply, device)
        except reference_executor.ExecutorFailed as exc:
            finish(record, Status.CRASHED, f"harness fault: {exc}")
        except Exception as exc:                           # noqa: BLE001 - one pair's fault must not end the run
            record.error_detail = traceback.format_exc()[-4000:]
            finish(record, Status.CRASHED, f"harness fault while evaluating this pair: {type(exc).__name__}: {exc}")
        finally:
            inter.release()
            candidate_seen = memory.peak(candidate, device) if collected is not None else None
            t0 = time.monotonic()
            code = worker.close()
            try:
                inter.reader.close()                    # the reference drops its views of the candidate's memory
            except WorkerExit:
                pass                                    # the reference is dead or out of step: the next use says so
            phases["close"] = time.monotonic() - t0
            try:
                reference.read_derived()                # not read when the candidate failed before verify
            except WorkerExit:
                pass                                    # the reference is dead or out of step: the next use says so
            record.worker = WorkerRun(code, round(time.monotonic() - started, 3), None, phases)
            if collected is not None:
                record.worker.memory = memory.record(reference.ready, device, reference.plan, candidate_seen,
                                                     memory.peak(reference.client, device))
            shutil.rmtree(pair_dir, ignore_errors=True)
        if collected is not None and record.status is None:
            _conclude(record, reference, inter, collected, before, pc, phases, before_beside=beside)
        t0, had_executor = time.monotonic(), inter.executor is not None
        _close_executor(inter)
        if had_executor:
            phases["executor_close"] = time.monotonic() - t0
        if executor is not None:                # sent, never attached: the pair ended before its rounds
            executor.worker.close()
        phases.update(inter.spent.phases())     # parts of baseline_before, timing and baseline_after together
        record.worker.phases = {k: round(v, 3) for k, v in phases.items()}
        record.worker.phases["total"] = round(time.monotonic() - started, 3)
        if record.status is not Status.OK:
            record.worker.log_tail = worker.log_tail()
        if record.status in (Status.CRASHED, Status.TIMEOUT, Status.OOM, Status.RUNTIME_ERROR):
            record.worker.device_usable_after = reference.healthy()
    except BaseException:          # a harness fault: every worker of the pair running again (each reads the exit
        inter.release()            # it is sent next instead of waiting out its close stopped), and the executor
        _close_executor(inter, detach=False)       # closed, not left for the run's end
        if executor is not None:
            executor.worker.close()
        raise


def _start_executor(pair: Pair, pc: PairContext, reference: ReferenceSide, device: str, pair_dir: Path,
                    spares: SpareWorkers, deadline: float) -> reference_executor.ExecutorClient:
    """The pair's reference executor (harness.run.reference_executor), its model built."""
    return reference_executor.loaded(_begin_executor(pair, pc, reference, device, pair_dir, spares), deadline)


def _begin_executor(pair: Pair, pc: PairContext, reference: ReferenceSide, device: str, pair_dir: Path,
                   spares: SpareWorkers, warm: bool = False) -> reference_executor.ExecutorClient:
    """The pair's reference executor with its job sent, not waited for (reference_executor.begin); `warm`: it makes
    its first call on its own before it says it is loaded (CandidateJob.warm)."""
    cfg = pc.cfg
    scratch = pair_dir / "reference-executor"
    scratch.mkdir(parents=True, exist_ok=True)
    work = reference_executor.job(str(pair.problem.path.resolve()), device, pc.seed.base,
                                  reference.mode.spec(cfg, [EAGER]), str(scratch), str(reference.state_path),
                                  cfg.defenses, cfg.precision, hidden_from_candidates(cfg.cache_dir),
                                  output_orders(reference.ready), warm)
    return reference_executor.begin(spares, pc.log_dir / f"{slug(pair.candidate.id)}__reference-executor.log", work)


def _before_blocks(inter: Interleaver, reference: ReferenceSide, cfg: Config) -> list[float]:
    """The reference's blocks before the candidate starts (the `before` bracket of the interference check); where
    its capture fails, cold for the rest of the problem."""
    try:
        return inter.reference_blocks(cfg.timing.baseline_blocks)
    except GraphFallback as fell:       # its capture for this pair failed: cold for the rest of the problem
        inter.release()
        cold = reference.mode.fallback(f"{fell.side}: {fell.error}")
        reference.mode = cold.prepare(inter, cfg)
        return inter.reference_blocks(cfg.timing.baseline_blocks)


BESIDE_BLOCKS = 1
"""The reference's blocks before the rounds on the staged GPU path (_executor_beside). They run beside the candidate's
live process, so the interference check does not count them (defenses.interference): their one use is the executor's
warm-up (its first calls: libraries, modules, the arena's first mapping) before the rounds, and one block of
block_warmup + block_samples calls is that. The two more that `baseline_blocks` (3) gave were 10 staged samples: by
level 1's baseline phases on an H200 (0.5-3.0 s for 30 samples, twenty-second session), 0.17-1.0 s a pair."""


def _executor_beside(inter: Interleaver, executor: reference_executor.ExecutorClient, candidate: CandidateClient,
                     phases: dict[str, float]) -> tuple[list[float], GraphFallback | None]:
    """The staged GPU path, once the candidate's trials passed: the executor, sent its job just before the candidate
    was, so loaded (and warmed by a call of its own, where the problem is small enough to run it beside the trials:
    ReferenceSide.beside_trials) while the candidate loaded and ran its trials, is attached, and the reference's first
    block runs in it (BESIDE_BLOCKS), the candidate stopped meanwhile as in the rounds. Its start (the profiler, CUDA,
    the first call's libraries and modules) is so hidden behind the candidate's instead of added to the pair, and a
    pair that fails its trials never waits for it. That block runs while the candidate is alive (work it left on the
    device runs on), so it is not a bracket the candidate could not reach: the interference check counts only the
    `after` blocks there (defenses.interference). Returns its median, and the capture failure that sends the pair
    back to cold (the rounds start with it: _timed_rounds). `phases` gets two parts of `baseline_before`:
    `executor_wait` (for its Loaded, after the trials) and `executor_attach` (its mapping of the arena, the candidate
    stopped)."""
    t0 = time.monotonic()
    try:
        reference_executor.loaded(executor, inter.deadline)
    except WorkerExit as exc:                   # the executor's end is the harness's fault, never the candidate's
        raise reference_executor.ExecutorFailed(f"the reference's executor: {exc.detail}") from None
    t1 = time.monotonic()
    phases["executor_wait"] = t1 - t0
    try:
        inter.attach_executor(executor)
    except BaseException:
        executor.worker.close()
        raise
    inter.candidate_alive(candidate)
    phases["executor_attach"] = time.monotonic() - t1
    try:
        return inter.reference_blocks(BESIDE_BLOCKS), None
    except GraphFallback as fell:
        return [], fell
    except WorkerExit as exc:
        if not executor.worker.alive():
            raise reference_executor.ExecutorFailed(f"the reference's executor ended: {exc.detail}") from None
        raise


def _close_executor(inter: Interleaver, detach: bool = True) -> None:
    """The pair's reference executor closed, once the reference forgot its arena (nothing where it had none;
    `detach` False: the reference is not asked, as after a fault, where it may be in the middle of another
    request)."""
    executor = inter.executor
    if detach:
        try:
            executor = inter.detach_executor()
        except WorkerExit:
            pass                    # the reference is gone or out of step: the next use says so
    inter.executor = None
    if executor is not None:
        executor.worker.close()


def candidate_job(pair: Pair, pc: PairContext, reference: ReferenceSide, device: str, pair_dir: Path,
                  staged: bool = False) -> CandidateJob:
    """The candidate worker's job for `pair` (its build's extension folder, its own Triton cache in `pair_dir`, the
    reference's mode, state and memory plan); `run_eval.py profile` sends the same one, unstaged. `staged`: its
    samples are staged by the reference (on the CPU its trials too)."""
    cfg = pc.cfg
    build = pc.builds[pair.candidate.id]
    env = {**build_env(Path(build.build_dir), pc.toolchain), "TRITON_CACHE_DIR": str(pair_dir / "triton")}
    return CandidateJob(
        str(pair.problem.path.resolve()), build.candidate_path, device, pc.seed.base, cfg.trials,
        reference.mode.spec(cfg, [CANDIDATE]), str(pair_dir), str(reference.state_path),
        cfg.defenses, cfg.precision, hide=hidden_from_candidates(cfg.cache_dir), env=env,
        memory_share_bytes=reference.plan.candidate if reference.plan else None, staged=staged and device == "cpu",
        staged_samples=staged and device != "cpu", output_orders=output_orders(reference.ready))


def output_orders(ready: m.Ready | None) -> list | None:
    """The layout each timed output is held to (harness.shared.layout.orders: the reference's where it is
    contiguous), copied into inside the call where it is not in it; None where the reference did not say."""
    return layout.orders(ready.output_shapes, ready.output_strides) if ready is not None else None


def _worker_ended(record: RecordDraft, exc: WorkerExit, reference: ReferenceSide, worker: Worker,
                  timeout: float) -> None:
    """The verdict when a worker ended without the reply the parent waited for."""
    if not reference.worker.alive():
        memory.reference_lost(record, reference.worker, f"reference side: {exc.detail}; last output: "
                                                        f"{last_line(reference.worker.log_tail())}")
    elif exit_status(exc.kind) is Status.TIMEOUT:
        finish(record, Status.TIMEOUT, f"killed after the pair timeout of {timeout:g} s")
    else:
        finish(record, exit_status(exc.kind), f"{exc.detail}; last output: {last_line(worker.log_tail())}")


# What a candidate worker may say of itself: its code raised, did not build or load, or computed the wrong thing;
# `skipped` only on the CPU path (an extension with CUDA sources). Anything else it sends (`ok`, `skipped` on the GPU,
# `timeout`...) is a status only the parent may give: a candidate that reached its message pipe could otherwise report
# its own pair `skipped`, which `ci` lets pass.
CANDIDATE_STATUSES = (Status.COMPILE_ERROR, Status.LOAD_ERROR, Status.RUNTIME_ERROR, Status.OOM, Status.INCORRECT)


def candidate_failed(record: RecordDraft, reply: m.Failed, device: str) -> None:
    """The verdict the candidate worker reported for itself (its code raised, did not build or load), where it is
    one a candidate can earn (CANDIDATE_STATUSES); else `crashed`, saying so."""
    allowed = CANDIDATE_STATUSES + ((Status.SKIPPED,) if device == "cpu" else ())
    if reply.status not in {s.value for s in allowed}:
        finish(record, Status.CRASHED, f"the candidate worker reported the status {str(reply.status)[:40]!r}, which "
                                       f"only the harness gives: {str(reply.error)[:300]}")
        return
    finish(record, Status(reply.status), reply.error)
    record.error_detail = reply.detail


def _checked_trials(candidate: CandidateClient, record: RecordDraft, reference: ReferenceSide, inter: Interleaver,
                    pc: PairContext, phases: dict[str, float]) -> bool:
    """The correctness trials and the checks after them. True where the pair goes on to its timed rounds; False when
    the record was finished here (an incorrect or invalid result; a failure raises CandidateFailed or WorkerExit)."""
    t0 = time.monotonic()
    if inter.staged and not inter.on_device:    # the CPU path: the parent runs them (harness.run.stagedtrials)
        loaded = trials_reply(candidate, record, inter.deadline, m.Loaded)
        reference.read_derived()                # worked out while the candidate loaded; the pipe is free again
        outputs, in_place = stagedtrials.run_trials(candidate, loaded, reference.ready, inter, pc.cfg.trials,
                                                    inter.reader.scratch, pc.cfg.defenses), {}
    else:
        outputs, in_place = trials(candidate, record, reference, pc.cfg.trials, inter.deadline)
    phases["trials"] = time.monotonic() - t0
    missing = sizes.missing_outputs(outputs, reference.ready, pc.cfg.trials)
    if missing:
        raise WorkerExit("protocol", None, missing)
    t0 = time.monotonic()
    reference.ask_derived()                     # asked already when it could run beside the trials
    reference.read_derived()
    phases["derive_wait"] = time.monotonic() - t0
    t0 = time.monotonic()
    results = reference.checks(outputs.files, in_place)
    phases["checks"] = time.monotonic() - t0
    ready = reference.ready
    record.correctness = _correctness(results, outputs, ready, reference.derived, pc)
    if sizes.several(ready):
        record.sizes = sizes.results(results, ready)
    record.precision = Precision(pc.cfg.precision, ready.dtype, ready.dtype_source)
    trial0 = next((r for r in results if r.label == "trial0"), None)
    evidence = defenses.Evidence(ready, reference.derived, pc.cfg.timing, reference.device, outputs, trial0)
    verdicts.write(record, defenses.run(defenses.AFTER_TRIALS[:1], evidence, pc.cfg.defenses))   # the trials' own
    failing = [r for r in results if not r.ok]
    if failing:
        _trials_failed(record, failing[0], ready)
        return False
    earlier = list(record.flags)
    verdicts.write(record, defenses.run(defenses.AFTER_TRIALS[1:], evidence, pc.cfg.defenses))
    invalid = flags.invalidating([f for f in record.flags if f not in earlier])
    if invalid:                                             # e.g. inside the tolerance, but not fp32 arithmetic
        finish(record, Status.INVALID, f"{invalid[0]}: {record.flag_detail(invalid[0]) or ''}")
        return False
    return True


def _timed_rounds(candidate: CandidateClient, reference: ReferenceSide, inter: Interleaver, pc: PairContext,
                  phases: dict[str, float], fell: GraphFallback | None = None) -> Collected:
    """The timed rounds, until the stop rule ends them. `fell`: the reference's capture failed in its first blocks
    (_executor_beside): the rounds are cold."""
    ready = reference.ready
    t0 = time.monotonic()
    rule = paired.StopRule(pc.cfg.timing.rounds_floor(), pc.cfg.timing.max_rounds, pc.cfg.timing.target_rel_ci,
                           pc.cfg.timing.max_pair_seconds)
    if fell is None:
        try:
            collected = inter.rounds(candidate, rule)
        except GraphFallback as failed:
            fell = failed
    if fell is not None:
        collected = _cold_again(candidate, reference, inter, rule, fell, pc.cfg)
    if pc.cfg.timing.sizes == "all" and sizes.several(ready):
        collected.sizes = sizes.time_others(candidate, inter, ready, rule, collected)
    phases["timing"] = time.monotonic() - t0
    phases["timing_profile"] = collected.profile_seconds      # parts of "timing"
    phases["timing_switch"] = collected.switch_seconds
    return collected


def trials(candidate: CandidateClient, record: RecordDraft, reference: ReferenceSide, count: int,
           deadline: float) -> tuple[m.Outputs, dict[tuple[str, int], m.FileCheck]]:
    """The candidate's correctness trials: its Outputs, and the checks of the trials it handed over where they lie
    (GPU: messages.TrialOut, compared by the reference while the candidate is stopped, before its next trial).
    CandidateFailed for a failure it reports, WorkerExit for anything else (a trial it was not asked for too)."""
    wanted = set(enumerate(sizes.expected_labels(reference.ready, count)))
    in_place: dict[tuple[str, int], m.FileCheck] = {}
    while True:
        reply = trials_reply(candidate, record, deadline)
        if not isinstance(reply, m.TrialOut):
            return reply, in_place
        if (reply.trial, reply.label) not in wanted:
            raise WorkerExit("protocol", None, f"worker handed over trial {reply.label!r} ({reply.trial}), "
                                               f"not one asked for")
        in_place[(reply.label, reply.trial)] = reference.verify_in_place(candidate, reply)
        candidate.next_trial()


def trials_reply(candidate: CandidateClient, record: RecordDraft, deadline: float,
                 *expected: type) -> m.Outputs | m.TrialOut | m.Loaded:
    """The candidate's next reply while it runs its trials (the first carries its sandbox's report, for the record):
    a trial's outputs where they lie, or all its trials' outputs (`expected`: Loaded on the CPU path, where the
    parent runs them); CandidateFailed for a failure it reports, WorkerExit for anything else."""
    reply = candidate.trial_reply(deadline, *expected)
    if reply.sandbox is not None or record.sandbox is None:
        record.sandbox = Sandbox.from_json(reply.sandbox)
    if isinstance(reply, m.Failed):
        raise CandidateFailed(reply)
    if isinstance(reply, m.HarnessError):
        raise WorkerExit("protocol", None, f"worker sent {reply.KIND!r}: {reply.error}")
    return reply


def _trials_failed(record: RecordDraft, first: m.FileCheck, ready: m.Ready) -> None:
    """The verdict on trials that did not all pass: `incorrect` (naming the size where the problem has several),
    or `invalid` when the values checked were not the final ones."""
    hint = f"{first.hint}; " if first.hint else ""
    reason = f"{sizes.wrong_at(first.label, ready)}{sizes.trial_label_text(first.label)}: {hint}{first.reason}"
    unsynchronized = flags.UNSYNCHRONIZED_WORK
    if unsynchronized.name in record.flags:
        finish(record, Status.INVALID, f"{unsynchronized}: {unsynchronized.meaning}; {reason}")
    else:
        finish(record, Status.INCORRECT, reason)


def _cold_again(candidate: CandidateClient, reference: ReferenceSide, inter: Interleaver, rule: paired.StopRule,
                fell: GraphFallback, cfg: Config) -> Collected:
    """One side could not be captured in a CUDA graph: both go back to cold timing for this pair (and the
    reference for the rest of the problem when it was the reference)."""
    cold = reference.mode.fallback(f"{fell.side}: {fell.error}")
    if fell.side != CANDIDATE:
        reference.mode = cold
    inter.release()
    cold.prepare(inter, cfg)
    inter.set_mode(candidate, cold.NAME)
    collected = inter.rounds(candidate, rule)
    collected.graph_error = f"{fell.side}: {fell.error}"
    return collected


def _conclude(record: RecordDraft, reference: ReferenceSide, inter: Interleaver, out: Collected,
              before: list[float], pc: PairContext, phases: dict[str, float], before_beside: bool = False) -> None:
    """The candidate is gone: the `after` bracket, the estimates and the verdict. `before_beside`: the `before`
    blocks ran beside the candidate's start (_executor_beside)."""
    t0 = time.monotonic()
    inter.candidate_gone(time.monotonic() + pc.cfg.reference_timeout)
    try:
        after = inter.reference_blocks(pc.cfg.timing.baseline_blocks)
    except WorkerExit as exc:
        memory.reference_lost(record, reference.worker, f"reference side: {exc.detail}")
        return
    except reference_executor.ExecutorFailed as exc:
        finish(record, Status.CRASHED, f"harness fault: {exc}")
        return
    finally:
        inter.release()
    phases["baseline_after"] = time.monotonic() - t0
    _timing_record(record, reference, out, before, after, pc)
    t0 = time.monotonic()
    evidence = defenses.Evidence(reference.ready, reference.derived, pc.cfg.timing, reference.device, out=out,
                                 before=before, after=after, before_beside=before_beside,
                                 calls_per_sample=inter.calls_per_sample,
                                 ceilings=pc.ceilings, speedup_ci=record.speedup_ci,
                                 candidate_ms=record.timing.candidate.median_ms if record.timing.candidate else None,
                                 cpu_threads=pc.cfg.cpu_threads)
    verdicts.write(record, defenses.run(defenses.AFTER_ROUNDS, evidence, pc.cfg.defenses))
    phases["checks"] = phases.get("checks", 0.0) + time.monotonic() - t0
    invalid = flags.invalidating(record.flags)
    if invalid:
        finish(record, Status.INVALID, f"{invalid[0]}: {record.flag_detail(invalid[0]) or ''}".rstrip(": "))
    else:
        finish(record, Status.OK)


def _side_stats(out: Collected, variant: str) -> SideStats:
    stats = SideStats.of(out.samples(variant))
    if out.host_ms.get(variant):
        stats.host_median_ms = statistics.median(out.host_ms[variant])
        stats.stream_lag_median_ms = statistics.median(out.lag_ms[variant])
    return stats


BASELINE_STATS = ("n", "median_ms", "mean_ms", "stdev_ms", "min_ms", "max_ms")    # what a baseline keeps of its samples


def _baselines(reference: ReferenceSide, out: Collected, term: Term | None) -> dict[str, Baseline]:
    """Each torch.compile baseline: its compilation and, where it was timed, its samples and the speedup against it
    (mean/stdev/min/max: KernelBench's baseline files)."""
    baselines = {}
    for mode, note in reference.ready.compile.items():
        variant = f"compile:{mode}"
        entry = Baseline(note.error, note.compile_seconds)
        if variant in reference.variants and out.samples(variant):
            est = widen(paired.estimate(ratios(out, variant)), term)
            side = summarize(out.samples(variant))
            entry = dataclasses.replace(entry, **{k: side[k] for k in BASELINE_STATS}, speedup=est.value,
                                        speedup_ci=est.ci())
        baselines[variant] = entry
    return baselines


def _timing_record(record: RecordDraft, reference: ReferenceSide, out: Collected, before: list[float],
                   after: list[float], pc: PairContext) -> None:
    t = pc.cfg.timing
    mode = reference.mode if not out.graph_error else modes.Cold(error=out.graph_error)
    term = pc.between.for_pair(record.problem, mode.NAME) if pc.between is not None else None
    rounds = paired.estimate(ratios(out, EAGER))
    main = widen(rounds, term)
    record.speedup, record.speedup_ci = main.value, main.ci()
    baselines = _baselines(reference, out, term)
    best = fastest(out, [v for v in reference.variants if v != EAGER])
    if best is not None:
        est = widen(paired.estimate(ratios(out, best)), term)
        record.speedup_vs_compile, record.speedup_vs_compile_ci = est.value, est.ci()
    record.timing = Timing(
        clock="host" if reference.device == "cpu" else "cuda_event",
        **mode.record(pc.cfg),                  # mode, l2_flush (host: the CPU's caches), graph_replays, graph_error
        timer_floor_ms=reference.ready.timer_floor_ms,
        cold_probe_ms=reference.ready.cold_probe_ms,
        cpu_threads=pc.cfg.cpu_threads,
        **({"cpu_cores": out.cores, "cpu_cores_counted": out.cores_counted} if out.cores else {}),
        **({"cpu_cores_median_sample": out.sample_cores} if out.sample_cores else {}),
        **({"cpu_work_while_stopped": out.stopped_work} if out.stopped_work else {}),
        block_samples=t.block_samples, block_warmup=t.block_warmup, profiled_calls=len(out.profiles),
        rounds=main.rounds,
        seconds=round(out.seconds, 3),
        target_rel_ci=t.target_rel_ci, rel_ci_half_width=main.rel_half_width, noisy=out.noisy,
        round_ratios=[round(r, 6) for r in ratios(out, EAGER)],
        reference=_side_stats(out, EAGER), candidate=_side_stats(out, CANDIDATE),
        baselines=baselines, baseline_before_ms=before, baseline_after_ms=after,
        between_process=term.record() if term is not None else None,
        speedup_ci_rounds=rounds.ci() if term is not None else None,
    )
    sizes.add_timing(record, out.sizes, term, pc.cfg.timing.sizes == "all")


def _correctness(results: list[m.FileCheck], outputs: m.Outputs, ready: m.Ready, derived: m.Derived,
                 pc: PairContext) -> Correctness:
    first_bad = next((r for r in results if not r.ok), None)
    return Correctness(
        trials=len(results), trials_passed=sum(1 for r in results if r.ok),
        max_abs_err=defenses.largest([r.max_abs_err for r in results]),
        max_rel_err=defenses.largest([r.max_rel_err for r in results]),
        atol=ready.atol, rtol=ready.rtol, dtype=ready.dtype,
        first_mismatch=first_bad and {"trial": first_bad.label, "reason": first_bad.reason,
                                      **(first_bad.first_mismatch or {})},
        param_match=outputs.param_match, module_mode=outputs.module_mode,
        fp64_max_abs_err=next((r.fp64_max_abs_err for r in results if r.label == "trial0"), None),
        fp64_reference_max_abs_err=derived.fp64_reference_max_abs_err, fp64=derived.fp64,
        reference_module_mode=ready.module_mode, seed=pc.seed.base,
    )
