"""The defense checks the parent makes on what the workers sent, each returning a verdict: the flags it raises with
their reasons, and the figures behind them (README, Hardening). Pure functions over messages and the run's figures:
no processes, no torch, and no record: the run writes the verdicts into it (harness.run.verdicts).

A check is one function of `Evidence` and one entry in an ordered list: AFTER_TRIALS (the candidate's correctness
trials passed; a flag that invalidates ends the pair there) or AFTER_ROUNDS (the timed rounds and the reference's
`after` bracket are done). A check that exists only to catch cheats is marked `@defense`: `defenses: false` in
config.yaml skips it. Its flag is one row of harness.core.flags.FLAGS.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from harness.core import flags
from harness.run import cores, paired
from harness.core.flags import Flag
from harness.core.numbers import number
from harness.run.interleave import CANDIDATE, EAGER, Collected
from harness.shared import layout
from harness.shared import messages as m

FLAG_DETAILS = flags.DETAILS    # each flag's default flag_details text (its meaning in flags.FLAGS)

# The flags a candidate worker's correctness message carries, each as a field of the flag's name.
MESSAGE_FLAGS = (flags.MUTATES_INPUTS, flags.UNSYNCHRONIZED_WORK, flags.OUTPUT_NOT_PLAIN_TENSOR)


@dataclass(frozen=True)
class Raised:
    """One flag a check raised, with its flag_details sentence."""
    flag: Flag
    detail: str


@dataclass
class Verdict:
    """What checks found: the flags they raise, in order, each with its reason, and the figures behind them, each the
    fields of the record part it fills (harness.run.verdicts writes them into the record)."""
    raised: list[Raised] = field(default_factory=list)
    kernels: dict[str, Any] | None = None           # record.kernels (parts.Kernels)
    performance: dict[str, Any] | None = None       # record.performance (parts.Performance)
    interference: dict[str, Any] | None = None      # record.timing.interference (parts.Interference)
    consistency: dict[str, Any] | None = None       # record.timing.consistency (parts.Consistency)
    timed_outputs: tuple[int, int] | None = None    # timed outputs checked, and of them whole (record.correctness)

    def flag(self, which: Flag, detail: str | None = None) -> Verdict:
        """`which` raised, with `detail` (default: the flag's meaning) as its reason."""
        self.raised.append(Raised(which, which.meaning if detail is None else detail))
        return self

    def names(self) -> list[str]:
        return [r.flag.name for r in self.raised]

    def add(self, other: Verdict) -> Verdict:
        """`other`'s flags after these, and its figures where it has them."""
        self.raised += other.raised
        for figure in fields(self):
            if figure.name != "raised" and getattr(other, figure.name) is not None:
                setattr(self, figure.name, getattr(other, figure.name))
        return self


def flag_from(outputs: m.Outputs) -> Verdict:
    """Flags a candidate worker's correctness reply carries."""
    verdict = Verdict()
    for which in MESSAGE_FLAGS:
        if getattr(outputs, which.name):
            verdict.flag(which)
    return verdict


def flag_timing(out: Collected) -> Verdict:
    """Flags from the timed samples: inputs changed, outputs still changing, lazy or aliased outputs, replaced
    clocks."""
    verdict = Verdict()
    if out.mutated:
        verdict.flag(flags.MUTATES_INPUTS)
    if out.changed_after_return:
        verdict.flag(flags.UNSYNCHRONIZED_WORK, "a timed output's memory changed between the moment its call "
                                                "returned and its check: work was left running past the timed region")
    if out.not_plain:
        verdict.flag(flags.OUTPUT_NOT_PLAIN_TENSOR)
    if out.aliased:
        verdict.flag(flags.ALIASED_OUTPUT, f"{flags.ALIASED_OUTPUT.meaning}: {out.aliased}")
    if out.scheduling:
        verdict.flag(flags.SCHEDULING_CHANGED, f"{flags.SCHEDULING_CHANGED.meaning}: {out.scheduling}")
    if out.tampered:
        verdict.flag(flags.TAMPERED_TIMER, f"{flags.TAMPERED_TIMER.meaning}: {', '.join(sorted(out.tampered))}")
    return verdict


def _number(value: Any) -> float | None:
    """A number from a worker message, NaN and Inf included (JSON carries them as 'nan'/'inf'); anything else None."""
    return number(value, finite=False)


def values_match(got: list[Any], want: list[Any], atol: float, rtol: float) -> tuple[bool, int]:
    """(ok, mismatches) by the rule full outputs are compared with: NaN and Inf at the same places, elsewhere
    |got - want| <= atol + rtol * |want|."""
    if len(got) != len(want):
        return False, max(len(got), len(want))
    bad = 0
    for g_raw, w_raw in zip(got, want):
        g, w = _number(g_raw), _number(w_raw)
        if g is None or w is None:
            bad += 1
        elif math.isnan(w) or math.isinf(w) or math.isnan(g) or math.isinf(g):
            bad += not ((math.isnan(w) and math.isnan(g)) or g == w)
        elif abs(g - w) > atol + rtol * abs(w):
            bad += 1
    return bad == 0, bad


def check_timed_outputs(out: Collected, atol: float, rtol: float,
                        orders: list | None = None) -> tuple[int, list[m.FileCheck], str | None]:
    """Every timed output of the candidate against the reference's output for the same inputs, at positions drawn
    after the candidate handed the output over and read by a process it cannot touch (harness.run.trusted), and the
    few checked whole: (samples checked, the whole-output results, the first failure or None). `orders`: the
    reference's outputs' layouts (harness.shared.layout), each timed output held to its own."""
    checked, full = 0, []
    if out.shared_outputs:                              # the reason the values below would differ, said plainly
        return len(out.checks), full, out.shared_outputs
    for n, (seed, sides) in enumerate(out.checks.items()):
        cand, ref = sides.get(CANDIDATE), sides.get("reference")
        if cand is None or ref is None:
            continue
        checked += 1
        if cand.error:
            return checked, full, f"timed call {n}: {cand.error}"
        if ref.error:
            continue                                   # the reference's own read failed: nothing to hold it to
        if cand.shapes != ref.shapes:
            return checked, full, f"timed call {n}: output shape {cand.shapes} != the reference's {ref.shapes}"
        if cand.dtypes is not None and ref.dtypes is not None and cand.dtypes != ref.dtypes:
            return checked, full, f"timed call {n}: output dtype {cand.dtypes} != the reference's {ref.dtypes}"
        folded = layout.folded(cand.layouts, ref.layouts) or layout.reordered(cand.layouts, orders)
        if folded:
            return checked, full, f"timed call {n}: {folded}"
        ok, bad = values_match(cand.values, ref.values, atol, rtol)
        if not ok:
            return checked, full, (f"timed call {n}: {bad} of {len(ref.values)} values read from the output's "
                                   f"memory after it was handed over differ from the reference's output for the "
                                   f"same inputs")
        if cand.full is not None:
            full.append(cand.full)
            if not cand.full.ok:
                return checked, full, f"timed call {n} (checked whole): {cand.full.reason}"
    if out.output_errors:
        return checked, full, out.output_errors[0]
    return checked, full, None


def check_timed_precision(full: list[m.FileCheck], ready: m.Ready) -> Verdict:
    """`reduced_precision` from the timed outputs checked whole, by the rule of check_precision (a candidate
    that computes in fp32 during its trials and in lower precision once timed)."""
    for result in full:
        excess = precision_verdict(_number(result.fp64_max_abs_err), _number(result.fp64_reference_max_abs_err),
                                   _number(result.fp64_output_scale), signatures_of(result), ready)
        if excess:
            return Verdict().flag(flags.REDUCED_PRECISION, f"timed call checked whole: {excess}")
    return Verdict()


LITTLE_CUSTOM_SHARE = 0.10    # under this share of a profiled call's GPU time in its own kernels: little_custom_work
PROFILED_CALLS = 3            # calls profiled per side and pair, in round halves drawn at random


def check_kernels(profiles: list[m.Profile | None], reference_profiles: list[m.Profile | None] = ()) -> Verdict:
    """`no_custom_kernel` when none of the candidate's own kernels ran in one of the profiled calls (drawn at
    random among the timed ones); `little_custom_work` when they ran but took under LITTLE_CUSTOM_SHARE of a
    profiled call's GPU time (a custom kernel for a bias add beside a library GEMM and convolutions: the speedup
    is mostly the libraries'). Both warn; neither invalidates. The CPU path profiles nothing (None).
    `reference_kernels`: what eager PyTorch ran in the reference's profiled calls (what the candidate competes
    with; two processes that picked different library kernels for the same call read apart)."""
    found = [p for p in profiles if p is not None]
    if not found:
        return Verdict()
    shares = [s for s in (_number(p.custom_share) for p in found) if s is not None]
    custom = sorted({k for p in found for k in p.custom_kernels})
    eager = sorted({k for p in reference_profiles if p is not None for k in p.other_kernels})
    verdict = Verdict(kernels=dict(
        profiled_calls=len(found), kernels=max(p.kernels for p in found), custom_kernels=custom[:20],
        custom_share=min(shares) if shares else None, custom_shares=shares,
        other_kernels=sorted({k for p in found for k in p.other_kernels})[:20], reference_kernels=eager[:20]))
    without = sum(1 for p in found if not p.custom_kernels)
    if without:
        verdict.flag(flags.NO_CUSTOM_KERNEL, f"no GPU kernel from the candidate's own extension or Triton kernels "
                                             f"ran during {without} of {len(found)} profiled calls")
    elif shares and min(shares) < LITTLE_CUSTOM_SHARE:
        verdict.flag(flags.LITTLE_CUSTOM_WORK,
                     f"its own kernels took {min(shares):.1%} of a profiled call's GPU time (under "
                     f"{LITTLE_CUSTOM_SHARE:.0%}; the least of {len(found)} calls); the rest ran in library kernels")
    return verdict


PRECISION_FACTOR = 64         # the most a candidate's float64 error may exceed eager fp32's (README, Hardening)
FP32_EPS = 2.0 ** -23


def check_precision(fp64_max_abs_err: Any, ready: m.Ready, derived: m.Derived,
                    signatures: dict[str, Any] | None = None) -> Verdict:
    """`reduced_precision` for an fp32 problem that does not allow TF32, by precision_verdict on trial 0: the
    candidate's error against the float64 reference more than PRECISION_FACTOR times eager fp32's own (or, where
    eager is exact, than that many fp32 roundings of the output's largest value): bf16 or fp16 arithmetic, TF32
    where K is moderate, hidden inside a loose tolerance; or an error that carries TF32's or split bf16's
    signature (`signatures`: trial 0's, from the reference's check), at any K. An honest fp32 kernel that sums in
    another order stays well inside the factor and shares none of either signature (docs/precision.md).
    `fp64_max_abs_err`: trial 0's error against float64."""
    excess = precision_verdict(_number(fp64_max_abs_err), _number(derived.fp64_reference_max_abs_err),
                               _number(derived.fp64_output_scale), signatures, ready)
    return Verdict().flag(flags.REDUCED_PRECISION, excess) if excess else Verdict()


def precision_excess(cand: float | None, eager: float | None, scale: float | None, ready: m.Ready) -> str | None:
    """Why the candidate's error against float64 (`cand`) is too large for fp32 arithmetic, given eager fp32's
    (`eager`) and the largest |value| of the float64 output (`scale`); None when it is not, or cannot be told."""
    if ready.dtype != "float32" or ready.allow_tf32 or cand is None or eager is None:
        return None
    floor = max(eager, (scale or 0.0) * FP32_EPS)
    if not (floor > 0 and cand > PRECISION_FACTOR * floor):
        return None
    return (f"its error against float64 ({cand:.3g}) is {cand / floor:.0f}x eager fp32's ({floor:.3g}); an fp32 "
            f"problem without ALLOW_TF32 allows at most {PRECISION_FACTOR}x")


SIGNATURE_SHARE = 0.1        # the least share of a scheme's own error in a candidate's that flags (docs/precision.md)
SIGNATURE_Z = 6.0             # and how far that share must stand from 0, in its standard errors
SCHEME_NAMES = {"tf32:a": "TF32 on the input (left) operand", "tf32:b": "TF32 on the weight (right) operand",
                "bf16x3": "split bf16 (hi*hi + hi*lo + lo*hi)", "bf16x3:rz": "split bf16 by truncation"}


def signatures_of(result: m.FileCheck | None) -> dict[str, Any] | None:
    """A check's `precision_signature` (scheme -> {'share', 'z', 'ratio'}), where the reference sent one."""
    return result.precision_signature if result is not None else None


def signature_excess(signatures: dict[str, Any] | None, ready: m.Ready) -> str | None:
    """Why the candidate's error against float64 carries a reduced-precision scheme's own error (`signatures`:
    scheme -> {'share', 'z', 'ratio'}, harness.worker.verify.precision_signature); None when none does, or it
    cannot be told (no figures, no matmul, a signature of zero)."""
    if ready.dtype != "float32" or ready.allow_tf32 or not isinstance(signatures, dict):
        return None
    for scheme, figures in signatures.items():
        if not isinstance(figures, dict):
            continue
        share, z = _number(figures.get("share")), _number(figures.get("z"))
        if share is None or z is None or math.isnan(share) or math.isnan(z):
            continue
        if abs(share) >= SIGNATURE_SHARE and abs(z) >= SIGNATURE_Z:
            return (f"{share:.2f} of its error against float64 is the error {SCHEME_NAMES.get(scheme, scheme)} "
                    f"gives (z {z:.0f}); fp32 arithmetic in any order shares none of it")
    return None


def precision_verdict(cand: float | None, eager: float | None, scale: float | None,
                      signatures: dict[str, Any] | None, ready: m.Ready) -> str | None:
    """The reduced-precision rule (docs/precision.md): an error beyond PRECISION_FACTOR times eager fp32's, or one
    that carries a reduced-precision scheme's signature. Why, or None."""
    return precision_excess(cand, eager, scale, ready) or signature_excess(signatures, ready)


def check_physics(work: m.Work | None, ceilings: dict[str, float], ms: float | None) -> Verdict:
    """Achieved rates for every timed pair (`ms`: the candidate's median); `faster_than_physics` below 60% of the
    roofline floor (the floor uses the measured copy bandwidth and the bf16 tensor-core rate, the fastest the device
    goes; the 40% margin covers output writes that stay in the 60 MB L2 and copy-measured bandwidth under the true
    peak)."""
    if work is None or not ms:
        return Verdict()
    flops, moved = work.flops, work.bytes
    tflops = flops / (ms * 1e-3) / 1e12 if flops else None
    gbps = moved / (ms * 1e-3) / 1e9 if moved else None
    verdict = Verdict(performance=dict(flops=flops, bytes=moved, ceilings=ceilings or None, achieved_tflops=tflops,
                                       achieved_gbps=gbps))
    bw, peak = ceilings.get("copy_gbps"), ceilings.get("matmul_tflops_bf16")
    if bw and peak:
        floor_ms = max((flops or 0) / (peak * 1e12), (moved or 0) / (bw * 1e9)) * 1e3
        verdict.performance.update(floor_ms=floor_ms, pct_of_peak_bandwidth=100 * gbps / bw if gbps else None,
                                   pct_of_peak_flops=100 * tflops / peak if tflops else None)
        if ms < 0.6 * floor_ms:
            verdict.flag(flags.FASTER_THAN_PHYSICS, f"{ms:.4f} ms is under 60% of the roofline floor {floor_ms:.4f} ms")
    return verdict


def largest(values: list[Any]) -> float | None:
    numbers = [v for v in map(_number, values) if v is not None]
    if any(v != v for v in numbers):
        return float("nan")
    return max(numbers, default=None)


# ---------------------------------------------------------------- the checks, in order

@dataclass
class Evidence:
    """What the checks read: the reference's figures (its `ready` and `derived` replies), the candidate's trials
    reply and trial 0's check and, after the rounds, what they collected and what the run made of them."""
    ready: m.Ready
    derived: m.Derived
    timing: Any                                 # config.TimingConfig
    device: str
    outputs: m.Outputs | None = None
    trial0: m.FileCheck | None = None           # the reference's check of trial 0 (float64 error, signatures)
    out: Collected | None = None
    before: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)
    before_beside: bool = False         # `before` ran beside the candidate's start (the staged GPU path): not a bracket
    calls_per_sample: int = 1
    ceilings: dict[str, float] = field(default_factory=dict)
    speedup_ci: list[float] | None = None       # the record's, once the rounds' estimate is made
    candidate_ms: float | None = None           # the candidate's median sample
    cpu_threads: int = 1                        # config: the threads each side may use (harness.run.cores)


