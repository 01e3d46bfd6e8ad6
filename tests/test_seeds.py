"""harness.core.seeds: seeds a candidate cannot predict."""
from __future__ import annotations


def test_a_fixed_seed_leaves_the_timed_samples_secret():
    """--seed N fixes weights and trials; the timed samples' and checks' streams are keyed by a fresh secret every
    run, since everything a fixed seed determines the candidate's process could derive too (it knows the base
    seed, the streams' tags and harness/seeds.py)."""
    from harness.core.seeds import RunSeed
    first, second = RunSeed.resolve(5), RunSeed.resolve(5)
    assert first.base == second.base == 5 and first.fixed and second.fixed
    assert first.stream("samples", "level1/001", "c").take(4) != second.stream("samples", "level1/001", "c").take(4)
    resumed = RunSeed.resumed(first.record(), None)
    assert (resumed.base, resumed.fixed) == (5, True) and resumed.secret != first.secret
