"""The parent's side of paired, interleaved timing: it alternates the reference worker and the candidate worker in
short blocks on the same device, one of them at a time (the other's processes are stopped), and collects every
sample and every output check. The arithmetic lives in harness.run.paired; the verdicts in harness.run.defenses.

Round r, with reference variants E (eager) and C1.. (torch.compile modes) and the candidate K:
    E C1 .. K   on seeds X (block_samples fresh seeds)     then     K .. C1 E   on seeds Y
so every variant sees the same inputs as the candidate, and each side's samples are centred on the round.

Each block starts with `warmup` samples that run and are checked like the others but are not counted: the first
call after the other process ran finds cold host caches (2x on a 0.1 ms CPU call, where back-to-back blocks of
one process did not), a cost of the interleaving, not of either side. Both sides get them, on the same seeds; a
worker cannot tell them from timed samples.

In a few round halves drawn at random (`profiles`), each side also runs one call under the profiler after its
block: the candidate's show whose kernels ran (harness.run.defenses.check_kernels); the reference's is the same work,
so that whatever a profiler leaves behind in a process costs both sides.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from harness.shared import messages as m
from harness.run import cores, scheduling
from harness.run.clients import CandidateClient, FlusherClient, ReferenceClient, Timed, parent_clock_ns
from harness.run.paired import StopRule, should_stop
from harness.run.reference_executor import ExecutorClient
from harness.run.workerproc import SpareWorkers, WorkerExit
from harness.core.seeds import SeedStream
from harness.run.trusted import Checked, Reader, shared_between_calls, slots_for

CANDIDATE = "candidate"
EAGER = "eager"
FULL_CHECKS = 2                 # timed outputs per pair checked whole, at samples drawn at random


class GraphFallback(Exception):
    """A side could not capture its call in a CUDA graph: the pair goes back to cold timing."""

    def __init__(self, side: str, error: str):
        super().__init__(error)
        self.side, self.error = side, error


@dataclass
class Collected:
    """Everything the rounds produced."""
    rounds: list[dict[str, list[float]]] = field(default_factory=list)     # per round: variant -> its samples
    host_ms: dict[str, list[float]] = field(default_factory=dict)
    unexplained_ms: dict[str, list[float]] = field(default_factory=dict)   # parent's clock minus reported, per sample
    flush_ms: dict[str, list[float]] = field(default_factory=dict)  # the cache flush of each sample, as reported
    lag_ms: dict[str, list[float]] = field(default_factory=dict)
    checks: dict[int, dict[str, Checked]] = field(default_factory=dict)    # sample seed -> side -> values
    mutated: bool = False
    changed_after_return: bool = False      # a timed output's memory changed after its call returned
    not_plain: bool = False
    aliased: str | None = None              # a timed output lay in memory the harness gave the call (CPU: its arena)
    scheduling: str | None = None           # a worker's scheduling was raised during the rounds (one line)
    output_errors: list[str] = field(default_factory=list)
    shared_outputs: str | None = None       # graph mode: two captured calls of a sample handed back the same memory
    tampered: set[str] = field(default_factory=set)
    profiles: list[m.Profile | None] = field(default_factory=list)  # the candidate's profiled calls (None: CPU)
    reference_profiles: list[m.Profile | None] = field(default_factory=list)    # the reference's (eager) ones
    noisy: bool = False
    seconds: float = 0.0
    graph_error: str | None = None          # graph capture failed on a side: these rounds are cold
    switch_seconds: float = 0.0             # the parent's clock in stopping one side and resuming the other
    profile_seconds: float = 0.0            # the parent's clock in profiled calls (both sides)
    sizes: list = field(default_factory=list)   # timing.sizes all: the other sizes' rounds (harness.run.sizes)
    cores: dict[str, float | None] | None = None   # CPU path: the cores each side used while awake (run.cores)
    sample_cores: dict[str, float | None] | None = None   # and in its median counted sample (cgroup only)
    stopped_work: dict[str, float | None] | None = None   # each side's share of its CPU work done while stopped
    cores_counted: str | None = None        # what counted them: cores.CGROUP or cores.TREE

    def samples(self, variant: str) -> list[float]:
        return [s for r in self.rounds for s in r.get(variant, [])]


@dataclass
class SampleParts:
    """Where the parent's time went over every sample of a pair (its reference blocks and its rounds; worker.phases'
    `samples_*`): the reference staging the inputs (checking the last ones, drawing and writing these: the staged
    paths), the call (the cache flush, waking the side, its request and reply; unstaged: the whole sample request),
    and the trusted read of the outputs."""
    stage: float = 0.0
    call: float = 0.0
    read: float = 0.0

    def phases(self) -> dict[str, float]:
        """worker.phases' keys, where any sample ran."""
        if not (self.stage or self.call or self.read):
            return {}
        return {"samples_stage": self.stage, "samples_call": self.call, "samples_read": self.read}


