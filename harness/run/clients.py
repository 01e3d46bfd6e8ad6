"""The parent's side of the workers' protocol: one client per worker role, each method one request of
harness.shared.messages, sent, and its reply read as the dataclass it must be. A reply of another shape is a protocol
fault (WorkerExit, kind "protocol"), never a crash of the parent; a candidate's Failed is CandidateFailed.

A new request type touches messages.py, the worker's handler and its client here: no other file.

  Client           any worker: a request sent, its reply read and checked.
  Timed            what every worker that times calls serves (harness.worker.sampler, harness.worker.arena):
                   samples, staged calls, profiled calls, its mode and size, its allocator's peak.
  ReferenceClient  the reference worker (harness.worker.reference): its job, the checks, the staging.
  CandidateClient  a candidate worker (harness.worker.candidate), and the reference's executor, which is one.
  FlusherClient    the flusher (harness.worker.flusher).
  BuildClient, LintClient, CeilingsClient
                   the workers of one job and one reply (harness.worker.build, .lint, .ceilings).

Every method takes the deadline of its reply: the pair's, or a time of its own for the requests that come after it.
The client holds its Worker (`worker`) for what is not a message: stopping, resuming, its log.
"""
from __future__ import annotations

import time
from typing import Any

from harness.run.workerproc import Worker, WorkerExit
from harness.shared import messages as m

_RAW = getattr(time, "CLOCK_MONOTONIC_RAW", None)


def parent_clock_ns() -> int:
    """The parent's clock around a sample: CLOCK_MONOTONIC_RAW, which the kernel never slews, where there is one.
    CLOCK_MONOTONIC (perf_counter's) follows the machine's tick and frequency, which any process holding CAP_SYS_TIME
    may change for everyone (adjtimex): a red team's candidate slowed it by 8-10% while its calls ran. Workers hold no
    capability now (harness.worker.sandbox), and this clock would not follow even if one did."""
    return time.clock_gettime_ns(_RAW) if _RAW is not None else time.perf_counter_ns()


class CandidateFailed(Exception):
    """The candidate worker reported a failure (its code raised, or it could not run its trials)."""

    def __init__(self, reply: m.Failed):
        super().__init__(reply.error)
        self.reply = reply


class Client:
    """Any worker. `name`: what a protocol fault says sent the reply (the role's NAME unless given)."""
    FAILS = False                       # whether it may answer a request with Failed (a candidate's code raised)
    NAME = "worker"

    def __init__(self, worker: Worker, name: str | None = None):
        self.worker, self.name = worker, name or self.NAME

    def ask(self, request: Any, deadline: float, *replies: type) -> Any:
        """`request` sent; its reply, as one of `replies`."""
        self.worker.send(m.wire(request))
        return self.read(deadline, *replies)

    def read(self, deadline: float, *replies: type) -> Any:
        """The worker's next message, as one of `replies`."""
        return self.parsed(self.worker.recv(deadline), *replies)

    def parsed(self, data: dict[str, Any], *replies: type) -> Any:
        """`data` as one of `replies`; CandidateFailed for a Failed (where the role may send one), WorkerExit for
        anything else."""
        try:
            answer = m.parse_reply(data, *replies, *((m.Failed,) if self.FAILS else ()))
        except m.ProtocolError as exc:
            kinds = " or ".join(repr(cls.KIND) for cls in replies)
            raise WorkerExit("protocol", None, f"the {self.name} sent a malformed {kinds} reply: {exc}") from None
        if isinstance(answer, m.Failed):
            raise CandidateFailed(answer)
        return answer


class Timed(Client):
    """A worker that times calls: the reference, a candidate, the reference's executor."""

    def sample(self, variant: str, seed: int, deadline: float) -> m.SampleResult:
        return self.ask(m.SampleRequest(variant, seed), deadline, m.SampleResult)

    def profile(self, seed: int, variant: str, deadline: float) -> m.Profile | None:
        return self.ask(m.ProfileRequest(seed, variant), deadline, m.ProfileResult).profile

    def ncu(self, seed: int, variant: str, warmup: int, deadline: float) -> m.NcuCalled:
        return self.ask(m.NcuRequest(seed, variant, warmup), deadline, m.NcuCalled)

    def mode(self, mode: str, replays: int, graph_calls: int, deadline: float) -> m.ModeSet:
        return self.ask(m.ModeRequest(mode, replays, graph_calls), deadline, m.ModeSet)

    def size(self, size: str, deadline: float) -> m.SizeSet:
        return self.ask(m.SizeRequest(size), deadline, m.SizeSet)

    def memory(self, deadline: float) -> m.MemoryPeak:
        return self.ask(m.MemoryRequest(), deadline, m.MemoryPeak)

    def call(self, request: m.CallRequest, deadline: float) -> tuple[m.Called, float]:
        """The staged call on the parent's clock: (its reply, its ms). The worker is woken inside the clock, so that
        nothing it does once it can see its inputs goes untimed, and frozen at its reply, so that work it left
        running is inside the clock too; it is left stopped. The reply is read and checked outside the clock."""
        message = m.wire(request)
        started = parent_clock_ns()               # the parent's clock: out of the workers' reach
        self.worker.wake()
        self.worker.send(message)
        data = self.worker.recv(deadline)
        self.worker.freeze()
        ms = (parent_clock_ns() - started) / 1e6
        self.worker.pause()
        return self.parsed(data, m.Called), ms


