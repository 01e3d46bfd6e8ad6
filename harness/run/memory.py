"""The parent's side of the GPU memory budget (harness.shared.memplan): a problem's pair plan from what its reference
reported in `ready`, the records of pairs the harness could not fit (`harness_oom`: `skipped`, the candidate not
blamed), and each side's peak for the record (`worker.memory`). evaluate.ReferenceSide and run_pair call these."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from harness.core import flags
from harness.core.config import Config
from harness.results.records import RecordDraft, Status, finish
from harness.run import verdicts
from harness.run.clients import CandidateFailed, ReferenceClient, Timed
from harness.run.workerproc import Worker, WorkerExit
from harness.shared import memplan
from harness.shared import messages as m

OOM_MARK = "kb-harness: harness_oom: "      # the line a reference worker leaves in its log when it runs out of memory


def plan(reference: ReferenceClient, ready: m.Ready, device: str, cfg: Config,
         graph: bool) -> memplan.PairPlan | None:
    """The pairs' split of the device memory (memplan.plan_pair) from `ready`'s `memory` (`graph`: the problem's
    mode is graph); the reference is told its share (BudgetRequest), the candidate gets the rest in its job. None on
    the CPU path, or where the report lacks a figure. A plan with `error` set: the pairs cannot fit and are skipped
    (nothing is sent)."""
    memory = ready.memory
    needs = memplan.Needs.from_report(memory) if device != "cpu" else None
    budget = memory.get("budget_bytes") if isinstance(memory, dict) else None
    if needs is None or not isinstance(budget, int) or isinstance(budget, bool):
        return None
    contexts = memory.get("cuda_contexts") if isinstance(memory.get("cuda_contexts"), int) else 2
    found = memplan.plan_pair(budget, contexts, needs, cfg.timing.graph_calls if graph else 0,
                              fp64=cfg.defenses, staged=cfg.timing.staged_gpu)
    if not found.error:
        reference.budget(found.reference, found.fp64, time.monotonic() + cfg.reference_timeout)
    return found


def out_of_budget(worker: Worker) -> str | None:
    """The `harness_oom: ...` line a reference worker that ran out of its memory share left in its log before it
    exited (harness.worker.reference), or None."""
    for line in reversed(worker.log_tail(4000).splitlines()):
        if line.startswith(OOM_MARK):
            return line[len("kb-harness: "):].strip()[:400]
    return None


def skipped(record: RecordDraft, line: str) -> RecordDraft:
    """A pair the harness could not fit in the memory budget: `skipped`, flagged `harness_oom`, `line` the error."""
    finish(record, Status.SKIPPED, line)
    verdicts.flag(record, flags.HARNESS_OOM, line)
    return record


def reference_lost(record: RecordDraft, worker: Worker, error: str) -> None:
    """The reference worker is gone mid-pair: skipped with `harness_oom` where it ran out of its memory share, else
    `crashed` with `error`."""
    line = out_of_budget(worker)
    if line is None:
        finish(record, Status.CRASHED, error)
    else:
        skipped(record, line)


@dataclass(frozen=True)
class Seen:
    """What one worker's allocator saw so far (MemoryRequest): its peak (torch.cuda.max_memory_allocated), and how
    often it met its cap: `alloc_retries` (it freed its cache and asked again: a device-wide synchronisation, which
    slows what is being timed) and `ooms` (it gave up; a caller such as cuDNN may have caught it and chosen a plan
    with a smaller workspace). The candidate's count its whole life, the reference's since its share for the pairs
    was applied. `arena`: the most device bytes the staged inputs' arena held at once in that worker, apart from
    its peak (MemoryPeak.arena_bytes: the reference allocates it, 0 where it held none); None where not reported."""
    peak: int | None
    alloc_retries: int | None = None
    ooms: int | None = None
    arena: int | None = None

    def record(self, side: str) -> dict[str, Any]:
        return {f"{side}_peak_bytes": self.peak, **({} if self.alloc_retries is None else {
            f"{side}_alloc_retries": self.alloc_retries, f"{side}_ooms": self.ooms})}


def peak(side: Timed, device: str) -> Seen | None:
    """A worker's allocator figures so far (MemoryRequest), or None."""
    if device == "cpu" or not side.worker.alive():
        return None
    try:
        reply = side.memory(time.monotonic() + 30)
    except (WorkerExit, CandidateFailed):
        return None
    value, retries, ooms, arena = reply.peak_allocated_bytes, reply.alloc_retries, reply.ooms, reply.arena_bytes
    counts = all(_count(v) for v in (retries, ooms))
    return Seen(value if _count(value) else None, retries if counts else None, ooms if counts else None,
                arena if _count(arena) else None)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def record(ready: m.Ready | None, device: str, found: memplan.PairPlan | None, candidate: Seen | None,
           reference_seen: Seen | None) -> dict[str, Any] | None:
    """`worker.memory`: each side's allocator peak and retries, the problem's eager peak, the most the staged inputs'
    arena held at once (`arena_peak_bytes`, where the reference reported it: apart from both peaks, and counted on
    the candidate's side, whose inputs it holds), and the plan `found` (budget, shares, the planned arena, fp64)."""
    memory = ready.memory if ready is not None else None
    if not isinstance(memory, dict) or device == "cpu":
        return None
    arena = reference_seen.arena if reference_seen is not None else None
    return {"eager_peak_bytes": memory.get("eager_peak_bytes"),
            **(reference_seen or Seen(None)).record("reference"), **(candidate or Seen(None)).record("candidate"),
            **({} if arena is None else {"arena_peak_bytes": arena}), **(found.record() if found else {})}