class Interleaver:
    def __init__(self, reference: ReferenceClient, variants: list[str], block: int, samples: SeedStream,
                 checks: SeedStream, deadline: float, warmup: int = 0, profiles: int = 0,
                 spares: SpareWorkers | None = None, reader: Reader | None = None,
                 flusher: FlusherClient | None = None, device: str = "cpu"):
        self.reference, self.variants, self.block, self.warmup = reference, variants, block, warmup
        self.device = device
        self.spares = spares                    # the slot's spare workers: stopped while a side is timed
        self.profiles = profiles                # round halves, drawn at random, after which both sides profile a call
        self._profile_at: set[tuple[int, int]] = set()
        self.samples, self.check_seeds = samples, checks
        self.deadline = deadline
        self.candidate: CandidateClient | None = None
        self.active: Timed | None = None
        self.check_for: dict[int, int] = {}
        self.calls_per_sample = 1               # graph mode: a sample replays graph_calls x graph_replays calls
        self.reader = reader                    # reads each side's timed outputs (harness.run.trusted)
        self.full_seeds: set[int] = set()       # samples whose outputs are checked whole (drawn in rounds())
        self._per_sample: dict[Timed, cores.PerSample] = {}   # CPU path, in the rounds: each metered worker's
        self.staged = False                     # the reference stages each sample's inputs (arena)
        self.flushed = True                     # the flusher empties the caches before each staged call
        self.flusher = flusher                  # the process that flushes the caches before each staged call
        self._nice_at_start: dict[int, int | None] = {}     # each worker's lowest nice when the rounds began
        self._attached: CandidateClient | None = None   # the candidate whose arena the reference stages into
        self.executor: ExecutorClient | None = None     # the reference's executor (harness.run.reference_executor):
                                                        # it runs the eager samples where the reference stages them
        self._executor_threads: dict[int, tuple[int, int]] = {}     # its threads' (nice, policy) when attached
        self.spent = SampleParts()              # the parent's seconds in each part of every sample (the phases')

    # ------------------------------------------------------------ one side at a time

    def _activate(self, side: Timed) -> None:
        if self.active is side:
            return
        for other in self._sides():
            if other is not side:
                other.worker.pause()
        if self.spares is not None:
            self.spares.pause()
        side.worker.resume()
        self.active = side

    def release(self) -> None:
        """Both sides (and the spares) running again (to verify, profile or close)."""
        for side in self._sides():
            side.worker.resume()
        if self.spares is not None:
            self.spares.resume()
        self.active = None

    def _sides(self) -> list[Timed]:
        return [c for c in (self.reference, self.executor, self.candidate) if c is not None]

    def worker_of(self, side: str, variant: str) -> Timed:
        """The process that runs `variant`'s samples: the candidate's; the reference's eager samples in its executor
        where it has one; the reference's other variants (torch.compile baselines) in the reference worker."""
        if side == CANDIDATE:
            if self.candidate is None:
                raise WorkerExit("protocol", None, "no candidate worker")
            return self.candidate
        return self.executor if self.executor is not None and variant == EAGER else self.reference

    def _stage_side(self, worker: Timed, side: str) -> str:
        """The stager's name for the arena `worker` reads (harness.worker.arena.SIDES)."""
        return "executor" if worker is self.executor and worker is not None else side

    def use_mode(self, calls_per_sample: int, staged: bool, flushed: bool = True) -> None:
        """What a sample stands for from now on (harness.run.modes): calls per sample, whether the reference
        stages every sample's inputs in the arena of the side that runs it (harness.worker.arena), and whether the
        flusher empties the caches before each call (else, on the GPU, it only runs before it: graph mode's hot
        samples, or timing.flush_l2 off)."""
        self.calls_per_sample, self.staged, self.flushed = calls_per_sample, staged, flushed

    def candidate_alive(self, candidate: CandidateClient) -> None:
        """The candidate worker is alive (its trials done): stopped from now on whenever another side runs, as in
        the rounds (which name it again), so that it never runs beside the reference's executor."""
        self.candidate = candidate

    def candidate_gone(self, deadline: float) -> None:
        """The candidate worker is closed: reference blocks alone from here, until `deadline`."""
        self.candidate, self.deadline = None, deadline

    def set_size(self, side: Timed, size: str) -> None:
        """The side draws its samples at the problem's size `size` from now on (harness.run.sizes)."""
        side.size(size, self.deadline)

    def set_mode(self, side: Timed, mode: str, graph_replays: int = 1, graph_calls: int = 0) -> None:
        """`side` times its samples in `mode` from now on; the reference's executor follows the reference."""
        side.mode(mode, graph_replays, graph_calls, self.deadline)
        if side is self.reference and self.executor is not None:
            self.executor.mode(mode, graph_replays, graph_calls, self.deadline)

    # ------------------------------------------------------------ blocks

    def _sample(self, worker: Timed, side: str, variant: str, seed: int, out: Collected,
                times: list[float] | None) -> None:
        """One sample, then its output check; `times` None: a block's warm-up (checked, not counted). The parent's
        clock brackets the sample request alone, on both sides; the check comes after the reply, with the
        candidate stopped (trusted.Reader), or from the reference itself."""
        flush_ms = None
        t0, staging = time.perf_counter(), self.spent.stage
        if self.staged:
            per_sample = self._per_sample.get(worker)
            cpu_before = per_sample.begin() if per_sample is not None else None
            result, bracket_ms, flush_ms = self._staged_call(worker, side, variant, seed, out)
            if per_sample is not None:                  # the side stopped again: its CPU in this call, over the clock
                per_sample.add(cpu_before, bracket_ms, counted=times is not None)
        else:
            started = parent_clock_ns()               # the parent's clock: out of the workers' reach
            result = worker.sample(variant, seed, self.deadline)
            bracket_ms = (parent_clock_ns() - started) / 1e6
        self.spent.call += time.perf_counter() - t0 - (self.spent.stage - staging)     # less the stage's part
        if result.error:
            raise GraphFallback(side, result.error)
        if not result.ms > 0:
            raise WorkerExit("protocol", None, f"reported a sample of {result.ms} ms")
        out.tampered.update(result.tampered)
        if times is not None:
            times.append(result.ms)
            out.host_ms.setdefault(variant, []).append(result.host_ms)
            out.lag_ms.setdefault(variant, []).append(result.lag_ms)
            out.unexplained_ms.setdefault(variant, []).append(bracket_ms - result.ms * self.calls_per_sample)
            out.flush_ms.setdefault(variant, []).append(result.flush_ms if flush_ms is None else flush_ms)
        out.mutated = out.mutated or result.mutated
        out.changed_after_return = out.changed_after_return or result.changed_after_return
        out.not_plain = out.not_plain or result.not_plain
        if variant not in (EAGER, CANDIDATE):
            return
        if side == CANDIDATE and len(result.outputs) > 1 and out.shared_outputs is None:
            out.shared_outputs = shared_between_calls(result.outputs)
        check_seed = self.check_for.setdefault(seed, self.check_seeds.next())
        full = side == CANDIDATE and seed in self.full_seeds
        if self.reader is None:
            raise WorkerExit("protocol", None, "no reader for the outputs")
        t0 = time.perf_counter()
        if full:                    # whichever side ran this sample's inputs first: the reference recomputes on them
            self.reader.keep(check_seed, seed, slots_for(check_seed, len(result.outputs))[-1])
        checked = self.reader.read(worker, side == CANDIDATE, result, check_seed, full,
                                   stay_stopped=self.staged and (side == CANDIDATE or worker is self.executor))
        self.spent.read += time.perf_counter() - t0
        if checked.error:
            out.output_errors.append(f"timed call ({side}): {checked.error}")
        out.aliased = out.aliased or checked.aliased
        out.checks.setdefault(seed, {})[side] = checked

    def _staged_call(self, worker: Timed, side: str, variant: str, seed: int,
                     out: Collected) -> tuple[m.SampleResult, float, float | None]:
        """A staged sample: the reference checks the side's previous inputs and writes this sample's into the side's
        arena, with the candidate stopped, and the flusher process empties the caches with both stopped (on the GPU
        an L2 write before a cold sample, a few bytes before a graph one); then the side runs the call alone. On the
        CPU the parent's clock around that request is the sample (the worker reports no time); on the GPU the call's
        own CUDA events are, and the parent's clock checks them. The side is stopped at once after its reply, for the
        trusted read (a candidate, or the reference's executor, stays stopped until its next call). Returns the
        sample, the parent's clock around it, and the flush's time."""
        t0 = time.perf_counter()
        staged = self.stage(m.StageRequest(self._stage_side(worker, side), seed))
        self.spent.stage += time.perf_counter() - t0
        out.mutated = out.mutated or staged.mutated
        out.changed_after_return = out.changed_after_return or staged.changed_after_return
        if self.on_device:
            called, bracket_ms, flush_ms = self.call(worker, variant, staged)
            if called.capture_error:
                return m.SampleResult(0.0, 0.0, 0.0, [], called.capture_error), bracket_ms, flush_ms
            return m.SampleResult(called.ms, called.host_ms, called.lag_ms, [], outputs=called.slots or
                                  ([called.outputs] if called.outputs else []), output_error=called.output_error,
                                  not_plain=called.not_plain), bracket_ms, flush_ms
        called, ms, flush_ms = self.call(worker, variant, staged)
        return m.SampleResult(ms, ms, 0.0, [], outputs=[called.outputs] if called.outputs else [],
                              output_error=called.output_error, not_plain=called.not_plain), ms, flush_ms

    @property
    def on_device(self) -> bool:
        """The GPU path (its staged samples are timed by the call's CUDA events)."""
        return self.device != "cpu"

    def stage(self, req: m.StageRequest) -> m.Staged:
        """CPU path: the reference (running alone) stages a call's inputs (StageRequest)."""
        self._activate(self.reference)
        staged = self.reference.stage(req, self.deadline)
        if req.seed is None and req.trial is None:
            return staged
        if staged.error or staged.layout is None:
            raise WorkerExit("protocol", None, f"the reference could not stage the inputs: {staged.error}")
        return staged

    def call(self, worker: Timed, variant: str, staged: m.Staged, label: str = "", flush: bool = True,
             profile: bool = False) -> tuple[m.Called, float, float]:
        """The staged call, on the parent's clock: (its reply, its ms, the flush's ms before it). Both sides are
        stopped, the caches flushed (`flush`, where there is a flusher), and the side to run is woken
        inside the clock, so that nothing it does once it can see its inputs goes untimed; the clock ends once it is
        stopped again, right after its reply (the next _activate resumes whichever side it needs). `profile`: the
        call under the profiler instead (GPU; its reply's `profile`)."""
        self.reference.worker.pause()
        self.active = None
        flush_ms = 0.0
        if flush and self.flusher is not None:
            flush_ms = self.flusher.flush(not self.flushed, self.deadline)
        called, ms = worker.call(m.CallRequest(variant, staged.layout, staged.manual_seed, label, profile),
                                 self.deadline)
        return called, ms, flush_ms

    def _staged_end(self, out: Collected) -> None:
        """The CPU path's last check: the inputs of each side's last sample, as they are now."""
        for side in ("reference", CANDIDATE) + (("executor",) if self.executor is not None else ()):
            staged = self.stage(m.StageRequest(side))
            out.mutated = staged.mutated or out.mutated
            out.changed_after_return = staged.changed_after_return or out.changed_after_return

    def attach(self, candidate: CandidateClient) -> None:
        """CPU path: the reference stages the candidate's calls into `candidate`'s arena from now on (once per
        candidate worker: its trials, then its rounds)."""
        if self.staged and self._attached is not candidate:
            self._activate(self.reference)
            path = "" if self.on_device else candidate.worker.arena_path()  # GPU: device memory the reference allocates
            attached = self.reference.arena(path, "candidate", self.deadline)
            if attached.error:
                raise WorkerExit("protocol", None, f"the reference could not open {attached.error}")
            self._attached = candidate

    def attach_executor(self, executor: ExecutorClient) -> None:
        """The reference's eager samples run in `executor` from now on (harness.run.reference_executor), on inputs
        the reference stages into its arena (CPU: its memfd; GPU: the one device arena, mapped by its handle). The
        baseline of its threads' scheduling is what `begin` read when its job was sent, before any candidate code
        existed (else read now)."""
        self._activate(self.reference)
        attached = self.reference.arena("" if self.on_device else executor.worker.arena_path(), "executor",
                                        self.deadline)
        if attached.error:
            raise WorkerExit("protocol", None, f"the reference could not open {attached.error}")
        self.executor = executor
        threads = executor.threads
        self._executor_threads = threads if threads is not None else scheduling.settings(executor.worker.proc.pid)

    def detach_executor(self) -> ExecutorClient | None:
        """The executor is done (the pair's last reference blocks ran): the reference forgets its arena; returns it,
        for the caller to close."""
        executor, self.executor = self.executor, None
        if executor is not None and self.reference.worker.alive():
            self._activate(self.reference)
            self.reference.arena("", "executor", self.deadline)
        return executor

    def _block(self, side: str, variant: str, seeds: list[int], out: Collected, round_samples: dict,
               profile: bool = False) -> None:
        worker = self.worker_of(side, variant)
        t0 = time.perf_counter()
        self._activate(worker)
        out.switch_seconds += time.perf_counter() - t0
        times = round_samples.setdefault(variant, [])
        for i, seed in enumerate(seeds):
            timed = i >= self.warmup
            self._sample(worker, side, variant, seed, out, times if timed else None)
        if self._nice_at_start and out.scheduling is None:
            pid = worker.worker.proc.pid
            found = scheduling.raised(pid, self._nice_at_start.get(pid))
            if found is None and worker is self.executor:
                found = scheduling.lowered(pid, self._executor_threads)
            out.scheduling = found and f"{'the reference executor' if worker is self.executor else side}: {found}"
        if profile and variant in (EAGER, CANDIDATE):     # both sides, so that whatever a profiler leaves behind
            t0 = time.perf_counter()                        # costs both (the CPU path profiles nothing: None)
            found = self._profile(worker, side, variant, seeds[0], out)
            out.profile_seconds += time.perf_counter() - t0
            (out.profiles if side == CANDIDATE else out.reference_profiles).append(found)

    def _profile(self, worker: Timed, side: str, variant: str, seed: int, out: Collected) -> m.Profile | None:
        """One call of `side` under the profiler, on inputs staged from `seed` (the GPU's staged path: its stage
        checks the block's last sample as any stage does), or drawn by the worker (unstaged); None on the CPU path."""
        if self.staged and not self.on_device:
            return None
        if not self.staged:
            return worker.profile(seed, variant, self.deadline)
        staged = self.stage(m.StageRequest(self._stage_side(worker, side), seed))
        out.mutated = out.mutated or staged.mutated
        out.changed_after_return = out.changed_after_return or staged.changed_after_return
        called, _, _ = self.call(worker, variant, staged, flush=False, profile=True)
        return called.profile

    def _seeds(self) -> list[int]:
        return self.samples.take(self.warmup + self.block)

    def reference_blocks(self, count: int) -> list[float]:
        """Medians of `count` eager blocks of the reference alone (before the candidate starts, after it died)."""
        import statistics
        scratch = Collected()
        medians = []
        for _ in range(count):
            samples: dict[str, list[float]] = {}
            self._block("reference", EAGER, self._seeds(), scratch, samples)
            medians.append(statistics.median(samples[EAGER]))
        return medians

    # ------------------------------------------------------------ rounds

    def rounds(self, candidate: CandidateClient, rule: StopRule) -> Collected:
        """Rounds until the speedup's CI reaches the target, the time cap or max_rounds."""
        from harness.run.paired import round_ratio
        self.candidate = candidate
        self.attach(candidate)
        self._nice_at_start = {c.worker.proc.pid: scheduling.lowest_nice(c.worker.proc.pid) for c in self._sides()}
        out = Collected()
        # `profiles` round halves drawn among those every pair runs, after whose blocks each side profiles one
        # call: the candidate cannot tell which of its calls will be looked at, nor that one was until it ran
        halves = [(r, h) for r in range(rule.min_rounds) for h in (0, 1)]
        draw = random.Random(self.samples.next())
        self._profile_at = set(draw.sample(halves, min(self.profiles, len(halves))))
        # the timed samples whose outputs are checked whole, in either half of a round (the reference keeps the
        # sample's seed when the candidate's output is read, and recomputes its own output on those inputs), spread
        # over the whole pair (full_check_samples): no half, block or sample is one a candidate can count on to be
        # read at points only
        full_at = full_check_samples(draw, rule.min_rounds, rule.max_rounds, 2 * self.block)
        metered = {side: c for side, c in (("candidate", self.candidate), ("reference", self.executor))
                   if c is not None and self.device == "cpu"}
        meters = {side: cores.Meter.start(c.worker) for side, c in metered.items()}
        per_sample = {side: found for side, c in metered.items() if (found := cores.PerSample.of(c.worker))}
        self._per_sample = {metered[side]: found for side, found in per_sample.items()}
        started = time.monotonic()
        order = [("reference", v) for v in self.variants] + [(CANDIDATE, CANDIDATE)]
        ratios: list[float] = []
        while True:
            samples: dict[str, list[float]] = {}
            forward, backward = self._seeds(), self._seeds()
            r = len(out.rounds)
            if r < rule.min_rounds and likely_last(out.seconds, r, rule):     # cut by time before the rounds
                top_up(full_at, r, range(2 * self.block), FULL_CHECKS, draw)     # every pair was meant to run
                top_up(self._profile_at, r, (0, 1), self.profiles, draw)
            timed = forward[self.warmup:] + backward[self.warmup:]       # a round's counted samples, in order
            self.full_seeds = {timed[i] for (fr, i) in full_at if fr == r}
            for side, variant in order:
                self._block(side, variant, forward, out, samples, profile=(r, 0) in self._profile_at)
            for side, variant in reversed(order):
                self._block(side, variant, backward, out, samples, profile=(r, 1) in self._profile_at)
            self.full_seeds = set()
            out.rounds.append(samples)
            ratios.append(round_ratio(samples[EAGER], samples[CANDIDATE]))
            out.seconds = time.monotonic() - started
            stop, noisy = should_stop(ratios, out.seconds, rule)
            if stop:
                out.noisy = noisy
                out.cores = {side: meter.cores() for side, meter in meters.items()} or None
                out.cores_counted = cores.source(meters)
                out.sample_cores = {side: found.median() for side, found in per_sample.items()} or None
                for found in per_sample.values():
                    found.finish()
                out.stopped_work = {side: found.stopped_share() for side, found in per_sample.items()} or None
                self._per_sample = {}
                if self.staged:
                    self._staged_end(out)
                return out


