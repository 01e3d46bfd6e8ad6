"""The arithmetic of paired, interleaved timing: per-round ratios, a confidence interval on the speedup, the
stopping rule and the interference test. Pure functions over sample times; no torch, no processes.

A round is four blocks, A B B A (A = the reference, B = the candidate; with torch.compile baselines, every
reference variant takes A's place in order, E C1 C2 B | B C2 C1 E). Within a round each side's samples are
symmetric in time around the round's centre, so a linear drift of the machine's speed cancels in the ratio.
The round's ratio is the median of the reference's samples over the median of the candidate's; the speedup is the
median of the rounds' ratios, and its confidence interval is the distribution-free one for a median (order
statistics of the rounds' ratios, from the binomial distribution: the sign test), which assumes only that rounds
are independent.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    value: float                    # median of the rounds' ratios
    lo: float                       # 95% confidence interval
    hi: float
    rounds: int

    @property
    def rel_half_width(self) -> float:
        """Half the CI's width relative to the estimate (what `target_rel_ci` bounds)."""
        return (self.hi - self.lo) / 2 / self.value if self.value > 0 else math.inf

    def ci(self) -> list[float]:
        return [self.lo, self.hi]


def round_ratio(reference_ms: list[float], candidate_ms: list[float]) -> float:
    """One round's speedup: the reference's median over the candidate's."""
    return statistics.median(reference_ms) / statistics.median(candidate_ms)


def median_ci_ranks(n: int, level: float = 0.95) -> tuple[int, int]:
    """1-based ranks (k, n + 1 - k) of the order statistics that bound the median with coverage >= level
    (largest k with P(Binomial(n, 1/2) < k) <= (1 - level) / 2); (1, n) when n is too small for the level."""
    alpha = (1 - level) / 2
    cumulative, k = 0.0, 0
    for i in range(n + 1):
        cumulative += math.comb(n, i) / 2 ** n
        if cumulative > alpha:
            break
        k = i + 1
    k = max(1, k)
    return k, n + 1 - k


def estimate(ratios: list[float], level: float = 0.95) -> Estimate:
    if not ratios:
        raise ValueError("no rounds")
    ordered = sorted(ratios)
    lo_rank, hi_rank = median_ci_ranks(len(ordered), level)
    return Estimate(statistics.median(ordered), ordered[lo_rank - 1], ordered[hi_rank - 1], len(ordered))


# Student's t, two-sided 95%, by degrees of freedom (1..30; beyond, the normal 1.96 is within 4%).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    return _T95[df - 1] if 1 <= df <= len(_T95) else 1.96


def combine(estimates: list[Estimate]) -> Estimate:
    """One speedup from the estimates of several process pairs (timing.processes), as pyperf does with processes:
    two processes running the same code differ by a bias of their own (larger for launch-bound calls such as a GRU
    than for GPU-bound ones; docs/measurements.md), which no number of rounds inside one pair averages away.

    The value is the geometric mean of the pairs' estimates (each process pair weighs the same, however many rounds
    it took). Its CI is Student's t with n - 1 degrees of freedom on the log scale, with the standard error taken
    from the spread between the pairs, or from the pairs' own CIs when they are wider (pairs that agree by chance
    must not make the CI narrower than one pair's): 95% coverage of the mean over processes, bias included."""
    if not estimates:
        raise ValueError("no estimates")
    if len(estimates) == 1:
        return estimates[0]
    n = len(estimates)
    logs = [math.log(e.value) for e in estimates]
    centre = statistics.fmean(logs)
    between = statistics.variance(logs)
    within = statistics.fmean(((math.log(e.hi) - math.log(e.lo)) / (2 * 1.96)) ** 2 for e in estimates)
    half = t95(n - 1) * math.sqrt(max(between, within) / n)
    return Estimate(math.exp(centre), math.exp(centre - half), math.exp(centre + half),
                    sum(e.rounds for e in estimates))


def min_rounds_for(level: float = 0.95) -> int:
    """The fewest rounds whose extreme order statistics reach the coverage (6 for 95%)."""
    n = 1
    while 2 * 0.5 ** n > 1 - level:
        n += 1
    return n


@dataclass(frozen=True)
class StopRule:
    min_rounds: int
    max_rounds: int
    target_rel_ci: float
    max_seconds: float


def should_stop(ratios: list[float], elapsed_s: float, rule: StopRule) -> tuple[bool, bool]:
    """(stop, noisy): stop once the CI is within the target after at least min_rounds rounds; stop noisy when
    the time cap or max_rounds comes first."""
    n = len(ratios)
    if n >= max(rule.min_rounds, min_rounds_for()) and estimate(ratios).rel_half_width <= rule.target_rel_ci:
        return True, False
    if elapsed_s >= rule.max_seconds or n >= rule.max_rounds:
        return True, True
    return False, False


