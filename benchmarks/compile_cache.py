"""The torch.compile baselines' cache across runs (harness.run.compilecache): the same selection run twice over one
fresh cache_dir; per problem, each mode's `compile_seconds` and the reference's setup (`worker.phases.
reference_setup`; absent from a record that was measured again, `retried`) in the first run (empty cache) and the
second (the baselines loaded from `<cache_dir>/compile/`).

    python benchmarks/compile_cache.py [--tree examples/cpu] [--device cpu|cuda] [--compile-modes default,...]
                                       [RUN_EVAL FLAGS...]

e.g. on a GPU: python benchmarks/compile_cache.py --tree . --device cuda --compile-modes
default,max-autotune-no-cudagraphs --level 2 --candidate 'aa_*'. Nothing is asserted; the target (issue 45): the
second run's compile part at most 2 s per mode.
"""
from __future__ import annotations

import argparse
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", type=Path, default=REPO / "examples" / "cpu")
    p.add_argument("--device", default="cpu")
    p.add_argument("--compile-modes", default="default")
    args, extra = p.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        config = pair_time._config(tmp, args.tree / "problems", args.tree / "solutions", args.device, None)
        flags = ["--compile-modes", args.compile_modes, *extra]
        runs = [per_problem(pair_time.run(config, tmp / "results", flags).records) for _ in range(2)]
    columns = [*args.compile_modes.split(","), "reference_setup"]
    print(f"tree {args.tree}  device {args.device}  (seconds: first run / second run)")
    print(f"{'problem':40} " + " ".join(f"{c:>28}" for c in columns))
    for problem in sorted(runs[0]):
        cells = [f"{_s(runs[0][problem].get(c))} / {_s(runs[1].get(problem, {}).get(c))}" for c in columns]
        print(f"{problem:40} " + " ".join(f"{c:>28}" for c in cells))
    return 0


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