def full_check_samples(draw: random.Random, min_rounds: int, max_rounds: int,
                       per_round: int) -> set[tuple[int, int]]:
    """(round, counted sample of the round: 0 .. per_round - 1, the forward half's then the backward half's) of the
    timed samples checked whole: FULL_CHECKS among the first `min_rounds` rounds (every pair runs those), then one in
    each window that doubles in length after them ([m, 2m), [2m, 4m), ...) up to `max_rounds`, each at a round and
    sample drawn from the parent's secret. However long a pair runs, a whole check may come at any time and in either
    half, and there are only about log2(max_rounds / m) more of them: a candidate exact only where it expects to be
    read whole has nowhere to stop being exact (a red team's candidate wrong in every backward half read `ok` while
    the checks came from forward halves only)."""
    m = max(1, min_rounds)
    first = [(r, i) for r in range(m) for i in range(per_round)]
    chosen = set(draw.sample(first, min(FULL_CHECKS, len(first))))
    start = m
    while start < max_rounds:
        end = min(2 * start, max_rounds)
        chosen.add((draw.randrange(start, end), draw.randrange(per_round)))
        start = end
    return chosen


def likely_last(elapsed: float, done: int, rule: StopRule) -> bool:
    """Whether the round about to start (after `done` rounds in `elapsed` seconds) is likely a pair's last: the time
    cap comes within it at the rounds' mean length so far (paired.should_stop), or max_rounds does."""
    if done + 1 >= rule.max_rounds:
        return True
    return done > 0 and elapsed + 1.2 * elapsed / done >= rule.max_seconds


