"""Where one timed sample's harness work goes, inside a worker (issue 11: the per-sample overhead).

Every timed sample is a request (harness/workers/sampler.py; on the CPU path preceded by a PrepareRequest for the
flush and the inputs); the parent's clock sees its round trip, and `timing.consistency` in a record says how much
of it is not the timed call. The output is then read by the trusted side (harness.run.trusted: `trusted read` below is
the parent's or the reference's read at the drawn positions). This builds the same Sampler a worker builds, for one
problem's reference on one device, and times each part of a sample separately, each part synchronised (so the
figures attribute device work to the part that queued it):

    clean    the pass over torch's namespaces that undoes a candidate's replacements while inputs are drawn
    inputs   get_inputs() under the sample's seed, on the device
    snapshot what the mutation check keeps of the inputs (sampler.snapshot: a copy up to PRISTINE_BYTES, else one
             keyed checksum per tensor)
    measure  the mode's measurement (flush, events, the call, synchronize)
    tamper   the integrity checks after the sample (clocks, harness globals, instance attributes)
    return   8 positions of the output read from memory when the call returned, and again before the next sample
    export   where the output lies, for the trusted side (rawread.export: on the GPU, the allocation's IPC handle)
    mutate   the inputs compared with that snapshot (sampler.differs: the copy, or the checksum again)
    wire     the reply as a message and its JSON line
    trusted read   the reference's read of its own output at points.CHECK_POINTS positions per tensor (what the
             GPU reference does for each of its samples; the candidate's read through its IPC mapping is the same
             indexing on mapped memory)

    python benchmarks/sample_overhead.py problems/level1/001_square_matmul.py [--device cuda] [--samples 200]

Prints the median of each part in milliseconds; nothing here is asserted.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()

    import torch
    from harness.shared import messages as m
    from harness.shared.channel import encode
    from harness.worker import integrity, rawread
    from harness.shared import points
    from harness.worker.common import device_inputs, load_module, problem_settings
    from harness.worker.peer import values_at
    from harness.worker.sampler import Sampler, differs, snapshot

    torch.set_num_threads(1)
    problem = load_module("kb_problem", str(args.problem))
    settings = problem_settings(problem)
    model = problem.Model(*problem.get_init_inputs()).to(args.device)
    rawread.bind(cuda=args.device != "cpu")
    integrity.snapshot()
    mode = "host" if args.device == "cpu" else "cold"
    sampler = Sampler({"eager": lambda x: model(*x)}, problem, settings, args.device,
                      m.TimingSpec(mode, 3, args.device != "cpu", 20), True, trusted=True)
    sync = torch.cuda.synchronize if args.device != "cpu" else (lambda: None)
    meter = sampler._meter("eager")
    parts: dict[str, list[float]] = {}

    def clean_pass():
        with integrity.clean_torch():
            pass

    def timed(name, fn):
        sync()
        t0 = time.perf_counter()
        value = fn()
        sync()
        parts.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
        return value

    for i in range(args.samples + 10):
        seed = 1000 + i
        timed("clean", clean_pass)                                       # torch as it was, nothing replaced
        inputs = timed("inputs", lambda: device_inputs(problem, seed, settings, args.device))
        pristine = timed("snapshot", lambda: snapshot(inputs))
        times, out, used = timed("measure", lambda: meter.measure(sampler.calls["eager"], inputs))
        tampered = timed("tamper", sampler.tampered)
        outs = out if isinstance(out, list) else [out]
        timed("return", lambda: [rawread.read(outs, 77 + i, rawread.RETURN_POINTS) for _ in range(2)])
        exported = timed("export", lambda: rawread.export(outs))
        mutated = timed("mutate", lambda: differs(used, pristine))
        timed("wire", lambda: encode(m.wire(m.SampleResult(times.ms, times.host_ms, times.lag_ms, tampered,
                                                           outputs=[exported], mutated=mutated))))
        timed("trusted read", lambda: [values_at(t, points.output_positions(55 + i, 0, j, t.numel()))
                                       for j, t in enumerate(outs)])
        parts.setdefault("call (reported)", []).append(times.ms)
        if i == 9:
            parts.clear()                                   # warm-up samples
    print(f"{args.problem} on {args.device}, {args.samples} samples: median ms per part")
    total = 0.0
    for name, values in parts.items():
        med = statistics.median(values)
        total += med if name != "call (reported)" else 0.0
        print(f"  {name:16} {med:9.4f}")
    print(f"  {'harness work':16} {total - statistics.median(parts['call (reported)']):9.4f}  "
          "(all parts but the reported call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
