"""What torch.profiler's first CUDA trace costs a worker, and under which settings (issue 8: time per pair).

Both workers of a GPU pair start the profiler once before their rounds (harness.worker.profiling.warm_up); on the
H200 that first start took 3.5-6 s per process, the largest fixed cost of an A/A pair. Each variant below runs in
a fresh Python process (so each pays the first start) and prints, in seconds:

    import    `import torch`
    context   the CUDA context and one small matmul
    first     the first trace (the warm-up as the harness does it, unless the variant changes it)
    second    a second trace of one matmul (what every later profiled call pays)
    launches  host time of 2000 empty-ish launches after the traces (does a started profiler tax launches?)

Variants:
    harness         warm_up() as the workers call it (the autograd profiler torch.profiler wraps, CUDA activity
                    only); `second` is profile_call() on a matmul, and `kernels` the kernels it saw
    torch_profiler  torch.profiler.profile(activities=[CUDA]), as the workers started it until 2026-11-24
    cpu_only        torch.profiler.profile(activities=[CPU]): no CUPTI, so what torch.profiler's own start costs
    none            no trace at all: launches as a process that never profiled

On the H200 (2026-11-24, fresh processes, two runs each): torch_profiler's first trace 3.5-5.9 s, cpu_only's
3.4-5.6 s (torch.profiler's start imports torch._inductor), harness's 0.02 s, every later trace 3-6 ms, the
context 0.4-0.6 s. Before the switch to the autograd profiler, warm_up() in a thread beside a Python loop took
35-49 s (it cannot hide behind the trials), and CUDA_MODULE_LOADING=EAGER moved 3-5 s into the context and saved
nothing.

    python benchmarks/profiler_start.py [--variants harness,cpu_only,...] [--repeat 2]

GPU only; nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ["harness", "torch_profiler", "cpu_only", "none"]


def child(variant: str) -> dict:
    t0 = time.perf_counter()
    import torch
    from torch.profiler import ProfilerActivity, profile
    sys.path.insert(0, str(ROOT))
    from harness.worker.profiling import profile_call, warm_up
    result: dict = {"variant": variant, "import": time.perf_counter() - t0}

    def matmul(inputs=None):
        a = torch.randn(256, 256, device="cuda")
        return a @ a

    def trace(activities):
        with profile(activities=activities):
            matmul()
            torch.cuda.synchronize()

    activities = {"torch_profiler": [ProfilerActivity.CUDA], "cpu_only": [ProfilerActivity.CPU]}.get(variant)
    t0 = time.perf_counter()
    torch.cuda.init()
    matmul().sum().item()
    result["context"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if variant == "harness":
        warm_up()
    elif activities is not None:
        trace(activities)
    result["first"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if variant == "harness":
        profile = profile_call(matmul, [], "cuda")
        result["kernels"] = profile.kernels if profile is not None else None
    elif activities is not None:
        trace(activities)
    result["second"] = time.perf_counter() - t0
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    result["launches"] = time.perf_counter() - t0
    result["inductor_imported"] = "torch._inductor" in sys.modules
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)), flush=True)
        return 0
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        print(f"profiler_start: unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}",
              file=sys.stderr)
        return 2
    print(f"{'variant':14} {'import':>7} {'context':>8} {'first':>7} {'second':>7} {'launches':>9}  other")
    for _ in range(args.repeat):
        for name in names:
            proc = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True,
                                  text=True, timeout=300)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode or not lines:
                print(f"{name:14} failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(lines[-1])
            other = f"inductor imported: {r['inductor_imported']}"
            other += f"; kernels {r['kernels']}" if "kernels" in r else ""
            print(f"{name:14} {r['import']:7.2f} {r['context']:8.2f} {r.get('first', 0.0):7.2f} "
                  f"{r.get('second', 0.0):7.3f} {r['launches']:9.4f}  {other}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
