"""The defense checks the parent makes on what the workers sent, each turning into a flag on the record (README,
Hardening). Pure functions over records and messages: no processes, no torch."""
from __future__ import annotations

import math
from typing import Any

from . import flags
from .flags import Flag
from .interleave import CANDIDATE, Collected
from .paired import Consistency, Interference
from .records import add_flag

FLAG_DETAILS = flags.DETAILS    # each flag's default flag_details text (its meaning in flags.FLAGS)

# The flags a candidate worker's correctness message carries, each as a field of the flag's name.
MESSAGE_FLAGS = (flags.MUTATES_INPUTS, flags.UNSYNCHRONIZED_WORK, flags.OUTPUT_NOT_PLAIN_TENSOR)


def flag(record: dict[str, Any], which: Flag, detail: str | None = None) -> None:
    """Put `which` on the record, with `detail` (default: the flag's meaning) as its flag_details sentence."""
    add_flag(record, which.name)
    record.setdefault("flag_details", {})[which.name] = which.meaning if detail is None else detail


def flag_from(record: dict[str, Any], message: dict[str, Any]) -> None:
    """Flags a candidate worker's correctness message carries."""
    for which in MESSAGE_FLAGS:
        if message.get(which.name):
            flag(record, which)


def flag_timing(record: dict[str, Any], out: Collected) -> None:
    """Flags from the timed samples: inputs changed, outputs still changing, lazy outputs, replaced clocks."""
    if out.mutated:
        flag(record, flags.MUTATES_INPUTS)
    if out.changed_after_return:
        flag(record, flags.UNSYNCHRONIZED_WORK, "a timed output's memory changed between the moment its call "
                                                "returned and its check: work was left running past the timed region")
    if out.not_plain:
        flag(record, flags.OUTPUT_NOT_PLAIN_TENSOR)
    if out.tampered:
        flag(record, flags.TAMPERED_TIMER, f"{flags.TAMPERED_TIMER.meaning}: {', '.join(sorted(out.tampered))}")


