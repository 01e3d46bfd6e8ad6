"""Where a worker's time goes inside a pair's parts: the stages that workers log with KB_TRACE=1
(harness.worker.common.trace), read back from a run's logs (`<run>/logs/*.log`) and averaged per role.

    KB_TRACE=1 python run_eval.py ... --output-dir results       # a run whose workers log their stages
    python benchmarks/trace_pair.py results/RUN_ID [RUN_ID ...]  # per role: the mean seconds from each stage to the next

Every worker first logs `started` and `imported` (torch imported), so `imported -> job` is how long a spare waited
for its job (near 0: the pair waited for the spare); a reference then logs `warm` (CUDA tracing started, after its
job).
A candidate's stages: job (its job arrived), profiler warm, inputs drawn, loaded (the candidate imported and its
ModelNew built and moved), per trial `<label> called` (the call returned, device idle), `<label> out` (its outputs
exported, or written to a file) and on the GPU `<label> checked` (the reference compared them in place), then
trials, settled (ready for timed samples). A reference's: job, model built (the problem imported, Model built and
moved), state saved (its parameters written for the candidates), model and expected outputs (the trials' inputs and
outputs), lint checks, compile baselines, probe, ready; later, once a process, what DeriveRequest asks: flops (the
FLOP count), `signature <scheme>` (each reduced-precision signature forward), signatures (all of them), float64
(the exact float64 forward; `draw parked` inside either, where trial 0's draw went to the host) and derived (its
figures against trial 0's expected output); per pair verifying and verified. Nothing here is asserted; it prints
figures.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^kb-harness: trace (\d+\.\d+) (\w+) (.+?)(?: \(allocated \d+ MiB, peak \d+ MiB(?:, reserved \d+ MiB)?\))?(?: \[imported [^\]]*\])?$")


def stages(log: Path) -> list[tuple[float, str, str]]:
    """(wall time, role, stage) of each trace line in one worker log."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        hit = LINE.match(line.strip())
        if hit:
            found.append((float(hit.group(1)), hit.group(2), hit.group(3)))
    return found


def steps(runs: list[Path]) -> dict[tuple[str, str], list[float]]:
    """(role, 'stage a -> stage b') -> the seconds between consecutive stages, over every log of `runs`."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in runs:
        for log in sorted((run / "logs").glob("*.log")):
            found = stages(log)
            # the reference's executor is a worker of the candidate's role (harness.run.reference_executor): its
            # log's name tells it apart
            executor = log.name.endswith("__reference-executor.log")
            for (t0, role, a), (t1, _, b) in zip(found, found[1:]):
                step = f"{a.removeprefix(role + ' ')} -> {b.removeprefix(role + ' ')}"
                out[("executor" if executor else role, step)].append(t1 - t0)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (results/RUN_ID)")
    args = parser.parse_args(argv)
    found = steps(args.runs)
    if not found:
        print("no trace lines: run with KB_TRACE=1", file=sys.stderr)
        return 1
    print(f"{'role':10} {'from -> to':58} {'n':>4} {'mean s':>8} {'median s':>9} {'max s':>7}")
    for (role, step), values in sorted(found.items()):
        print(f"{role:10} {step[:58]:58} {len(values):4} {statistics.mean(values):8.3f} "
              f"{statistics.median(values):9.3f} {max(values):7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
