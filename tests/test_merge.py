"""harness.run.merge: several process pairs of one pair (timing.processes) into one record."""
from __future__ import annotations

import pytest


def _ok_record(speedup: float, ci: list[float], rounds: int, flags=()):
    from harness.results.records import RecordDraft
    return RecordDraft.from_json({
        "status": "ok", "error": None, "speedup": speedup, "speedup_ci": ci, "flags": list(flags),
        "flag_details": {f: "why" for f in flags}, "speedup_vs_compile": None, "speedup_vs_compile_ci": None,
        "timing": {"rounds": rounds, "seconds": 1.0, "round_ratios": [speedup] * rounds, "noisy": "noisy" in flags,
                   "baselines": {}}})


def test_merge_of_process_pairs_keeps_each_and_combines_the_speedup():
    from harness.results.parts import WorkerRun
    from harness.run import merge as processes
    first, second = _ok_record(1.1, [1.09, 1.11], 10), _ok_record(1.0, [0.99, 1.01], 12, ["noisy"])
    first.worker, second.worker = (WorkerRun.from_json({"phases": {"total": 3.0}}),
                                   WorkerRun.from_json({"phases": {"total": 2.0}}))
    merged = processes.merge([first, second])
    assert merged.status == "ok"
    assert [p.speedup for p in merged.timing.processes] == [1.1, 1.0]
    assert [p.phases for p in merged.timing.processes] == [{"total": 3.0}, {"total": 2.0}]
    assert merged.speedup == pytest.approx((1.1 * 1.0) ** 0.5)
    assert merged.timing.rounds == 22 and len(merged.timing.round_ratios) == 22
    assert merged.flags == ["noisy"] and merged.timing.noisy is True


def test_merge_lets_a_failing_process_pair_stand_and_says_which():
    from harness.results.records import RecordDraft
    from harness.run import merge as processes

    def bad():
        return RecordDraft.from_json({"status": "invalid", "error": "interference: slower", "flags": ["interference"],
                                      "timing": None})
    merged = processes.merge([_ok_record(1.1, [1.09, 1.11], 10), bad()], planned=3)   # the third never ran
    assert merged.status == "invalid"
    assert merged.error == "process pair 2 of 3: interference: slower"
    first = processes.merge([bad()], planned=3)
    assert first.error == "process pair 1 of 3: interference: slower"
    assert processes.merge([bad()]).error == "interference: slower"       # one process pair: nothing to say


def test_each_process_pair_keeps_the_kernels_both_sides_ran():
    """Two process pairs that picked different library kernels for the same call read apart: the record says which
    kernels eager PyTorch ran beside the candidate's, per process pair."""
    from harness.run import defenses, verdicts
    from harness.run import merge as processes
    from harness.shared.messages import Profile
    records = []
    for gemm in ("sm90_gemm_a", "sm80_gemm_b"):
        record = _ok_record(1.0, [0.99, 1.01], 10)
        verdicts.write(record, defenses.check_kernels([Profile(1, [], 0.0, [gemm])],
                                                      [Profile(1, [], 0.0, [gemm, "fill"]), None]))
        records.append(record)
    assert records[0].kernels.reference_kernels == ["fill", "sm90_gemm_a"]
    merged = processes.merge(records)
    assert [p.kernels.to_json() for p in merged.timing.processes] == [
        {"candidate": ["sm90_gemm_a"], "reference": ["fill", "sm90_gemm_a"]},
        {"candidate": ["sm80_gemm_b"], "reference": ["fill", "sm80_gemm_b"]}]
    assert processes.merge([_ok_record(1.0, [0.99, 1.01], 10)] * 2).timing.processes[0].kernels is None
