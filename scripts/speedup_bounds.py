"""How fast an honest fp32 candidate could be, per pair, from what a run's records already hold: the figures behind
issue 32's "geometric mean >= 1.4x vs eager" question.

    python scripts/speedup_bounds.py RUN_DIR_OR_RESULTS_JSONL [...]

For each `ok` pair (the last record per problem and candidate):
  roofline  eager ms / the fp32 floor: the problem's fewest bytes at the card's measured copy bandwidth or its
            FLOPs (torch's flop counter: matmuls and convolutions) at the measured fp32 matmul rate, whichever is
            longer; an fp32 candidate beats it by little (the ceilings are measured rates, not datasheet peaks);
  library   eager ms / (the candidate's ms outside its own kernels): a candidate that keeps the library's GEMM or
            convolution (kernels.custom_share < 1) cannot drop below the time it spends in them, so this is its
            bound unless it replaces the library call with a faster fp32 one of its own;
  bound     the smaller of the two (the library bound only where the candidate calls library kernels).
Then the geometric means over the pairs: measured speedup, roofline bound, bound. Nothing here is asserted.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def records(paths: list[Path]) -> dict[tuple[str, str], dict]:
    """The last record of each (problem, solution) in `paths` (run folders or results.jsonl files)."""
    found: dict[tuple[str, str], dict] = {}
    for path in paths:
        files = [path] if path.is_file() else sorted(path.glob("**/results.jsonl"))
        for file in files:
            for line in file.read_text().splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    found[(r["problem"], r["solution"])] = r
    return found


def fp32_floor_ms(perf: dict) -> float | None:
    """The fp32 roofline floor: the fewest bytes at the measured copy bandwidth or the FLOPs at the measured fp32
    (not TF32) matmul rate, whichever is longer (the record's own floor_ms uses the bf16 rate: the physics check's
    floor for any candidate, not an fp32 one's)."""
    ceilings = perf.get("ceilings") or {}
    bw, fp32 = ceilings.get("copy_gbps"), ceilings.get("matmul_tflops_fp32")
    if not bw or not fp32 or perf.get("bytes") is None:
        return None
    return max((perf.get("flops") or 0) / (fp32 * 1e12), perf["bytes"] / (bw * 1e9)) * 1e3


def bounds(r: dict) -> tuple[float | None, float | None]:
    """(roofline bound, library bound) of one record; None where a figure is missing."""
    timing, perf, kernels = r.get("timing") or {}, r.get("performance") or {}, r.get("kernels") or {}
    eager = (timing.get("reference") or {}).get("median_ms")
    cand = (timing.get("candidate") or {}).get("median_ms")
    roof = eager / floor if eager and (floor := fp32_floor_ms(perf)) else None
    share = kernels.get("custom_share")
    lib = None
    if eager and cand and isinstance(share, (int, float)) and share < 0.999:
        lib = eager / ((1 - share) * cand)
    return roof, lib


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    rows = []
    for (problem, solution), r in sorted(records([Path(a) for a in argv]).items()):
        if r.get("status") != "ok" or not r.get("speedup"):
            continue
        roof, lib = bounds(r)
        bound = min(v for v in (roof, lib) if v is not None) if (roof or lib) else None
        rows.append((problem, solution.rsplit("/", 1)[-1], r["speedup"], r.get("speedup_vs_compile"), roof, lib, bound))
    fmt = lambda v: "-" if v is None else f"{v:.3f}"
    print(f"| problem | candidate | speedup | vs compile | roofline bound | library bound | bound |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row[0]} | {row[1]} | " + " | ".join(fmt(v) for v in row[2:]) + " |")
    n = len(rows)
    print(f"\n{n} ok pairs; geometric means: speedup {fmt(geomean([r[2] for r in rows]))}, "
          f"vs torch.compile {fmt(geomean([r[3] for r in rows if r[3]]))} "
          f"({sum(1 for r in rows if r[3])} pairs), roofline bound {fmt(geomean([r[4] for r in rows if r[4]]))} "
          f"({sum(1 for r in rows if r[4])} pairs), bound {fmt(geomean([r[6] for r in rows if r[6]]))} "
          f"({sum(1 for r in rows if r[6])} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
