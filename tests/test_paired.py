"""harness.run.paired: the arithmetic of paired timing (consistency, process pairs combined)."""
from __future__ import annotations

import pytest


def test_consistency_catches_hidden_work_with_a_small_allowance_on_the_cpu():
    from harness.run.paired import OVERHEAD_SHARE_CPU, REPORTED_SHARE_CPU, consistency
    ref = [0.8 + 0.01 * (i % 5) for i in range(24)]                   # the call's request alone: ~0.8 ms of wake-up
    reported = [1.0] * 24                                              # and reads around a 1 ms call
    # CPU path (the flush and the inputs have a request of their own): 0.1 ms more in the other process is noise
    assert not consistency(ref, [x + 0.1 for x in ref], reported, REPORTED_SHARE_CPU, OVERHEAD_SHARE_CPU).found
    # a quarter of a 1 ms call hidden (a report scaled by 0.75) is caught there
    scaled = consistency(ref, [x + 0.25 for x in ref], [0.75] * 24, REPORTED_SHARE_CPU, OVERHEAD_SHARE_CPU)
    assert scaled.found
    # the allowance: 5% of the report + 5% of the reference's own per-sample work + 0.05 + four standard errors
    assert 0.12 < scaled.allowed_ms < 0.2
    # GPU path (no share of the overhead, 25% of the report): a forger hiding 0.3 ms on a 0.1 ms report is
    # caught, an honest 0.05 ms is not
    gpu = [4.0 + 0.01 * (i % 5) for i in range(24)]
    assert consistency(gpu, [x + 0.3 for x in gpu], [0.1] * 24, 0.25).found
    assert not consistency(gpu, [x + 0.05 for x in gpu], [0.1] * 24, 0.25).found
    # a large cache flush in the overhead (where it is still in the bracket) widens it by 5%: 10 ms hidden behind
    # a 0.1 ms report is caught, a flush 2 ms slower in the other process is not
    flushed = [75.0 + x for x in gpu]
    assert consistency(flushed, [x + 10.0 for x in flushed], [0.1] * 24, 0.25, OVERHEAD_SHARE_CPU, 75.0).found
    assert not consistency(flushed, [x + 2.0 for x in flushed], [0.1] * 24, 0.25, OVERHEAD_SHARE_CPU, 75.0).found


def test_combine_is_the_geometric_mean_with_a_t_interval_over_processes():
    import math
    import statistics
    from harness.run.paired import Estimate, combine, t95
    pairs = [Estimate(1.02, 1.015, 1.025, 50), Estimate(0.98, 0.975, 0.985, 60), Estimate(1.0, 0.995, 1.005, 40)]
    est = combine(pairs)
    assert est.value == pytest.approx(math.exp(sum(math.log(e.value) for e in pairs) / 3))
    assert est.rounds == 150
    # three processes that disagree by 2%: the CI covers the spread between them, not the narrow CIs within
    assert est.lo < 0.98 and est.hi > 1.02
    spread = statistics.stdev(math.log(e.value) for e in pairs)
    assert math.log(est.hi / est.value) == pytest.approx(t95(2) * spread / math.sqrt(3))
    # processes that agree by chance: the CI is no narrower than what each process's own CI says
    same = combine([Estimate(1.0, 0.99, 1.01, 10)] * 2)
    assert same.hi - same.lo >= 0.02 * t95(1) / 1.96 / math.sqrt(2) * 0.99
    assert combine(pairs[:1]) == pairs[0]


def test_interference_needs_the_reference_slower_than_every_bracket_that_counts():
    from harness.run.paired import interference
    quiet, slowed = [1.0, 1.01, 0.99], [4.0, 4.1, 3.9]
    # a candidate that leaves work running slows the reference's blocks beside it to 4x: caught between 1x brackets
    found = interference(quiet, slowed, quiet, 2.0)
    assert found.found and found.before_ms == pytest.approx(1.0)
    assert "than before (1 ms) and after it (1 ms)" in found.detail()
    # 2.5x is inside the allowance of 200%
    assert not interference(quiet, [2.5] * 3, quiet, 2.0).found
    # a `before` bracket as slow as the blocks beside the candidate would hide it: the staged GPU path's first
    # blocks run beside the candidate's start, so the bracket there is `after` alone (before empty)
    assert not interference(slowed, slowed, quiet, 2.0).found
    alone = interference([], slowed, quiet, 2.0)
    assert alone.found and alone.before_ms is None
    assert "than after it (1 ms)" in alone.detail()


def test_the_interference_check_leaves_out_before_blocks_that_ran_beside_the_candidate():
    """defenses.interference with Evidence.before_beside (the staged GPU path, harness.run.evaluate._executor_beside):
    `before` blocks the candidate could have slowed (it loads beside them) do not widen the bracket."""
    from types import SimpleNamespace
    from harness.run import defenses
    from harness.run.interleave import EAGER, Collected
    out = Collected(rounds=[{EAGER: [4.0, 4.0]} for _ in range(4)])
    timing = SimpleNamespace(block_samples=2, interference_tolerance=2.0)

    def verdict(beside: bool) -> defenses.Verdict:
        ev = defenses.Evidence(None, None, timing, "cuda", out=out, before=[4.0, 4.1, 3.9], after=[1.0, 1.0, 1.0],
                               before_beside=beside)
        return defenses.interference(ev)
    assert verdict(beside=False).names() == []          # a slow `before` that counts hides the slowdown
    caught = verdict(beside=True)
    assert caught.names() == ["interference"]
    assert caught.interference["before_ms"] == [4.0, 4.1, 3.9]     # recorded all the same
