"""Several process pairs for one pair (`timing.processes`, `--processes N`): the record that stands for them.

Each process pair is a whole measurement (a fresh reference worker for the problem, a fresh candidate worker, its own
samples and checks); two processes running the same code differ by a bias of their own that rounds inside one pair
cannot average away (harness.run.paired.combine). The first process pair whose record is not `ok` stands for the pair
(its error names which one it was); otherwise the first record stands, with the speedups and their CIs combined
over all of them and `timing.processes` listing each one's estimate."""
from __future__ import annotations

import copy
from typing import Any

from harness.run.paired import Estimate, combine

_KEPT = ("speedup", "speedup_ci", "speedup_vs_compile", "speedup_vs_compile_ci")


def _estimate(value: Any, ci: Any, rounds: int) -> Estimate | None:
    if not isinstance(value, (int, float)) or not isinstance(ci, list) or len(ci) != 2 or value <= 0:
        return None
    return Estimate(float(value), float(ci[0]), float(ci[1]), rounds)


def _combined(records: list[dict[str, Any]], get) -> Estimate | None:
    """combine() over the records' estimates of one speedup, when every record has one."""
    found = [_estimate(*get(r), int((r.get("timing") or {}).get("rounds") or 0)) for r in records]
    return combine(found) if found and all(e is not None for e in found) else None


def _kernel_names(record: dict[str, Any]) -> dict[str, list[str]] | None:
    """The kernels each side ran in this process pair's profiled calls: two processes that picked different
    library kernels for the same call read apart, and this shows it."""
    kernels = record.get("kernels")
    if not isinstance(kernels, dict):
        return None
    return {"candidate": sorted(set(kernels.get("custom_kernels") or []) | set(kernels.get("other_kernels") or [])),
            "reference": list(kernels.get("reference_kernels") or [])}


def merge(records: list[dict[str, Any]], planned: int | None = None) -> dict[str, Any]:
    """The record for the process pairs that ran (`planned` were to: none runs after one that is not ok)."""
    total = planned or len(records)
    for i, record in enumerate(records):
        if record.get("status") != "ok":
            if total > 1 and record.get("error"):
                record["error"] = f"process pair {i + 1} of {total}: {record['error']}"
            return record
    if len(records) == 1:
        return records[0]
    merged = copy.deepcopy(records[0])
    timing = merged.get("timing") or {}
    main = _combined(records, lambda r: (r.get("speedup"), r.get("speedup_ci")))
    if main is None:
        return merged
    merged["speedup"], merged["speedup_ci"] = main.value, main.ci()
    vs_compile = _combined(records, lambda r: (r.get("speedup_vs_compile"), r.get("speedup_vs_compile_ci")))
    if vs_compile is not None:
        merged["speedup_vs_compile"], merged["speedup_vs_compile_ci"] = vs_compile.value, vs_compile.ci()
    for variant, entry in (timing.get("baselines") or {}).items():
        est = _combined(records, lambda r: ((r["timing"].get("baselines") or {}).get(variant, {}).get("speedup"),
                                            (r["timing"].get("baselines") or {}).get(variant, {}).get("speedup_ci")))
        if est is not None:
            entry["speedup"], entry["speedup_ci"] = est.value, est.ci()
    timing["processes"] = [{**{k: r.get(k) for k in _KEPT}, "rounds": r["timing"].get("rounds"),
                            "seconds": r["timing"].get("seconds"), "kernels": _kernel_names(r),
                            "phases": (r.get("worker") or {}).get("phases")} for r in records]
    timing["rounds"] = main.rounds
    timing["seconds"] = round(sum(r["timing"].get("seconds") or 0.0 for r in records), 3)
    timing["rel_ci_half_width"] = main.rel_half_width
    timing["round_ratios"] = [x for r in records for x in r["timing"].get("round_ratios") or []]
    timing["noisy"] = any(r["timing"].get("noisy") for r in records)
    for record in records[1:]:
        for flag in record.get("flags") or []:
            if flag not in merged["flags"]:
                merged["flags"].append(flag)
                merged.setdefault("flag_details", {})[flag] = (record.get("flag_details") or {}).get(flag)
        if record.get("retried") and not merged.get("retried"):
            merged["retried"] = record["retried"]
    return merged
