"""Where the reference's derive goes (messages.DeriveRequest, harness.worker.reference._derive): the work it does
once per reference process, beside the first candidate's start and trials, which trial 0's check waits for. Per
problem: one fp32 forward, the FLOP count, each reduced-precision scheme's float64 forward
(harness.worker.precision.Rounded) and the exact float64 forward, each through the reference's own
`float64_reference` (harness.worker.float64) on inputs parked on the host as `Parked` leaves them; each run twice,
so that what the first call of a kind pays (kernels loaded, handles made) shows apart from the forward's own time.
Then `derive`: the whole of `_derive` as a reference process runs it after its setup (reference._prepare with the
default 5 trials, trial 0's outputs settled as the reference settles them, made again or on the host; the parking,
the FLOP count's product count, the figures against trial 0's expected output), once, after the rest.

    python benchmarks/derive_time.py problems/level2/02*.py [--device cuda]

Meant for the GPU: on the CPU (--device cpu) a problem of GiBs (level 1's elementwise ones) holds several float64
copies at once and does not fit a 24 GB host.

Nothing here is asserted; it prints figures (seconds).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _timed(fn, device: str) -> float:
    import torch
    if device != "cpu":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device != "cpu":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def one(path: Path, device: str) -> dict[str, list[float]]:
    import torch
    from harness.worker import float64, flops, precision
    from harness.worker.common import device_inputs, init_inputs, load_module, problem_settings, setup_torch
    problem = load_module("kb_problem", str(path))
    settings = problem_settings(problem)
    setup_torch(settings)
    torch.manual_seed(0)
    model = problem.Model(*init_inputs(problem)).to(device=device, dtype=getattr(torch, settings.dtype))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    inputs = device_inputs(problem, 0, settings, device)
    host = [x.to("cpu") if isinstance(x, torch.Tensor) else x for x in inputs]
    out: dict[str, list[float]] = {}

    def add(name: str, fn) -> None:
        out.setdefault(name, []).append(_timed(fn, device))

    for _ in range(2):
        add("fp32 forward", lambda: model(*inputs))
        add("flops", lambda: flops.count(model, *inputs))
        for scheme in precision.SCHEMES:
            add(f"f64 {scheme}", lambda s=scheme: float64.float64_reference(
                model, state, lambda: list(host), mode=precision.Rounded(s), device=device))
        add("f64 exact", lambda: float64.float64_reference(model, state, lambda: list(host), device=device))
    del model, inputs, host
    out["derive"] = [_whole_derive(path, device)] * 2
    return out


def _whole_derive(path: Path, device: str) -> float:
    """Seconds of reference._derive as a reference process runs it, after its setup."""
    import tempfile
    import torch
    from types import SimpleNamespace
    from harness.worker import float64, reference

    def peak():
        return int(torch.cuda.max_memory_allocated()) if device != "cpu" else None

    memory = SimpleNamespace(reset_peak=lambda: None, peak=peak, fp64_note=None, eager_peak=None)
    with tempfile.TemporaryDirectory() as scratch:
        job = SimpleNamespace(problem_path=str(path), precision=None, seed=0, trials=5, scratch=scratch)
        _, model, _, trials, state = reference._prepare(job, device, memory)
        trials.settle_first(memory.eager_peak)
        fp64 = float64.Float64(model, state, trials, device)
        return _timed(lambda: reference._derive(model, trials, True, device, True, memory, fp64), device)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    totals: dict[str, list[float]] = {}
    for path in args.problems:
        found = one(path, args.device)
        first = sum(v[0] for k, v in found.items() if k not in ("fp32 forward", "derive"))
        again = sum(v[1] for k, v in found.items() if k not in ("fp32 forward", "derive"))
        print(f"{path.stem:44} parts first {first:6.3f} s, again {again:6.3f} s | "
              + "  ".join(f"{k} {v[0]:.3f}/{v[1]:.3f}" for k, v in found.items()), flush=True)
        for k, v in found.items():
            totals.setdefault(k, []).append(v[0])
    n = len(args.problems)
    print("mean first call: " + "  ".join(f"{k} {sum(v) / n:.3f}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