@dataclass(frozen=True)
class Interference:
    found: bool
    before_ms: float | None         # None: no `before` bracket counted (it ran beside the candidate's start)
    during_ms: float
    after_ms: float
    tolerance: float                # the relative slowdown allowed (the larger of the configured one and the noise)

    def detail(self) -> str:
        if self.before_ms is None:
            return (f"the reference ran {self.during_ms / self.after_ms - 1:+.1%} slower while the candidate was alive "
                    f"({self.during_ms:.4g} ms) than after it ({self.after_ms:.4g} ms); allowed {self.tolerance:.1%}")
        return (f"the reference ran {self.during_ms / max(self.before_ms, self.after_ms) - 1:+.1%} slower while "
                f"the candidate was alive ({self.during_ms:.4g} ms) than before ({self.before_ms:.4g} ms) and after "
                f"it ({self.after_ms:.4g} ms); allowed {self.tolerance:.1%}")


@dataclass(frozen=True)
class Consistency:
    """The parent's clock against a side's reported times (the GPU path). `unexplained` = request-to-reply time of
    a sample (the parent's clock) minus the sample time the worker reported: per-sample work both sides do the same
    way (inputs, the flush, synchronize, the at-return read, the pipe). A candidate whose process under-reports its
    time shows more unexplained time than the reference for the same requests. On the CPU path the parent's clock
    is the sample (harness.worker.arena): nothing is reported, nothing is unexplained."""
    found: bool
    reference_ms: float             # median unexplained time per sample, reference
    candidate_ms: float             # the same, candidate
    candidate_reported_ms: float    # median sample time the candidate reported
    allowed_ms: float
    flush_ms: float = 0.0           # the reference's median cache flush, part of its unexplained time

    def detail(self) -> str:
        return (f"the parent's clock saw {self.candidate_ms - self.reference_ms:.4g} ms more per candidate sample "
                f"than the reference's requests take beyond their reported time (candidate reported "
                f"{self.candidate_reported_ms:.4g} ms); allowed {self.allowed_ms:.4g} ms")


CONSISTENCY_FLOOR_MS = 0.05         # pipe and scheduling jitter the parent's clock cannot tell from forging
FLUSH_SHARE = 0.05                  # how much two processes' cache flushes (one memory-bound fill) may differ


def consistency(reference_unexplained: list[float], candidate_unexplained: list[float],
                candidate_reported: list[float], tolerance: float, overhead_share: float = 0.0,
                flush_ms: float = 0.0) -> Consistency:
    """`found` when the candidate's median unexplained time exceeds the reference's by more than `tolerance` times
    its reported median, plus `overhead_share` times the reference's own per-sample overhead other than its cache
    flush (`flush_ms`), plus FLUSH_SHARE times that flush, plus the floor, plus four standard errors of the
    difference of the two medians, with the noise taken from the reference's unexplained times alone (its process
    runs no candidate code, so a candidate cannot widen the allowance by adding noise of its own).

    `overhead_share` is 0 on the GPU: there the two processes' per-sample work agrees closely, and any share of the
    per-sample overhead would let a forger hide a tiny call's whole time (a 100x forged report on a 0.015 ms call
    hides 0.3 ms a sample). On the CPU path (OVERHEAD_SHARE_CPU) two processes differ by more: inputs are drawn and
    compared on the host, and where the scheduler puts each process matters. The CPU path's cache flush (2x the
    last-level cache, up to 512 MiB) is apart: one fill of memory, the same work in both processes, long enough on a
    large cache that a share of it would let a forger hide milliseconds a sample; the two sides differ in it by its
    jitter, which the four standard errors cover. The figures behind this: docs/measurements.md."""
    ref, cand = statistics.median(reference_unexplained), statistics.median(candidate_unexplained)
    reported = statistics.median(candidate_reported)
    sigma = statistics.median(abs(x - ref) for x in reference_unexplained) * 1.4826
    std_error = 1.2533 * sigma * math.sqrt(1 / len(reference_unexplained) + 1 / len(candidate_unexplained))
    flush = min(max(flush_ms, 0.0), max(ref, 0.0))
    allowed = (tolerance * reported + overhead_share * (max(ref, 0.0) - flush) + FLUSH_SHARE * flush
               + CONSISTENCY_FLOOR_MS + 4 * std_error)
    return Consistency(cand - ref > allowed, ref, cand, reported, allowed, flush)


OVERHEAD_SHARE_CPU = 0.05          # CPU path: kept for records of staged samples (their unexplained time is 0 on
REPORTED_SHARE_CPU = 0.05          # both sides: the parent's clock is the sample), so the check never fires there


def interference(before: list[float], during: list[float], after: list[float], tolerance: float) -> Interference:
    """Block medians of the reference measured before the candidate started, while it was alive (interleaved with
    it) and after it was killed. A candidate that leaves work running to slow the reference down would make
    `during` slower than both brackets; a drifting machine moves the brackets too. The tolerance grows with
    the noise of the bracket blocks (four robust standard deviations). `before` empty: `after` is the one bracket."""
    d, a = statistics.median(during), statistics.median(after)
    b = statistics.median(before) if before else None
    brackets = before + after
    centre = statistics.median(brackets)
    mad = statistics.median(abs(x - centre) for x in brackets) * 1.4826
    allowed = max(tolerance, 4 * mad / centre if centre > 0 else 0.0)
    return Interference(d > max(a, b if b is not None else a) * (1 + allowed), b, d, a, allowed)
