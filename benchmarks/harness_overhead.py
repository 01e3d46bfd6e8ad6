"""How much time the harness itself costs: wall time of a cold run (empty build cache) and a warm run (everything
cached) over the same tree, the same warm run with the defenses off, and the per-pair overhead (wall time per
pair minus the time spent inside timed samples, both sides).

    python benchmarks/harness_overhead.py [--tree tests/fixtures/exploits] [--device cpu|cuda] [--samples 100]
                                          [--max-pair-seconds S]

Prints a table (a run cut short by Ctrl-C or `timeout -s INT` prints the pairs it finished); nothing here is
asserted (performance targets live in benchmarks, not tests).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import pair_time  # noqa: E402 - its interrupt-tolerant run of run_eval.py and the time inside samples


def run(tree: Path, tmp: Path, device: str, samples: int, defenses: bool, cap: float | None) -> dict:
    config = tmp / "config.yaml"
    config.write_text("\n".join([f"problems_dir: {tree / 'problems'}", f"solutions_dir: {tree / 'solutions'}",
                                 f"output_dir: {tmp / 'results'}", f"cache_dir: {tmp / 'cache'}",
                                 f"device: {device}", "timeout: 120", f"defenses: {str(defenses).lower()}",
                                 "timing:", f"  samples: {samples}"]
                                + ([f"  max_pair_seconds: {cap}"] if cap else [])) + "\n")
    done = pair_time.run(config, tmp / "results", [])
    meta_path = done.run_dir / "run.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    wall, records, interrupted = done.wall_s, done.records, done.interrupted
    sampled = sum(pair_time.sampled_s(r) for r in records)
    return {"wall_s": wall, "pairs": len(records), "interrupted": interrupted,
            "compiled": meta.get("builds_compiled"), "cached": meta.get("builds_cached"), "in_samples_s": sampled,
            "overhead_per_pair_s": (wall - sampled) / max(1, len(records))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", type=Path, default=REPO / "tests" / "fixtures" / "exploits")
    p.add_argument("--device", default="cpu")
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--max-pair-seconds", type=float, help="the time cap on a pair's rounds (default: config.yaml's)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name, defenses in (("cold (empty build cache)", True), ("warm (all builds cached)", True),
                               ("warm, defenses off", False)):
            r = run(args.tree, tmp, args.device, args.samples, defenses, args.max_pair_seconds)
            rows.append((name + (" (interrupted)" if r["interrupted"] else ""), r))
            if r["interrupted"]:                    # what finished is printed; the comparison needs all three
                break
    print(f"tree {args.tree}  device {args.device}  samples {args.samples}")
    print(f"{'run':28} {'pairs':>5} {'compiled':>8} {'cached':>6} {'wall s':>8} {'in samples s':>12} {'overhead/pair s':>15}")
    for name, r in rows:
        print(f"{name:28} {r['pairs']:>5} {r['compiled']!s:>8} {r['cached']!s:>6} {r['wall_s']:>8.1f} "
              f"{r['in_samples_s']:>12.2f} {r['overhead_per_pair_s']:>15.2f}")
    if len(rows) == 3 and not rows[2][1]["interrupted"]:
        warm, off = rows[1][1]["wall_s"], rows[2][1]["wall_s"]
        print(f"defenses add {warm - off:+.1f} s ({(warm - off) / off:+.0%}) to the warm run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
