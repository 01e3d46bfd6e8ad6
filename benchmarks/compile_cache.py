"""The torch.compile baselines' cache across runs (harness.run.compilecache): the same selection run twice over one
fresh cache_dir; per problem, each mode's `compile_seconds` and the reference's setup (`worker.phases.
reference_setup`; absent from a record that was measured again, `retried`) in the first run (empty cache) and the
second (the baselines loaded from `<cache_dir>/compile/`).

    python benchmarks/compile_cache.py [--tree examples/cpu] [--device cpu|cuda] [--compile-modes default,...]
                                       [RUN_EVAL FLAGS...]

e.g. on a GPU: python benchmarks/compile_cache.py --tree . --device cuda --compile-modes
default,max-autotune-no-cudagraphs --level 2 --candidate 'aa_*'. Nothing is asserted; the target (issue 45): the
second run's compile part at most 2 s per mode.

Besides the records' figures it prints what each reference's log says (harness.worker.compilewarm): the compile
stack's warm-up (its seconds in all, beside the setup, and what the first baseline waited for it) and, per mode, the
FX graph and AOTAutograd caches' hits and misses; and per run its wall time and the pairs' mean `total` (their own
setup after the reference's). `--spare-workers on|off|auto` sets the config key of that name (the CPU path's
`auto` is off).
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import pair_time  # noqa: E402 - its interrupt-tolerant run of run_eval.py and its private config


def per_problem(records: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """problem -> {mode: compile_seconds, ..., 'reference_setup': s}, from the problem's first record that has them."""
    out: dict[str, dict[str, float | None]] = {}
    for record in records:
        row = out.setdefault(record["problem"], {})
        baselines = (record.get("timing") or {}).get("baselines") or {}
        for variant, baseline in baselines.items():
            if variant.startswith("compile:") and baseline.get("compile_seconds") is not None:
                row.setdefault(variant.split(":", 1)[1], baseline["compile_seconds"])
        setup = ((record.get("worker") or {}).get("phases") or {}).get("reference_setup")
        if setup is not None:
            row.setdefault("reference_setup", setup)
    return out


def from_logs(run_dir: Path) -> dict[str, dict[str, str]]:
    """problem slug -> {'warm': seconds, 'waited': seconds, mode: 'fx H/M aot H/M', ...} from the reference logs'
    lines (H hits, M misses)."""
    out: dict[str, dict[str, str]] = {}
    for log in sorted((run_dir / "logs").glob("*__reference.log")):
        row = out.setdefault(log.name[:-len("__reference.log")], {})
        for line in log.read_text(errors="replace").splitlines():
            warm = re.match(r"kb-harness: compile warm-up beside the setup: ([\d.]+) s(?: \((.*)\))?", line)
            if warm:
                row["warm"], row["steps"] = warm.group(1), warm.group(2) or ""
            mode = re.match(r"kb-harness: compile baseline (\S+): [\d.]+ s(?: \(of which ([\d.]+) s waiting.*?\))?; "
                            r"fx graph cache: (\d+) hit, (\d+) miss.*AOTAutograd cache: (\d+) hit, (\d+) miss", line)
            if mode:
                name, waited, fx_hit, fx_miss, aot_hit, aot_miss = mode.groups()
                row[name] = f"fx {fx_hit}/{fx_miss} aot {aot_hit}/{aot_miss}"
                if waited is not None:
                    row["waited"] = waited
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", type=Path, default=REPO / "examples" / "cpu")
    p.add_argument("--device", default="cpu")
    p.add_argument("--compile-modes", default="default")
    p.add_argument("--spare-workers", choices=("auto", "on", "off"), default=None)
    args, extra = p.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        config = pair_time._config(tmp, args.tree / "problems", args.tree / "solutions", args.device, None)
        if args.spare_workers is not None:
            import yaml
            values = yaml.safe_load(config.read_text())
            values["spare_workers"] = args.spare_workers
            config.write_text(yaml.safe_dump(values, sort_keys=False))
        flags = ["--compile-modes", args.compile_modes, *extra]
        finished = [pair_time.run(config, tmp / "results", flags) for _ in range(2)]
        runs = [per_problem(f.records) for f in finished]
        logs = [from_logs(f.run_dir) for f in finished]
    modes = args.compile_modes.split(",")
    columns = [*modes, "reference_setup"]
    print(f"tree {args.tree}  device {args.device}  (seconds: first run / second run)")
    print(f"{'problem':40} " + " ".join(f"{c:>28}" for c in columns))
    for problem in sorted(runs[0]):
        cells = [f"{_s(runs[0][problem].get(c))} / {_s(runs[1].get(problem, {}).get(c))}" for c in columns]
        print(f"{problem:40} " + " ".join(f"{c:>28}" for c in cells))
    print("reference logs (warm-up seconds in all, of it waited for by the first mode; per mode the caches' hit/miss):")
    for which, by_slug in zip(("first", "second"), logs):
        for slug_name, row in sorted(by_slug.items()):
            said = "  ".join(f"{m}: {row[m]}" for m in modes if m in row)
            waits = f"warm-up {row.get('warm', '-')} s, waited {row.get('waited', '-')} s"
            print(f"  {which:6} {slug_name:40} {waits}  {said}")
            if row.get("steps"):
                print(f"  {'':6} {'':40} steps: {row['steps']}")
    for which, f in zip(("first", "second"), finished):
        totals = [r["worker"]["phases"]["total"] for r in f.records
                  if ((r.get("worker") or {}).get("phases") or {}).get("total") is not None]
        mean = f"{statistics.mean(totals):.2f} s over {len(totals)} pairs" if totals else "-"
        print(f"{which} run: wall {f.wall_s:.1f} s, pairs' mean total {mean}")
    return 0


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