def _number(value: Any) -> float | None:
    """A number from a worker message: JSON carries NaN/Inf as the strings 'nan'/'inf'; anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None


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


def check_timed_outputs(out: Collected, atol: float, rtol: float) -> tuple[int, list[dict[str, Any]], str | None]:
    """Every timed output of the candidate against the reference's output for the same inputs, at positions drawn
    after the candidate handed the output over and read by a process it cannot touch (harness.trusted), and the
    few checked whole: (samples checked, the whole-output results, the first failure or None)."""
    checked, full = 0, []
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
        ok, bad = values_match(cand.values, ref.values, atol, rtol)
        if not ok:
            return checked, full, (f"timed call {n}: {bad} of {len(ref.values)} values read from the output's "
                                   f"memory after it was handed over differ from the reference's output for the "
                                   f"same inputs")
        if cand.full is not None:
            full.append(cand.full)
            if not cand.full.get("ok"):
                return checked, full, f"timed call {n} (checked whole): {cand.full.get('reason')}"
    if out.output_errors:
        return checked, full, out.output_errors[0]
    return checked, full, None


def check_timed_precision(record: dict[str, Any], full: list[dict[str, Any]], info: dict[str, Any]) -> None:
    """`reduced_precision` from the timed outputs checked whole, by the rule of check_precision (a candidate
    that computes in fp32 during its trials and in lower precision once timed)."""
    for result in full:
        probe: dict[str, Any] = {"flags": [], "correctness": {"fp64_max_abs_err": result.get("fp64_max_abs_err"),
                                 "fp64_reference_max_abs_err": result.get("fp64_reference_max_abs_err")}}
        check_precision(probe, {**info, "fp64_output_scale": result.get("fp64_output_scale")})
        name = flags.REDUCED_PRECISION.name
        if name in probe["flags"]:
            flag(record, flags.REDUCED_PRECISION, f"timed call checked whole: {probe['flag_details'][name]}")
            return


def flag_inconsistent(record: dict[str, Any], found: Consistency) -> None:
    if found.found:
        flag(record, flags.TIMING_INCONSISTENT, found.detail())


def flag_interference(record: dict[str, Any], found: Interference) -> None:
    if found.found:
        flag(record, flags.INTERFERENCE, found.detail())


LITTLE_CUSTOM_SHARE = 0.10    # under this share of a profiled call's GPU time in its own kernels: little_custom_work
PROFILED_CALLS = 3            # calls profiled per side and pair, in round halves drawn at random


def check_kernels(record: dict[str, Any], profiles: list[Any], reference_profiles: list[Any] = ()) -> None:
    """`no_custom_kernel` when none of the candidate's own kernels ran in one of the profiled calls (drawn at
    random among the timed ones); `little_custom_work` when they ran but took under LITTLE_CUSTOM_SHARE of a
    profiled call's GPU time (a custom kernel for a bias add beside a library GEMM and convolutions: the speedup
    is mostly the libraries'). Both warn; neither invalidates. The CPU path profiles nothing (None).
    `reference_kernels`: what eager PyTorch ran in the reference's profiled calls (what the candidate competes
    with; two processes that picked different library kernels for the same call read apart)."""
    found = [p for p in profiles if isinstance(p, dict)]
    if not found:
        return
    shares = [s for s in (_number(p.get("custom_share")) for p in found) if s is not None]
    custom = sorted({k for p in found for k in p.get("custom_kernels") or []})
    eager = sorted({k for p in reference_profiles if isinstance(p, dict) for k in p.get("other_kernels") or []})
    record["kernels"] = {"profiled_calls": len(found), "kernels": max(int(p.get("kernels") or 0) for p in found),
                         "custom_kernels": custom[:20], "custom_share": min(shares) if shares else None,
                         "custom_shares": shares,
                         "other_kernels": sorted({k for p in found for k in p.get("other_kernels") or []})[:20],
                         "reference_kernels": eager[:20]}
    without = sum(1 for p in found if not p.get("custom_kernels"))
    if without:
        flag(record, flags.NO_CUSTOM_KERNEL, f"no GPU kernel from the candidate's own extension or Triton kernels "
                                             f"ran during {without} of {len(found)} profiled calls")
    elif shares and min(shares) < LITTLE_CUSTOM_SHARE:
        flag(record, flags.LITTLE_CUSTOM_WORK,
             f"its own kernels took {min(shares):.1%} of a profiled call's GPU time (under "
             f"{LITTLE_CUSTOM_SHARE:.0%}; the least of {len(found)} calls); the rest ran in library kernels")


PRECISION_FACTOR = 64         # the most a candidate's float64 error may exceed eager fp32's (README, Hardening)
FP32_EPS = 2.0 ** -23


def check_precision(record: dict[str, Any], info: dict[str, Any]) -> None:
    """`reduced_precision` for an fp32 problem that does not allow TF32, when the candidate's error against the
    float64 reference (trial 0) is more than PRECISION_FACTOR times eager fp32's own error (or, where eager is
    exact, than that many fp32 roundings of the output's largest value): TF32 (~2^13 times fp32's error), bf16
    or fp16 arithmetic hidden inside a loose tolerance. An honest fp32 kernel that sums in another order stays
    well inside the factor."""
    corr = record.get("correctness") or {}
    cand, eager = _number(corr.get("fp64_max_abs_err")), _number(corr.get("fp64_reference_max_abs_err"))
    scale = _number(info.get("fp64_output_scale"))
    if info.get("dtype") != "float32" or info.get("allow_tf32") or cand is None or eager is None:
        return
    floor = max(eager, (scale or 0.0) * FP32_EPS)
    if floor > 0 and cand > PRECISION_FACTOR * floor:
        flag(record, flags.REDUCED_PRECISION,
             f"its error against float64 ({cand:.3g}) is {cand / floor:.0f}x eager fp32's ({floor:.3g}); an fp32 "
             f"problem without ALLOW_TF32 allows at most {PRECISION_FACTOR}x")


def check_physics(record: dict[str, Any], work: Any, ceilings: dict[str, float]) -> None:
    """Achieved rates for every timed pair; `faster_than_physics` below 60% of the roofline floor (the floor
    uses the measured copy bandwidth and the bf16 tensor-core rate, the fastest the device goes; the 40% margin
    covers output writes that stay in the 60 MB L2 and copy-measured bandwidth under the true peak)."""
    cand = (record.get("timing") or {}).get("candidate") or {}
    ms = cand.get("median_ms")
    if not isinstance(work, dict) or not ms:
        return
    flops, moved = work.get("flops"), work.get("bytes")
    perf: dict[str, Any] = {"flops": flops, "bytes": moved, "ceilings": ceilings or None,
                            "achieved_tflops": flops / (ms * 1e-3) / 1e12 if flops else None,
                            "achieved_gbps": moved / (ms * 1e-3) / 1e9 if moved else None}
    bw, peak = ceilings.get("copy_gbps"), ceilings.get("matmul_tflops_bf16")
    if bw and peak:
        floor_ms = max((flops or 0) / (peak * 1e12), (moved or 0) / (bw * 1e9)) * 1e3
        perf.update(floor_ms=floor_ms,
                    pct_of_peak_bandwidth=100 * perf["achieved_gbps"] / bw if perf["achieved_gbps"] else None,
                    pct_of_peak_flops=100 * perf["achieved_tflops"] / peak if perf["achieved_tflops"] else None)
        if ms < 0.6 * floor_ms:
            flag(record, flags.FASTER_THAN_PHYSICS, f"{ms:.4f} ms is under 60% of the roofline floor {floor_ms:.4f} ms")
    record["performance"] = perf


def largest(values: list[Any]) -> float | None:
    numbers = [v for v in map(_number, values) if v is not None]
    if any(v != v for v in numbers):
        return float("nan")
    return max(numbers, default=None)