def top_up(chosen: set[tuple[int, int]], r: int, places: range | tuple[int, ...], wanted: int,
           draw: random.Random) -> None:
    """Round `r` is likely a pair's last, before the end of the rounds its checks were drawn among (the whole
    checks, the profiled calls: among the min_rounds every pair runs, but for the time cap). Add to `chosen`, the
    (round, place) drawn, as many places in round `r` as are missing for `wanted` among the rounds up to it,
    drawn from the parent's secret `draw` (`places`: a round's counted samples, or its two halves). So a pair cut
    short by the time cap still checks outputs whole and profiles calls, in a round the candidate cannot tell
    from another: when the cap comes is the parent's clock's."""
    held = {x for x in chosen if x[0] <= r}
    free = [p for p in places if (r, p) not in held]
    for place in draw.sample(free, min(max(0, wanted - len(held)), len(free))):
        chosen.add((r, place))


def ratios(out: Collected, variant: str) -> list[float]:
    from harness.run.paired import round_ratio
    return [round_ratio(r[variant], r[CANDIDATE]) for r in out.rounds if r.get(variant) and r.get(CANDIDATE)]


def fastest(out: Collected, variants: list[str]) -> str | None:
    """The variant with the smallest median over the pair (the strongest baseline)."""
    import statistics
    timed = [(statistics.median(out.samples(v)), v) for v in variants if out.samples(v)]
    return min(timed)[1] if timed else None
