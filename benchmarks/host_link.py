"""What moving a GPU tensor to the host and back costs here, the primitives behind the reference's choices
(harness.worker.reference: trial 0's outputs kept on the host or made again; harness.worker.float64.Parked;
verify's comparisons of a piece kept on the host): per size, in seconds,

- `pin`: a fresh pinned host buffer (torch.empty(pin_memory=True); torch's caching host allocator rounds a block up
  to a power of two, and a freed block serves the next request of its class: the default sizes are each of a class
  of their own);
- `d2h pinned`, `d2h pageable`: a device tensor copied into a fresh pinned / pageable host tensor (the pageable one's
  pages are touched by the copy);
- `h2d pinned`, `h2d pageable`: that host tensor copied back to the device;
- `to64 host`: `t.to("cuda", torch.float64)` of a float32 host tensor (torch converts on the host first), against
  `to64 device`: `t.to("cuda").to(torch.float64)` (crosses in float32, converts on the device), both from pinned
  memory; each in CHUNK_BYTES pieces as verify makes them where `--pieces`.

    python benchmarks/host_link.py [--gib 0.25 1 2.5 6] [--one-core] [--alloc-conf CONF] [--harness]

`--one-core` holds the process to one core first, as a reference's threads are held to its timing core from its
first timed sample on (harness.worker.common.pin_for_timing), which its derive's parking follows. `--alloc-conf`
sets PYTORCH_CUDA_ALLOC_CONF before torch starts, e.g. "pinned_use_cuda_host_register:True,
pinned_num_register_threads:8": torch then maps host memory itself and registers it, its pages touched by that many
threads. `--harness` pins as a GPU reference does: held to one core, torch's host allocator set by
harness.worker.hostpin.register_pinned (at run time, not from the environment), each block made by host_empty, which
widens the calling thread to the process's cores meanwhile.

Needs a CUDA GPU. Nothing here is asserted; it prints figures.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _timed(fn) -> tuple[float, object]:
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def one(gib: float, pieces: bool, harness: bool = False) -> dict[str, float]:
    import torch
    from harness.shared.memplan import CHUNK_BYTES
    from harness.worker.hostpin import host_empty
    n = int(gib * (1 << 30)) // 4
    x = torch.randn(n, device="cuda")
    figures: dict[str, float] = {}
    if harness:
        figures["pin"], pinned = _timed(lambda: host_empty((n,), torch.float32))
    else:
        figures["pin"], pinned = _timed(lambda: torch.empty(n, dtype=torch.float32, pin_memory=True))
    figures["d2h pinned"], _ = _timed(lambda: pinned.copy_(x))
    figures["d2h pageable"], pageable = _timed(lambda: x.to("cpu"))
    figures["h2d pinned"], _ = _timed(lambda: pinned.to("cuda"))
    figures["h2d pageable"], _ = _timed(lambda: pageable.to("cuda"))
    step = CHUNK_BYTES // 8 if pieces else n

    def to64(device_side: bool):
        for i in range(0, n, step):
            part = pinned[i:i + step]
            (part.to("cuda").to(torch.float64) if device_side else part.to("cuda", torch.float64)).max()

    figures["to64 host"], _ = _timed(lambda: to64(False))
    figures["to64 device"], _ = _timed(lambda: to64(True))
    del x, pinned, pageable
    torch.cuda.empty_cache()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, nargs="+", default=[0.25, 1.0, 2.5, 6.0])
    parser.add_argument("--pieces", action="store_true", help="to64 in verify's CHUNK_BYTES pieces")
    parser.add_argument("--one-core", action="store_true", help="hold this process to one core first")
    parser.add_argument("--alloc-conf", default=None, help="PYTORCH_CUDA_ALLOC_CONF for this process")
    parser.add_argument("--harness", action="store_true",
                        help="pin as a GPU reference does: held to one core, register_pinned, host_empty")
    args = parser.parse_args()
    import os
    if args.harness:
        os.environ["KB_CPUS"] = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    if args.one_core or args.harness:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if args.alloc_conf is not None:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.alloc_conf
    import torch
    if not torch.cuda.is_available():
        print("host_link.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    threads = 0
    if args.harness:
        from harness.worker.hostpin import register_pinned
        threads = register_pinned()
    print(torch.cuda.get_device_name(), f"torch {torch.__version__}", f"cores {len(os.sched_getaffinity(0))}",
          f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}",
          f"harness register threads {threads}" if args.harness else "")
    one(0.0625, args.pieces, args.harness)                # warm: the context, the kernels, the host allocator
    rows = [(g, one(g, args.pieces, args.harness)) for g in args.gib]
    keys = list(rows[0][1])
    print(f"{'GiB':>6} " + " ".join(f"{k:>13}" for k in keys) + "   (seconds)")
    for g, figures in rows:
        print(f"{g:>6.2f} " + " ".join(f"{figures[k]:>13.3f}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
