"""What checking the timed outputs costs a pair: the parent's time in the interleaved rounds beyond the timed
samples themselves, per sample, read from run folders (`results.jsonl`). Run the same selection on two trees (say,
before and after a change to the check path) back to back on one machine and compare:

    python benchmarks/check_cost.py RUN_DIR [RUN_DIR ...]

Per run: pairs, samples per pair (both sides' timed samples and each block's warm-up samples, all of which are
checked), `timing` seconds per pair (worker.phases.timing), the time inside timed samples, and the rest per sample
in ms: the parent's and the workers' per-sample work (requests, inputs, flush, the trusted side's reads, the
reference's own checks, stopping and resuming the sides). Also the pair's `checks` phase (trial verification and
the defenses after the rounds) and the whole-output checks made in the rounds.

Nothing here is asserted; it prints figures (performance targets live in benchmarks, not tests).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _records(run: Path) -> list[dict[str, Any]]:
    out = []
    path = run / "results.jsonl"
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("status") == "ok":
            out.append(record)
    return out


def _per_pair(record: dict[str, Any]) -> dict[str, float] | None:
    timing, phases = record.get("timing") or {}, (record.get("worker") or {}).get("phases") or {}
    ref, cand = timing.get("reference") or {}, timing.get("candidate") or {}
    if not isinstance(phases.get("timing"), (int, float)) or not ref.get("samples_ms"):
        return None
    rounds, warmup = int(timing.get("rounds") or 0), int(timing.get("block_warmup") or 0)
    replays = (timing.get("graph_replays") or 1) * (20 if timing.get("mode") == "graph" else 1)
    timed = len(ref["samples_ms"]) + len(cand.get("samples_ms") or [])
    samples = timed + 4 * rounds * warmup                  # two blocks a side a round, each with its warm-up
    inside = (sum(ref["samples_ms"]) + sum(cand.get("samples_ms") or [])) * replays / 1e3
    inside *= samples / timed                              # the warm-up samples' time, at the same rate
    return {"samples": samples, "timing_s": phases["timing"], "inside_s": inside,
            "rest_ms": 1e3 * (phases["timing"] - inside - (phases.get("timing_profile") or 0.0)) / samples,
            "checks_s": float(phases.get("checks") or 0.0),
            "full": float((record.get("correctness") or {}).get("timed_outputs_full_checked") or 0)}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    print(f"{'run':<34} {'pairs':>5} {'samples':>8} {'timing s':>9} {'in samples s':>13} {'rest ms/sample':>15} "
          f"{'checks s':>9} {'whole':>6}")
    for arg in argv:
        rows = [r for r in map(_per_pair, _records(Path(arg))) if r is not None]
        if not rows:
            print(f"{Path(arg).name:<34} no ok pairs with phases")
            continue
        mean = {k: statistics.fmean(r[k] for r in rows) for k in rows[0]}
        print(f"{Path(arg).name:<34} {len(rows):>5} {mean['samples']:>8.0f} {mean['timing_s']:>9.2f} "
              f"{mean['inside_s']:>13.2f} {mean['rest_ms']:>15.3f} {mean['checks_s']:>9.2f} {mean['full']:>6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
