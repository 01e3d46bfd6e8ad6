"""One pair under Nsight Compute (`run_eval.py profile`), from the parent's side.

The reference worker and the candidate worker are the run's own (evaluate.ReferenceSide, the CandidateJob run_pair
sends: the same job, the same confinement), each started under `ncu` (harness.run.ncu.launch_argv: the worker's
command line goes after ncu's, workerproc.Worker's `wrapper`) with a report of its own. ncu profiles nothing until
the worker's cudaProfilerStart: each side is asked for one call (messages.NcuRequest: warm-up calls, then one
call between cudaProfilerStart and cudaProfilerStop), so each report holds that call's kernels and no others.

  1. the reference worker starts (problem, expected outputs, memory plan) and makes its one call;
  2. the candidate worker starts, runs its correctness trials (the reference checks them: the record says whether
     the profiled candidate is correct) and makes its one call;
  3. both are told to exit; each ncu writes its report once its worker has ended;
  4. each report is read back (ncu --import, harness.run.ncu.read_report) into the record's `profile` part.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from harness.core.config import Config
from harness.core.discover import Pair
from harness.results.parts import Gpu, Precision, Profile, ProfileSide
from harness.results.records import RecordDraft, Status, exit_status, finish
from harness.run import ncu
from harness.run.schedule import decided_without_running, pair_record
from harness.run.evaluate import (PairContext, ReferenceSide, candidate_failed, candidate_job, last_line, slug,
                                  trials)
from harness.run.clients import CandidateClient, CandidateFailed, Timed
from harness.run.interleave import CANDIDATE, EAGER
from harness.run.workerproc import Worker, WorkerExit
from harness.shared import messages as m

NCU_WAIT_S = 300.0          # how long ncu may take to write its report once its worker has ended


@dataclass
class ProfileRun:
    """What every pair of one `profile` command shares."""
    pc: PairContext
    ncu: ncu.Ncu
    folder: Path            # results/profile-<id>/: the reports, the records, logs/
    scratch: Path           # the workers' exchange folder (removed at the end)
    env: dict[str, str]     # the GPU slot's worker environment, with ncu's variables
    gpu: Gpu | None
    run_id: str
    warmup: int = 3
    device: str = "cuda:0"  # as the workers see it (the slot's GPU is their only one); "cpu" in the CPU tests


class _UnderNcu:
    """What evaluate.ReferenceSide takes from SpareWorkers: `take` starts a worker under ncu writing `report`, its
    log (ncu's output too) the pair's own; no spares (`enabled` False: a spare would be a third CUDA context in the
    memory plan)."""

    enabled = False

    def __init__(self, run: ProfileRun, report: Path):
        self.run, self.report = run, report
        self.worker: Worker | None = None

    def take(self, role: str, log_path: Path) -> Worker:
        log = self.run.pc.log_dir / self.report.name.replace(".ncu-rep", ".log")
        self.worker = Worker(role, self.run.env, log, wrapper=ncu.launch_argv(self.run.ncu.path, self.report))
        return self.worker


def report_paths(run: ProfileRun, pair: Pair) -> dict[str, Path]:
    """Where the pair's two reports go: <folder>/<problem>__<candidate>.{reference,candidate}.ncu-rep."""
    stem = slug(pair.candidate.id)
    return {side: run.folder / f"{stem}.{side}.ncu-rep" for side in ("reference", "candidate")}


def record_path(run: ProfileRun, pair: Pair) -> Path:
    """Where the pair's record goes: <folder>/<problem>__<candidate>.json, beside its reports."""
    return run.folder / f"{slug(pair.candidate.id)}.json"


def profile_pair(pair: Pair, run: ProfileRun) -> RecordDraft:
    """The pair's record, with its `profile` part (each side's kernels, or why there are none)."""
    record = pair_record(pair, run.run_id, run.device, run.pc.builds)
    record.gpu = run.gpu
    reports = report_paths(run, pair)
    sides: dict[str, ProfileSide | None] = {"reference": None, "candidate": None}
    record.profile = Profile(["ncu", *ncu.options()], run.ncu.version, run.warmup, None, None)
    if decided_without_running(pair, run.pc.builds, record) is not None:
        return record
    problem_dir = run.scratch / slug(pair.problem_id)
    problem_dir.mkdir(parents=True, exist_ok=True)
    reference_launch = _UnderNcu(run, reports["reference"])
    reference = ReferenceSide(pair, run.pc, run.device, problem_dir, reference_launch)
    candidate_launch = _UnderNcu(run, reports["candidate"])
    try:
        if reference.error is not None:
            reference.failed(record)
        else:
            _pair(pair, run, record, reference, candidate_launch, problem_dir)
    except BaseException:                               # Ctrl-C, a harness fault: no report is waited for
        for launch in (candidate_launch, reference_launch):
            if launch.worker is not None:
                launch.worker.kill()
                launch.worker.close(wait_s=1)
        raise
    for launch in (candidate_launch, reference_launch):
        if launch.worker is not None:
            launch.worker.close(wait_s=NCU_WAIT_S)      # ncu writes the report once its worker has ended
    for side, launch in (("reference", reference_launch), ("candidate", candidate_launch)):
        if launch.worker is not None:
            sides[side] = read_side(run, launch.report, launch.worker.log_tail(20000))
    record.profile = dataclasses.replace(record.profile, **sides)
    _say_side_errors(record)
    return record


def _pair(pair: Pair, run: ProfileRun, record: RecordDraft, reference: ReferenceSide, launch: _UnderNcu,
          problem_dir: Path) -> None:
    """Steps 1 and 2 of the module's docstring, into `record` (its status and error)."""
    cfg = run.pc.cfg
    try:
        _one_call(reference.client, EAGER, pair, run, time.monotonic() + cfg.reference_timeout)
    except WorkerExit as exc:
        finish(record, Status.CRASHED, f"reference side: {exc}; last output: {last_line(reference.worker.log_tail())}")
        return
    candidate = _start_candidate(pair, run, reference, launch, problem_dir)
    worker = candidate.worker
    deadline = time.monotonic() + cfg.timeout
    try:
        outputs, in_place = trials(candidate, record, reference, cfg.trials, deadline)
        failing = [r for r in reference.checks(outputs.files, in_place) if not r.ok]
        ready = reference.ready
        record.precision = Precision(cfg.precision, ready.dtype, ready.dtype_source)
        _one_call(candidate, CANDIDATE, pair, run, deadline)
        if failing:
            finish(record, Status.INCORRECT, f"{failing[0].label}: {failing[0].reason}")
        else:
            finish(record, Status.OK)
    except CandidateFailed as failed:
        candidate_failed(record, failed.reply, run.device)
    except WorkerExit as exc:
        if exit_status(exc.kind) is Status.TIMEOUT:
            finish(record, Status.TIMEOUT, f"killed after the pair timeout of {cfg.timeout:g} s")
        else:
            finish(record, exit_status(exc.kind), f"{exc.detail}; last output: {last_line(worker.log_tail())}")


def _start_candidate(pair: Pair, run: ProfileRun, reference: ReferenceSide, launch: _UnderNcu,
                     problem_dir: Path) -> CandidateClient:
    """The candidate worker, under ncu, with the job run_pair sends (harness.run.evaluate)."""
    pair_dir = problem_dir / slug(pair.candidate.id.rsplit("/", 1)[-1])
    pair_dir.mkdir(parents=True, exist_ok=True)
    candidate = CandidateClient(launch.take("candidate", run.pc.log_dir / f"{slug(pair.candidate.id)}.log"))
    candidate.start(candidate_job(pair, run.pc, reference, run.device, pair_dir))
    return candidate


def _one_call(side: Timed, variant: str, pair: Pair, run: ProfileRun, deadline: float) -> m.NcuCalled:
    """NcuRequest to `side` for `variant`: its NcuCalled (CandidateFailed for the candidate's Failed). Both sides get
    the same inputs (the seed drawn for the pair)."""
    seed = run.pc.seed.stream("profile", *pair.key).take(1)[0]
    return side.ncu(seed, variant, run.warmup, deadline)


def read_side(run: ProfileRun, report: Path, log: str) -> ProfileSide:
    """One side's kernels from its report; where ncu wrote none, or none with a kernel, the reason (ncu's own line
    from the worker's log where it gave one). Counters not permitted end the command (ncu.ProfileUnavailable)."""
    said = ncu.diagnose(log)
    if said == ncu.NO_COUNTERS:
        raise ncu.ProfileUnavailable(said)
    if not report.is_file():
        return ProfileSide(None, [], said or "ncu wrote no report (the worker ended before its profiled call?)")
    try:
        kernels = ncu.read_report(run.ncu.path, report)
    except ValueError as exc:
        return ProfileSide(str(report), [], str(exc))
    return ProfileSide(str(report), kernels, None if kernels else said or "ncu: no kernels in the report")


def _say_side_errors(record: RecordDraft) -> None:
    """A pair whose workers did their part but whose profile has a side without rows says why in `error`."""
    if record.status is not Status.OK:
        return
    for side in ("reference", "candidate"):
        got = getattr(record.profile, side)
        if got is not None and got.error:
            record.error = f"profile: {side}: {got.error}"
            return


def profile_config(cfg: Config) -> Config:
    """The run's config for profiling: no torch.compile baselines (only eager and the candidate are profiled)."""
    return dataclasses.replace(cfg, timing=dataclasses.replace(cfg.timing, compile_modes=()))
