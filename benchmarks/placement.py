"""Does where a model's memory lands change its speed? (issue 8: the A/A spread between process pairs)

On the H200 one A/A pair reads 1.0 +/- 0.5% inside its own rounds, yet the same problem in a fresh pair of
processes reads up to 3% (GRU: 13%) away. Two processes run identical code, so what differs is state: where the
weights, inputs and intermediates sit in device memory, which algorithms the libraries picked, host-side state.
This benchmark tests the first in one process: it makes `--placements` copies of the problem's model and inputs,
each allocated after a pad of random size (so each copy lands on different pages), and times them interleaved
(copy 0, 1, .., P-1, then backwards, `--rounds` times) in the harness's cold mode. If the copies' medians differ
by more than their rounds' noise, placement alone moves a call's time and an A/A pair of processes inherits it.

    python benchmarks/placement.py problems/level2/024_conv2d_batchnorm_relu.py [--placements 6] [--rounds 8]

Prints each copy's median and the spread (max/min - 1) against the within-copy noise. GPU only.
"""
from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem", type=Path)
    ap.add_argument("--placements", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--block", type=int, default=4, help="samples per copy per visit")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch
    from harness.worker import timing
    from harness.worker.common import device_inputs, init_inputs, load_module, problem_settings, setup_torch
    if not torch.cuda.is_available():
        print("placement: needs a GPU", file=sys.stderr)
        return 2
    problem = load_module("kb_problem", str(args.problem))
    settings = problem_settings(problem)
    setup_torch(settings)
    torch.manual_seed(args.seed)
    base = problem.Model(*init_inputs(problem)).to("cuda", getattr(torch, settings.dtype))
    rng = random.Random(args.seed)
    copies, pads = [], []
    for _ in range(args.placements):
        pads.append(torch.empty(rng.randrange(1, 2048) << 20, dtype=torch.uint8, device="cuda"))
        model = copy.deepcopy(base)
        inputs = device_inputs(problem, args.seed, settings, "cuda")
        copies.append((model, inputs))
    flusher = timing.L2Flusher(torch.device("cuda"))
    meter = timing.measurement("cold", "cuda", flusher, 1)
    for model, inputs in copies:
        for _ in range(3):
            model(*inputs)
    blocks: list[list[float]] = [[] for _ in copies]
    order = list(range(len(copies)))
    for r in range(args.rounds):
        for i in (order if r % 2 == 0 else order[::-1]):
            model, inputs = copies[i]
            times = [meter.measure(lambda x, m=model: m(*x), inputs)[0].ms for _ in range(args.block)]
            blocks[i].append(statistics.median(times))
    medians = [statistics.median(b) for b in blocks]
    noise = statistics.median(statistics.stdev(b) / statistics.median(b) for b in blocks)
    for i, (m, b) in enumerate(zip(medians, blocks)):
        print(f"copy {i}: median {m:.4f} ms  (block medians {min(b):.4f}..{max(b):.4f})")
    print(f"spread between copies: {max(medians) / min(medians) - 1:+.2%}; noise within a copy (block stdev): "
          f"{noise:.2%}; {args.placements} copies x {args.rounds} rounds x {args.block} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
