"""The run writes verdicts into the record: the flags harness.run.defenses raises, with their reasons, and the
figures behind them, each into the record part it fills. The defenses decide; only this module, on the run's side,
writes what they decided."""
from __future__ import annotations

from harness.core.flags import Flag
from harness.results import parts
from harness.results.records import RecordDraft, add_flag
from harness.run.defenses import Verdict


def flag(record: RecordDraft, which: Flag, detail: str | None = None) -> None:
    """Put `which` on the record, with `detail` (default: the flag's meaning) as its flag_details sentence."""
    add_flag(record, which.name)
    record.set_flag_detail(which.name, which.meaning if detail is None else detail)


def write(record: RecordDraft, verdict: Verdict) -> None:
    """`verdict` into the record: each figure into its part (one the record does not have yet is left alone) and its
    flags, in the order the checks of AFTER_ROUNDS fill them: the record writes its parts that come late (kernels,
    flag_details, performance) in the order they were set, so kernels first and performance last, as before."""
    if verdict.kernels is not None:
        record.kernels = parts.Kernels(**verdict.kernels)
    if record.timing is not None and verdict.interference is not None:
        record.timing.interference = parts.Interference(**verdict.interference)
    if record.timing is not None and verdict.consistency is not None:
        record.timing.consistency = parts.Consistency(**verdict.consistency)
    if record.correctness is not None and verdict.timed_outputs is not None:
        record.correctness.timed_outputs_checked, record.correctness.timed_outputs_full_checked = verdict.timed_outputs
    for raised in verdict.raised:
        flag(record, raised.flag, raised.detail)
    if verdict.performance is not None:
        record.performance = parts.Performance(**verdict.performance)