Check = Callable[[Evidence], Verdict]


def defense(check: Check) -> Check:
    """Marks a check that only catches cheats (off with `defenses: false`)."""
    check.defense = True                        # type: ignore[attr-defined]
    return check


def run(checks: tuple[Check, ...], evidence: Evidence, defenses: bool) -> Verdict:
    """The checks' verdicts, in order, as one (those marked @defense only with `defenses`)."""
    verdict = Verdict()
    for check in checks:
        if defenses or not getattr(check, "defense", False):
            verdict.add(check(evidence))
    return verdict


def trial_flags(ev: Evidence) -> Verdict:
    return flag_from(ev.outputs) if ev.outputs is not None else Verdict()


@defense
def trial_precision(ev: Evidence) -> Verdict:
    fp64 = ev.trial0.fp64_max_abs_err if ev.trial0 is not None else None
    return check_precision(fp64, ev.ready, ev.derived, signatures_of(ev.trial0))


@defense
def kernels(ev: Evidence) -> Verdict:
    return check_kernels(ev.out.profiles, ev.out.reference_profiles) if ev.out is not None else Verdict()


def sample_flags(ev: Evidence) -> Verdict:
    return flag_timing(ev.out) if ev.out is not None else Verdict()


@defense
def cpu_cores(ev: Evidence) -> Verdict:
    """CPU path: the candidate's processes used more cores at once while timed than `cpu_threads` (run.cores), on
    average while awake or in its median timed sample."""
    verdict = Verdict()
    if ev.out is None:
        return verdict
    for used, slack, where in ((ev.out.cores or {}, cores.SLACK, "on average while awake"),
                               (ev.out.sample_cores or {}, cores.SAMPLE_SLACK, "in its median timed sample")):
        if cores.excess(used.get("candidate"), ev.cpu_threads, slack):
            reference = used.get("reference")
            verdict.flag(flags.EXTRA_CORES, f"{flags.EXTRA_CORES.meaning}: {used['candidate']:.2f} cores {where}, "
                                            f"where cpu_threads is {ev.cpu_threads}" +
                         (f" (the reference's executor: {reference:.2f})" if reference is not None else ""))
            break
    return verdict


