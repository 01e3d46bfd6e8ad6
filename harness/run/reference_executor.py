"""The reference's executor: the process that runs the reference's eager samples (README, Hardening).

On a staged path (the CPU always; the GPU with timing.staged_gpu) the reference worker draws every sample's inputs,
writes them into the arena of the side that runs it, and checks them after the call. If it also ran its own timed
calls, its call would follow its own staging work in the same process, while the candidate's follows a flush and
nothing else of its own: on the 2-core CI box that alone read identical code 8-18% slower on the candidate's side
(docs/measurements.md, "The reference's executor"). So the reference's eager call runs in a process of its own,
started, confined and served exactly as the candidate's (harness.worker.candidate, role `executor`), with the
problem's own Model built as a candidate's ModelNew is and the reference's parameters copied in. The two timed
processes then differ by their code alone; the reference worker stages, checks and keeps its own process for
what only trusted code may do (trials' expected outputs, float64, full checks, torch.compile baselines).

One executor a pair, fresh like the candidate's worker, taken from the slot's spares (role `executor`) and closed
after the pair's last reference blocks. On the CPU it is loaded before the reference's first block. On the GPU its
job goes out just before the candidate's (`begin`): it loads, and warms itself with one call where the problem is
small, beside the candidate's load and trials, and is attached once they pass (harness.run.evaluate._executor_beside).
Its start, which cost a pair about 0.9 s before the candidate's on an H200, so runs beside it instead
(docs/measurements.md, eighteenth session).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.run import scheduling
from harness.run.clients import CandidateClient, CandidateFailed
from harness.run.workerproc import SpareWorkers
from harness.shared import messages as m

ROLE = "executor"


class ExecutorFailed(Exception):
    """The executor could not build the problem's Model, or its call of it failed (one line): the harness's fault,
    never the candidate's."""


class ExecutorClient(CandidateClient):
    """The executor's client: a candidate worker's requests, but its Failed is ExecutorFailed, not the candidate's
    CandidateFailed, so that the reference's own code failing in it is never read as the candidate's failure (the
    pair ends `crashed`, a harness fault, where evaluate.run_pair meets it)."""
    NAME = "reference's executor"
    threads: dict[int, tuple[int, int]] | None = None     # its threads' scheduling when its job was sent (begin)

    def parsed(self, data: dict[str, Any], *replies: type) -> Any:
        try:
            return super().parsed(data, *replies)
        except CandidateFailed as failed:
            raise ExecutorFailed(f"the reference's executor: {failed.reply.status}: {failed.reply.error}") from None


def job(problem_path: str, device: str, seed: int, timing: m.TimingSpec, scratch: str, state_path: str,
        defenses: bool, precision: str | None, hide: list[str], output_orders: list | None = None,
        warm: bool = False) -> m.CandidateJob:
    """The executor's job: the problem as the candidate file (its Model, not a ModelNew), no trials, staged calls;
    the rest as the candidate's job says it (harness.run.evaluate.candidate_job), the outputs' layouts included:
    its calls go through the same check of them as the candidate's (which finds nothing to copy). `warm`: one call
    of its own before it says Loaded (CandidateJob.warm)."""
    return m.CandidateJob(problem_path, problem_path, device, seed, 0, timing, scratch, state_path, defenses,
                          precision, hide=hide, executor=True, output_orders=output_orders, warm=warm)


def begin(spares: SpareWorkers, log_path: Path, work: m.CandidateJob) -> ExecutorClient:
    """The executor worker, its job sent and not waited for: it builds its model while the caller goes on (the
    staged GPU path: beside the candidate's load and trials); `loaded` reads its answer."""
    executor = ExecutorClient(spares.take(ROLE, log_path))
    try:
        executor.threads = scheduling.settings(executor.worker.proc.pid)    # before any candidate code exists
        executor.start(work)
    except BaseException:
        executor.worker.close()
        raise
    return executor


def loaded(executor: ExecutorClient, deadline: float) -> ExecutorClient:
    """`executor` once it said it built its model. ExecutorFailed where it said it could not, WorkerExit where it
    ended or said anything else; the worker is closed then."""
    try:
        reply = executor.trial_reply(deadline, m.Loaded)
        if isinstance(reply, m.Failed):
            raise ExecutorFailed(f"the reference's executor: {reply.status}: {reply.error}")
        if isinstance(reply, m.HarnessError):
            raise ExecutorFailed(f"the reference's executor: {reply.error}")
    except BaseException:
        executor.worker.close()
        raise
    return executor
