"""Several process pairs for one pair (`timing.processes`, `--processes N`): the record that stands for them.

Each process pair is a whole measurement (a fresh reference worker for the problem, a fresh candidate worker, its own
samples and checks); two processes running the same code differ by a bias of their own that rounds inside one pair
cannot average away (harness.run.paired.combine). The first process pair whose record is not `ok` stands for the pair
(its error names which one it was); otherwise the first record stands, with the speedups and their CIs combined
over all of them and `timing.processes` listing each one's estimate."""
from __future__ import annotations

import copy
from typing import Any, Callable

from harness.core.numbers import number
from harness.results.jsonobj import ABSENT
from harness.results.parts import ProcessEstimate, ProcessKernels
from harness.results.records import RecordDraft
from harness.run.paired import Estimate, combine


def _estimate(value: Any, ci: Any, rounds: int) -> Estimate | None:
    if not isinstance(value, (int, float)) or not isinstance(ci, list) or len(ci) != 2 or value <= 0:
        return None
    return Estimate(float(value), float(ci[0]), float(ci[1]), rounds)


def _combined(records: list[RecordDraft], get: Callable[[RecordDraft], tuple[Any, Any]]) -> Estimate | None:
    """combine() over the records' estimates of one speedup, when every record has one."""
    found = [_estimate(*get(r), int(number(r.timing.rounds) or 0) if r.timing else 0) for r in records]
    return combine(found) if found and all(e is not None for e in found) else None


def _kernel_names(record: RecordDraft) -> ProcessKernels | None:
    """The kernels each side ran in this process pair's profiled calls: two processes that picked different
    library kernels for the same call read apart, and this shows it."""
    kernels = record.kernels
    if not kernels:
        return None
    return ProcessKernels(sorted(set(kernels.custom_kernels) | set(kernels.other_kernels)),
                          list(kernels.reference_kernels))


def _process(record: RecordDraft) -> ProcessEstimate:
    """One process pair's line in timing.processes (null where the record has no such key)."""
    return ProcessEstimate(record.speedup, _given(record.speedup_ci), _given(record.speedup_vs_compile),
                           _given(record.speedup_vs_compile_ci), record.timing.rounds, record.timing.seconds,
                           _kernel_names(record), _given(record.worker.phases) if record.worker else None)


def _given(value: Any) -> Any:
    return None if value is ABSENT else value


def _baseline(variant: str) -> Callable[[RecordDraft], tuple[Any, Any]]:
    """A record's speedup against one torch.compile baseline, and its CI."""
    def get(record: RecordDraft) -> tuple[Any, Any]:
        entry = record.timing.baselines.get(variant)
        return (entry.speedup, entry.speedup_ci) if entry else (None, None)
    return get


def merge(records: list[RecordDraft], planned: int | None = None) -> RecordDraft:
    """The record for the process pairs that ran (`planned` were to: none runs after one that is not ok)."""
    total = planned or len(records)
    for i, record in enumerate(records):
        if not record.ok:
            if total > 1 and record.error:
                record.error = f"process pair {i + 1} of {total}: {record.error}"
            return record
    if len(records) == 1:
        return records[0]
    merged = copy.deepcopy(records[0])
    main = _combined(records, lambda r: (r.speedup, r.speedup_ci))
    if main is None or merged.timing is None:
        return merged
    merged.speedup, merged.speedup_ci = main.value, main.ci()
    vs_compile = _combined(records, lambda r: (r.speedup_vs_compile, r.speedup_vs_compile_ci))
    if vs_compile is not None:
        merged.speedup_vs_compile, merged.speedup_vs_compile_ci = vs_compile.value, vs_compile.ci()
    _merge_timing(merged, records, main)
    for record in records[1:]:
        for flag in record.flags:
            if flag not in merged.flags:
                merged.flags.append(flag)
                merged.set_flag_detail(flag, record.flag_detail(flag))
        if record.retried and not merged.retried:
            merged.retried = record.retried
    return merged


def _merge_timing(merged: RecordDraft, records: list[RecordDraft], main: Estimate) -> None:
    """The merged record's timing: each baseline's combined speedup, each process pair's line, the rounds, the
    seconds and the round ratios of all of them."""
    timing = merged.timing
    for variant, entry in timing.baselines.items():
        est = _combined(records, _baseline(variant))
        if est is not None:
            entry.speedup, entry.speedup_ci = est.value, est.ci()
    timing.processes = [_process(r) for r in records]
    timing.rounds = main.rounds
    timing.seconds = round(sum(r.timing.seconds or 0.0 for r in records), 3)
    timing.rel_ci_half_width = main.rel_half_width
    timing.round_ratios = [x for r in records for x in r.timing.round_ratios or []]
    timing.noisy = any(r.timing.noisy for r in records)
