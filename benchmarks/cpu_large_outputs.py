"""The CPU path's A/A with large outputs (issue 48 item 4): a ReLU whose output is 1, 32 and 128 MiB, each problem
run against itself by `run_eval.py calibrate --device cpu` in fresh process pairs. Identical code should read 1.0
within 5% at every size: both sides allocate their outputs the same way (glibc's mmap threshold is fixed at 32 MiB
in every worker, so an output of 32 MiB or more is a fresh mapping, page faults and all, on both sides alike).

    python benchmarks/cpu_large_outputs.py [--sizes-mib 1,32,128] [--processes 3] [--max-pair-seconds 20]

Prints, per size, the speedup, its CI, each process pair's reading and both sides' median sample. Nothing is
asserted: the figures go to docs/measurements.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBLEM = '''"""A/A benchmark problem: ReLU of a {mib} MiB float32 tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn({rows}, 1024)]


def get_init_inputs():
    return []
'''


def write_tree(root: Path, sizes_mib: list[int]) -> None:
    for mib in sizes_mib:
        rows = mib * 1024 * 1024 // (4 * 1024)
        folder = root / "problems" / "level1"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{len(list(folder.iterdir())) + 1:03d}_relu_{mib}mib.py").write_text(
            PROBLEM.format(mib=mib, rows=rows))
    (root / "solutions").mkdir(exist_ok=True)


def calibrate(root: Path, processes: int, max_pair_seconds: float) -> list[dict]:
    out = root / "results"
    cmd = [sys.executable, str(REPO / "run_eval.py"), "calibrate", "--device", "cpu", "--problems-dir",
           str(root / "problems"), "--solutions-dir", str(root / "solutions"), "--output-dir", str(out),
           "--processes", str(processes), "--max-pair-seconds", str(max_pair_seconds)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    print(done.stdout[-3000:])
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    if done.returncode not in (0, 1) or not runs:
        sys.exit(f"calibrate failed ({done.returncode}): {done.stderr[-2000:]}")
    return [json.loads(line) for line in (runs[-1] / "results.jsonl").read_text().splitlines()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes-mib", default="1,32,128")
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--max-pair-seconds", type=float, default=20)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    with tempfile.TemporaryDirectory(prefix="kb-large-") as tmp:
        root = Path(tmp)
        write_tree(root, sizes)
        records = calibrate(root, args.processes, args.max_pair_seconds)
    print(f"{'problem':<22} {'speedup':>8}  {'95% CI':<18} {'process pairs':<28} {'ref ms':>8} {'cand ms':>8}")
    for r in sorted(records, key=lambda r: r["problem"]):
        t = r.get("timing") or {}
        ci = r.get("speedup_ci") or [None, None]
        pairs = " ".join(f"{p['speedup']:.3f}" for p in t.get("processes") or [])
        ref, cand = (t.get("reference") or {}).get("median_ms"), (t.get("candidate") or {}).get("median_ms")
        print(f"{r['problem']:<22} {r.get('speedup') or 0:>8.4f}  [{ci[0] or 0:.4f}, {ci[1] or 0:.4f}]  "
              f"{pairs:<28} {ref or 0:>8.3f} {cand or 0:>8.3f}  {r['status']}")


if __name__ == "__main__":
    main()