class ReferenceClient(Timed):
    """The reference worker of a problem: trusted code, which never sends Failed."""
    NAME = "reference"

    def start(self, job: m.ReferenceJob, deadline: float) -> m.Ready | m.Error | m.HarnessError:
        """The job sent; its first reply: ready, or why the problem cannot be served."""
        return self.ask(job, deadline, m.Ready, m.Error, m.HarnessError)

    def ask_derived(self, flops: bool) -> None:
        """DeriveRequest sent; its reply is read by `derived`, before any other request's (one pipe, in order)."""
        self.worker.send(m.wire(m.DeriveRequest(flops)))

    def derived(self, deadline: float) -> m.Derived:
        return self.read(deadline, m.Derived)

    def verify(self, files: list[m.TrialFile], deadline: float) -> list[m.FileCheck]:
        return self.ask(m.VerifyRequest(files), deadline, m.Verified).results

    def budget(self, share_bytes: int | None, fp64: str | None, deadline: float) -> m.BudgetSet:
        return self.ask(m.BudgetRequest(share_bytes, fp64), deadline, m.BudgetSet)

    def health(self, deadline: float) -> bool:
        return self.ask(m.HealthRequest(), deadline, m.Health).ok

    def arena(self, path: str, side: str, deadline: float) -> m.ArenaSet:
        return self.ask(m.ArenaRequest(path, side), deadline, m.ArenaSet)

    def stage(self, request: m.StageRequest, deadline: float) -> m.Staged:
        return self.ask(request, deadline, m.Staged)

    def check(self, check_seed: int, slots: list[int], deadline: float) -> m.CheckResult:
        return self.ask(m.CheckRequest(check_seed, slots), deadline, m.CheckResult)

    def read_outputs(self, request: m.ReadRequest, deadline: float) -> m.ReadResult:
        return self.ask(request, deadline, m.ReadResult)

    def keep(self, check_seed: int, seed: int, slot: int, deadline: float) -> m.Kept:
        return self.ask(m.KeepRequest(check_seed, seed, slot), deadline, m.Kept)

    def peer_close(self, deadline: float) -> m.PeerClosed:
        return self.ask(m.PeerCloseRequest(), deadline, m.PeerClosed)


class CandidateClient(Timed):
    """A candidate worker (or the reference's executor, a worker of the same role): untrusted, and its code may
    raise (Failed)."""
    FAILS = True
    NAME = "candidate"

    def start(self, job: m.CandidateJob) -> None:
        """The job sent; its first reply is read by `trial_reply` or `loaded`."""
        self.worker.send(m.wire(job))

    def trial_reply(self, deadline: float, *expected: type) -> m.Outputs | m.TrialOut | m.Loaded | m.Failed:
        """Its next reply while it loads and runs its trials: one of `expected` (default: a trial's outputs where they
        lie, or all its trials' outputs), a Failed or a harness_error, returned as they are: the first one carries
        the sandbox's report for the record."""
        try:
            return m.parse_reply(self.worker.recv(deadline), *(expected or (m.TrialOut, m.Outputs)), m.Failed,
                                 m.HarnessError)
        except m.ProtocolError as exc:
            raise WorkerExit("protocol", None, f"the {self.name} sent {exc}") from None

    def next_trial(self) -> None:
        """GPU: its last TrialOut was compared; it runs the next trial (its reply: trial_reply)."""
        self.worker.send(m.wire(m.NextRequest()))


class FlusherClient(Client):
    """The flusher of a slot (harness.worker.flusher)."""
    NAME = "flusher"

    def begin(self, job: m.FlusherJob) -> None:
        """The job sent; its reply (FlusherReady, once its buffer and, on the GPU, its CUDA context exist) is read by
        `ready`, so that its start can run beside other work."""
        self.worker.send(m.wire(job))

    def ready(self, deadline: float) -> m.FlusherReady:
        return self.read(deadline, m.FlusherReady)

    def start(self, job: m.FlusherJob, deadline: float) -> m.FlusherReady:
        self.begin(job)
        return self.ready(deadline)

    def flush(self, hot: bool, deadline: float) -> float:
        """Its buffer written now (`hot`: a few bytes only); the ms it took, as it reports them."""
        return self.ask(m.FlushRequest(hot), deadline, m.Flushed).ms


class BuildClient(Client):
    """A build worker (harness.worker.build): one job, one reply."""
    NAME = "build worker"

    def build(self, job: m.BuildJob, deadline: float) -> m.Built | m.HarnessError:
        """What it built, or the harness fault it hit."""
        return self.ask(job, deadline, m.Built, m.HarnessError)


class LintClient(Client):
    """A lint worker (harness.worker.lint): one job, one reply."""
    NAME = "lint worker"

    def lint(self, job: m.LintJob, deadline: float) -> m.LintReport | m.Error | m.HarnessError:
        """The problem's lint report, or why its problem could not be linted (Error), or the harness fault."""
        return self.ask(job, deadline, m.LintReport, m.HarnessError, m.Error)


class CeilingsClient(Client):
    """The ceilings worker (harness.worker.ceilings): one job, one reply."""
    NAME = "ceilings worker"

    def measure(self, job: m.CeilingsJob, deadline: float) -> m.Ceilings:
        return self.ask(job, deadline, m.Ceilings)