@defense
def stopped_work(ev: Evidence) -> Verdict:
    """CPU path: the candidate's processes went on working while stopped between its timed calls, outside the
    clock (run.cores.PerSample): more than STOPPED_SHARE of its CPU work while timed beyond the reference's
    executor's share (with cpu_threads > 1 both sides' pools may spin on for a moment after a call)."""
    verdict = Verdict()
    shares = (ev.out.stopped_work or {}) if ev.out is not None else {}
    share, reference = shares.get("candidate"), shares.get("reference")
    if share is not None and share > cores.STOPPED_SHARE + (reference or 0.0):
        verdict.flag(flags.WORK_WHILE_STOPPED,
                     f"{flags.WORK_WHILE_STOPPED.meaning}: {100 * share:.1f}% of its CPU work while timed was done "
                     f"while it was stopped" + (f" (the reference's executor: {100 * reference:.1f}%)"
                                                if reference is not None else ""))
    return verdict


@defense
def timed_outputs(ev: Evidence) -> Verdict:
    """Every timed output read by the trusted side, a few whole, and those against float64."""
    if ev.out is None:
        return Verdict()
    checked, full, failure = check_timed_outputs(ev.out, ev.ready.atol, ev.ready.rtol,
                                                 layout.orders(ev.ready.output_shapes, ev.ready.output_strides))
    verdict = Verdict(timed_outputs=(checked, len(full)))
    if failure is not None:
        verdict.flag(flags.OUTPUT_CHANGED_UNDER_TIMING, failure)
    return verdict.add(check_timed_precision(full, ev.ready))


