"""CPU path: how many cores each side's processes used at once while timed. Both sides run with `cpu_threads`
threads (config) on the same cores, and each is stopped while the other is timed, so a candidate that starts more
threads (torch.set_num_threads, a pool of its own) or helper processes has the other side's cores to itself and
reads faster for using more hardware (a red team read 1.56-1.70x with two threads on two cores). The parent
reads the CPU time the kernel counted for every process of a worker at the start and the end of the rounds, and
divides by the seconds the worker was not stopped (harness.run.workerproc.Worker.awake_seconds): the cores it used on
average while awake. The count is the worker's cgroup's (harness.shared.cpugroup: every process that was ever in
it, however it was reaped) where the worker has one, else its process tree's (user and system time, and that of
the children each process reaped: a helper the kernel reaps itself, SIGCHLD ignored, is missed there).

Averaged over the rounds, a side's count can be watered down: its awake seconds include the uncounted warm-up
sample of each block and samples the block median ignores, so a candidate that sleeps there and runs two threads in
every other call read about one core (a red team's, 1.6-1.8x faster, `ok`). Where the worker has a cgroup (counted
to the microsecond) the parent also reads its CPU around each counted sample, from just before the side is woken
to just after it is frozen, over the parent's clock for that call (PerSample), and judges the median sample:
slept-through samples are a minority or they slow the median themselves."""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field

from harness.run.workerproc import Worker
from harness.shared import containment

MIN_AWAKE_S = 0.2           # fewer seconds awake than this: the kernel's 10 ms ticks (two of them: +/- 0.1 core) say too little
SLACK = 0.25                # cores beyond cpu_threads allowed (the worker's own request handling, the tick's error)
SAMPLE_SLACK = 0.1          # the same for the median sample (a cgroup's microseconds over a clock that brackets the
                            # whole time the side is awake: one thread reads at most 1)
MIN_SAMPLES = 8             # fewer counted samples than this: no median judged
MIN_WORK_S = 0.05           # less CPU than this in a side's calls and stops: its share done while stopped not judged
STOPPED_SHARE = 0.02        # more of the candidate's CPU work than this done while it was stopped, beyond the
                            # reference's share: work_while_stopped (honest one-thread sides read 0-0.35% on the 2-core
                            # box; a thread spinning in user space took 1.7-2.5 ms to take its stop there)
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


CGROUP, TREE = "cgroup", "process tree"      # what counted a side's CPU (`timing.cpu_cores_counted`)


def cpu_seconds(root: int) -> float | None:
    """CPU seconds the kernel counted for process `root` and every process of its tree (utime, stime, cutime,
    cstime: a reaped child's time is its parent's from then on), or None where /proc cannot say."""
    total, seen = 0, False
    for pid in containment.tree([root]):
        fields = containment.stat_fields(pid)
        try:
            total += sum(int(fields[k]) for k in (11, 12, 13, 14))    # proc(5) fields 14-17
            seen = True
        except (IndexError, ValueError):
            continue
    return total / _TICK if seen else None


def counted(worker: Worker, source: str) -> float | None:
    """`worker`'s CPU seconds so far, counted by `source` (CGROUP or TREE), or None where it cannot say."""
    if source == CGROUP:
        return worker.cpu_group.seconds() if worker.cpu_group is not None else None
    return cpu_seconds(worker.proc.pid)


@dataclass
class Meter:
    """One worker's CPU seconds and seconds awake when the rounds began, and what counted them (its cgroup where it
    has one, else its process tree)."""
    worker: Worker
    cpu: float | None
    awake: float
    source: str = TREE

    @classmethod
    def start(cls, worker: Worker) -> "Meter":
        grouped = counted(worker, CGROUP)
        if grouped is not None:
            return cls(worker, grouped, worker.awake_seconds(), CGROUP)
        return cls(worker, counted(worker, TREE), worker.awake_seconds(), TREE)

    def cores(self) -> float | None:
        """The cores the worker used on average while awake since start(), or None (too little time awake, or
        nothing to read)."""
        now = counted(self.worker, self.source)
        awake = self.worker.awake_seconds() - self.awake
        if self.cpu is None or now is None or awake < MIN_AWAKE_S:
            return None
        return round((now - self.cpu) / awake, 3)


def source(meters: dict[str, Meter]) -> str | None:
    """What counted the sides' CPU: CGROUP where every side's was its cgroup, else TREE (None: no meters)."""
    if not meters:
        return None
    return CGROUP if all(meter.source == CGROUP for meter in meters.values()) else TREE


@dataclass
class PerSample:
    """One worker's CPU in each of its timed samples, and while it was stopped between them. Around every staged call
    of the rounds (warm-ups too) its cgroup is read just before it is woken (begin) and just after it is frozen
    (add): a counted sample's CPU over the parent's clock for the call is its cores in that sample
    (interleave.Interleaver._sample). What the cgroup counted from one call's end to the next one's start, where the
    worker was not woken in between, is work done while it was stopped: a stop lands on a thread only when it
    returns to user space, so a copy or read the kernel is doing for it (a long `pread`, glibc's AIO thread, an
    io_uring worker) runs on outside the clock, and a thread spinning in user space runs until its stop lands (1.7-2.5
    ms on the 2-core box). An honest one-thread worker, waiting for its next request once it has replied, does next
    to none."""
    worker: Worker
    ratios: list[float] = field(default_factory=list)
    in_calls_s: float = 0.0         # CPU counted from each call's begin to its end
    stopped_s: float = 0.0          # CPU counted between one call's end and the next one's begin, not woken between
    _end: tuple[float, int] | None = None       # the last call's end: (CPU then, the worker's wakes then)

    @classmethod
    def of(cls, worker: Worker) -> "PerSample | None":
        """Where `worker` has a cgroup to read; else None (a process tree's count moves in 10 ms ticks)."""
        return cls(worker) if worker.cpu_group is not None else None

    def now(self) -> float | None:
        return self.worker.cpu_group.seconds() if self.worker.cpu_group is not None else None

    def begin(self) -> float | None:
        """Just before a call wakes the worker: its CPU count now (for add), what it did stopped since the last."""
        now = self.now()
        if now is not None and self._end is not None and self._end[1] == self.worker.wakes:
            self.stopped_s += max(0.0, now - self._end[0])
        self._end = None
        return now

    def add(self, before: float | None, bracket_ms: float, counted: bool = True) -> None:
        """A call whose CPU count was `before` when it began (begin()) and whose call the parent's clock read as
        `bracket_ms`; `counted`: a counted sample (its cores judged), not a block's warm-up."""
        after = self.now()
        if before is None or after is None:
            return
        self.in_calls_s += after - before
        self._end = (after, self.worker.wakes)
        if counted and bracket_ms > 0:
            self.ratios.append((after - before) / (bracket_ms / 1e3))

    def finish(self) -> None:
        """The rounds are over: what the worker did stopped since its last call counts too."""
        self.begin()

    def median(self) -> float | None:
        """The median sample's cores, or None with fewer than MIN_SAMPLES counted."""
        if len(self.ratios) < MIN_SAMPLES:
            return None
        return round(statistics.median(self.ratios), 3)

    def stopped_share(self) -> float | None:
        """The share of its CPU work done while stopped, or None under MIN_WORK_S of work in all."""
        total = self.in_calls_s + self.stopped_s
        return round(self.stopped_s / total, 4) if total >= MIN_WORK_S else None


def excess(cores: float | None, cpu_threads: int, slack: float = SLACK) -> bool:
    """Whether `cores` is more than `cpu_threads` allow."""
    return cores is not None and cores > max(1, cpu_threads) + slack
