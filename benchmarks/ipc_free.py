"""What a GPU candidate's settle costs: torch.cuda.empty_cache() after its trials. Before its timed samples a candidate
empties its allocator's cache (harness.worker.sampler.Sampler.settle, candidate._serve_staged_device); on 4-6 GiB
problems that took 0.8-1.2 s on an H200 (2.55 s for 18 GiB), where the reference's own emptying of 5 GiB took
milliseconds (docs/measurements.md, twenty-second session). The candidate's trial outputs are exported (CUDA IPC,
rawread.export) and mapped by the reference (harness.worker.peer) until the pair ends; this measures whether that
is what makes freeing them slow. Per size, seconds of `empty_cache` after the block is dropped:

- `plain`: a block never exported;
- `exported`: exported, never mapped by another process;
- `mapped`: exported and mapped by a second process that still holds the mapping;
- `unmapped`: exported, mapped by the second process and closed there before the block is dropped;
- `read`, `read, closed`: the same two, the second process having read the whole block through its mapping (as the
  reference reads a trial's output); and the seconds of the second process's close after the block was freed.

    python benchmarks/ipc_free.py [--gib 1 2.5 6]

Needs a CUDA GPU. Nothing here is asserted; it prints figures.
"""
from __future__ import annotations

import argparse
import base64
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

_PEER = """
import base64, sys
sys.path.insert(0, sys.argv[1])
import torch
torch.zeros(1, device="cuda")                   # the primary context, current on this thread
from harness.worker import cudadriver
cudadriver.bind()
mapped = None
for line in sys.stdin:
    op, _, arg = line.strip().partition(" ")
    if op in ("map", "read"):
        mapped = cudadriver.open_handle(base64.b64decode(arg))
        if op == "read" and not isinstance(mapped, int):
            from harness.worker.peer import _Interface
            float(torch.as_tensor(_Interface(*mapped), device="cuda").view(torch.float32).sum())
    elif op == "close" and mapped is not None and not isinstance(mapped, int):
        cudadriver.close_handle(mapped[0])
        mapped = None
    print("done", flush=True)
"""


closed: dict[str, float] = {}      # way -> seconds of the peer's close after the block was freed


def _freed(gib: float, way: str, peer) -> float:
    import torch
    from harness.worker import cudadriver
    block = torch.ones(int(gib * (1 << 30)) // 4, device="cuda")
    torch.cuda.synchronize()
    if way != "plain":
        raw, _ = cudadriver.export(block.data_ptr())
        if way in ("mapped", "unmapped", "read", "read, closed"):
            _ask(peer, ("read " if way.startswith("read") else "map ") + base64.b64encode(raw).decode("ascii"))
        if way in ("unmapped", "read, closed"):
            _ask(peer, "close")
    del block
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda.empty_cache()
    seconds = time.perf_counter() - t0
    if way in ("mapped", "read"):
        t0 = time.perf_counter()
        _ask(peer, "close")
        closed[way] = time.perf_counter() - t0
    return seconds


def _ask(peer, line: str) -> None:
    peer.stdin.write(line + "\n")
    peer.stdin.flush()
    if peer.stdout.readline().strip() != "done":
        raise RuntimeError("the peer process did not answer")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, nargs="+", default=[1.0, 2.5, 6.0])
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("ipc_free.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    from harness.worker import cudadriver
    torch.zeros(1, device="cuda")
    cudadriver.bind()
    peer = subprocess.Popen([sys.executable, "-c", _PEER, str(REPO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    ways = ("plain", "exported", "mapped", "unmapped", "read", "read, closed")
    try:
        _freed(0.0625, "mapped", peer)                      # warm: both contexts, the IPC path
        print(torch.cuda.get_device_name(), f"torch {torch.__version__}")
        print(f"{'GiB':>6} " + " ".join(f"{w:>13}" for w in ways) + "   (seconds of empty_cache)"
              + "   peer's close after: mapped, read")
        for gib in args.gib:
            print(f"{gib:>6.2f} " + " ".join(f"{_freed(gib, w, peer):>13.3f}" for w in ways)
                  + f"   {closed['mapped']:.3f} {closed['read']:.3f}", flush=True)
    finally:
        peer.stdin.close()
        peer.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