def block_medians(out: Collected, variant: str, block: int) -> list[float]:
    medians = []
    for r in out.rounds:
        samples = r.get(variant, [])
        medians += [statistics.median(samples[i:i + block]) for i in range(0, len(samples), block)]
    return medians


@defense
def interference(ev: Evidence) -> Verdict:
    """The reference's blocks while the candidate was alive against its blocks before and after it; only after it
    where the `before` blocks ran beside the candidate's start (the staged GPU path), which could slow them."""
    if ev.out is None or not ev.after or not (ev.before or ev.before_beside):
        return Verdict()
    during = block_medians(ev.out, EAGER, ev.timing.block_samples)
    found = paired.interference([] if ev.before_beside else ev.before, during, ev.after,
                                ev.timing.interference_tolerance)
    verdict = Verdict(interference=dict(before_ms=ev.before, after_ms=ev.after, during_ms=found.during_ms,
                                        tolerance=found.tolerance, found=found.found))
    return verdict.flag(flags.INTERFERENCE, found.detail()) if found.found else verdict


@defense
def consistency(ev: Evidence) -> Verdict:
    """The parent's clock around every sample request against what each side reported (`timing_inconsistent`);
    on the CPU path the call's request alone is bracketed, and 5% of the reported time is allowed."""
    if ev.out is None:
        return Verdict()
    ref, cand = ev.out.unexplained_ms.get(EAGER), ev.out.unexplained_ms.get(CANDIDATE)
    if not ref or not cand:
        return Verdict()
    reported = [ms * ev.calls_per_sample for ms in ev.out.samples(CANDIDATE)]
    cpu = ev.device == "cpu"
    share = paired.OVERHEAD_SHARE_CPU if cpu else 0.0
    tolerance = ev.timing.consistency_tolerance
    tolerance = min(tolerance, paired.REPORTED_SHARE_CPU) if cpu else tolerance
    flush = statistics.median(ev.out.flush_ms.get(EAGER) or [0.0])    # the reference's: no candidate code there
    found = paired.consistency(ref, cand, reported, tolerance, share, flush)
    verdict = Verdict(consistency=dict(reference_unexplained_ms=found.reference_ms,
                                       candidate_unexplained_ms=found.candidate_ms, reference_flush_ms=found.flush_ms,
                                       allowed_ms=found.allowed_ms, found=found.found))
    return verdict.flag(flags.TIMING_INCONSISTENT, found.detail()) if found.found else verdict


def noisy(ev: Evidence) -> Verdict:
    if ev.out is None or not ev.out.noisy:
        return Verdict()
    est = ev.speedup_ci
    return Verdict().flag(flags.NOISY, f"the speedup's 95% CI [{est[0]:.4g}, {est[1]:.4g}] did not reach "
                                       f"+/-{ev.timing.target_rel_ci:.1%} within the time cap")


def physics(ev: Evidence) -> Verdict:
    return check_physics(ev.derived.work, ev.ceilings, ev.candidate_ms)


AFTER_TRIALS: tuple[Check, ...] = (trial_flags, trial_precision)     # a flag these add that invalidates ends
                                                                     # the pair before timing (trial_flags' do not:
                                                                     # the rounds still run, for the record)
AFTER_ROUNDS: tuple[Check, ...] = (kernels, sample_flags, cpu_cores, stopped_work, timed_outputs, interference,
                                   consistency, noisy, physics)
