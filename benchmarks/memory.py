"""GPU memory per side of an A/A pair: runs `run_eval.py calibrate` (each problem's Model against itself) over a
sample of problems on the GPU and prints, per problem, the eager call's peak, each worker's peak
(torch.cuda.max_memory_allocated over the whole process, as the record's `worker.memory` reports it; in records
written before `arena_peak_bytes` the reference's includes the staged path's arena), the plan's shares, and the ratio
of both peaks together to the target (2x the eager peak + 1.5 GiB; under 1.0 is within it).
The summary also counts the pairs whose each side is within that target (issue 44's reading), as recorded and with
the staged path's arena counted on the candidate's side.
A problem the budget cannot hold prints its `harness_oom` line instead.

    python benchmarks/memory.py                                   # 4 problems each of levels 1, 2, 3
    python benchmarks/memory.py --per-level 10 --gpu-memory-gb 24 # emulate a 24 GB card
    python benchmarks/memory.py --problem 'level1/018_*'          # one problem (a glob over level/name)
    python benchmarks/memory.py -- --compile-modes default        # more run_eval.py flags after --
    python benchmarks/memory.py --from RUN_DIR... [--markdown]    # the table of runs already made (a suite pass)

The sample: the first --per-level problems of each level in problems/ (sorted by name) and level1/018_relu (the
problem the budget was measured on first), or --problem GLOB. Each
problem runs one process pair with a short timing cap (--max-pair-seconds 3, no torch.compile baselines, unless
given after --). Nothing here is asserted (tests/test_gpu.py's test_memory_* assert the target on fixtures).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GIB = 1 << 30
ISSUE = "level1/018_relu"       # 2.5 GiB in, 2.5 GiB out: its A/A pair ended `oom` on an 80 GB H100 before the budget


def sample(problems_dir: Path, per_level: int, pattern: str | None) -> list[str]:
    """`level/name` ids: the first `per_level` of each level, or those matching `pattern`."""
    chosen = []
    for level in sorted(p for p in problems_dir.iterdir() if p.is_dir()):
        ids = sorted(f"{level.name}/{f.stem}" for f in level.glob("*.py") if not f.name.startswith("_"))
        chosen += [i for i in ids if fnmatch.fnmatch(i, pattern)] if pattern else ids[:per_level]
    if not pattern and (problems_dir / "level1" / f"{ISSUE.split('/')[1]}.py").is_file() and ISSUE not in chosen:
        chosen.append(ISSUE)                       # the problem the budget was measured on first
    return chosen


def run(problem: str, args: argparse.Namespace, extra: list[str], out: Path) -> list[dict[str, Any]]:
    level, name = problem.split("/", 1)
    cmd = [sys.executable, str(REPO / "run_eval.py"), "calibrate", "--problems-dir", str(args.problems_dir),
           "--level", level, "--problem", name, "--device", "cuda", "--processes", "1", "--json",
           "--output-dir", str(out), "--max-pair-seconds", "3", "--compile-modes", "none"]
    if args.gpu_memory_gb is not None:
        cmd += ["--gpu-memory-gb", str(args.gpu_memory_gb)]
    done = subprocess.run(cmd + extra, cwd=REPO, capture_output=True, text=True)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not records:
        print(f"{problem}: no record (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}",
              file=sys.stderr)
    return records


def gib(n: Any) -> str:
    return f"{n / GIB:.2f}" if isinstance(n, (int, float)) else "-"


HEADER = ["problem", "status", "eager GiB", "ref peak", "cand peak", "ref share", "cand share",
          "(ref+cand)/target", "retries ref/cand", "note"]


def _memory(record: dict[str, Any]) -> dict[str, Any]:
    return (record.get("worker") or {}).get("memory") or {}


def _peaks(record: dict[str, Any]) -> tuple[int, int, int] | None:
    """(eager, reference, candidate) peak bytes, where the record has all three."""
    values = tuple(_memory(record).get(k) for k in ("eager_peak_bytes", "reference_peak_bytes",
                                                     "candidate_peak_bytes"))
    return values if all(isinstance(x, int) for x in values) else None


def _target(eager: int) -> float:
    """What each side may hold: 2 x the eager peak + 1.5 GiB (issue 44)."""
    return 2 * eager + 1.5 * GIB


def _ratio(peaks: tuple[int, int, int]) -> float:
    """Both sides' peaks together against the target (under 1.0: within it)."""
    eager, ref, cand = peaks
    return (ref + cand) / _target(eager)


def _arena(record: dict[str, Any]) -> tuple[int, bool]:
    """The staged path's arena (the inputs the reference writes for the candidate, which on the in-process path the
    candidate's own process holds), and whether `reference_peak_bytes` includes it: the measured `arena_peak_bytes`
    where the record has it (apart from both peaks), else the plan's `arena_bytes`, which the reference's peak of a
    record written before `arena_peak_bytes` includes."""
    memory = _memory(record)
    measured = memory.get("arena_peak_bytes")
    if isinstance(measured, int):
        return measured, False
    return memory.get("arena_bytes") or 0, True


def _each_side(record: dict[str, Any]) -> tuple[bool, bool]:
    """Whether each side's peak is within 2 x the eager peak + 1.5 GiB: as the record counts them, and with the
    staged path's arena (_arena) counted on the candidate's side (taken off the reference's where it included it)."""
    eager, ref, cand = _peaks(record)
    arena, in_reference = _arena(record)
    target = _target(eager)
    return max(ref, cand) <= target, max(ref - arena if in_reference else ref, cand + arena) <= target


def _over(record: dict[str, Any]) -> str:
    """A pair with a side over 2 x the eager peak + 1.5 GiB, as 'problem: reference 9.27 > 6.39 GiB (arena 0.00)'."""
    eager, ref, cand = _peaks(record)
    target = _target(eager)
    sides = ", ".join(f"{side} {gib(peak)}" for side, peak in (("reference", ref), ("candidate", cand))
                      if peak > target)
    return f"{record['problem']}: {sides} > {gib(target)} GiB (arena {gib(_arena(record)[0])})"


def row(record: dict[str, Any]) -> list[str]:
    memory, peaks = _memory(record), _peaks(record)
    eager, ref, cand = peaks or (memory.get(k) for k in ("eager_peak_bytes", "reference_peak_bytes",
                                                         "candidate_peak_bytes"))
    ratio = f"{_ratio(peaks):.2f}" if peaks else "-"
    retries = [memory.get(f"{side}_alloc_retries") for side in ("reference", "candidate")]
    fp64 = memory.get("fp64") if str(memory.get("fp64") or "").startswith("skipped") else ""
    note = record.get("error") if record.get("status") != "ok" else f"fp64 {fp64}" if fp64 else ""
    return [record["problem"], record.get("status") or "-", gib(eager), gib(ref), gib(cand),
            gib(memory.get("reference_share_bytes")), gib(memory.get("candidate_share_bytes")), ratio,
            "/".join("-" if r is None else str(r) for r in retries), (note or "")[:90]]


def from_runs(run_dirs: list[Path]) -> list[dict[str, Any]]:
    """The records of finished run folders (their results.jsonl), the latest run's where a problem appears twice."""
    latest: dict[str, dict[str, Any]] = {}
    for run_dir in sorted(run_dirs, key=lambda d: d.name):
        jsonl = run_dir / "results.jsonl" if run_dir.is_dir() else run_dir
        for line in jsonl.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                latest[f"{record.get('problem')}/{record.get('candidate')}"] = record
    return [latest[k] for k in sorted(latest)]


def table(rows: list[list[str]], markdown: bool) -> list[str]:
    """The rows as aligned text, or as a markdown table (docs/)."""
    if markdown:
        return ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER),
                *("| " + " | ".join(r) + " |" for r in rows)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADER)]
    return ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths)),
            *("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)]


def summary(records: list[dict[str, Any]]) -> list[str]:
    """How the measured pairs stand against the target, the most a candidate held beyond its eager peak, and the
    largest pair."""
    measured, beyond, pairs = [], [], []
    for record in records:
        peaks = _peaks(record)
        if peaks:
            eager, ref, cand = peaks
            measured.append(_ratio(peaks))
            beyond.append(((cand - eager) / GIB, record["problem"]))
            pairs.append(((ref + cand) / GIB, record["problem"]))
    lines = [f"target: both peaks together <= 2 x eager peak + 1.5 GiB; {sum(1 for x in measured if x <= 1)} of "
             f"{len(measured)} measured pairs within it"]
    sides = [_each_side(record) for record in records if _peaks(record)]
    if sides:
        lines.append(f"each side <= 2 x eager peak + 1.5 GiB (issue 44): {sum(1 for x, _ in sides if x)} of "
                     f"{len(sides)}; with the staged path's arena (the candidate's inputs) on the candidate's side: "
                     f"{sum(1 for _, y in sides if y)} of {len(sides)}")
        for record in records:
            if _peaks(record) and not _each_side(record)[0]:
                lines.append(f"  over: {_over(record)}")
    if beyond:
        most, where = max(beyond)
        top, which = max(pairs)
        lines.append(f"a candidate's peak at most its eager peak + {most:.2f} GiB ({where}); the largest pair "
                     f"{top:.2f} GiB ({which})")
    return lines


def main(argv: list[str]) -> int:
    own, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems-dir", type=Path, default=REPO / "problems")
    p.add_argument("--per-level", type=int, default=4, help="problems per level (default 4)")
    p.add_argument("--problem", help="a glob over level/name instead of the per-level sample")
    p.add_argument("--gpu-memory-gb", type=float, help="the budget (default: the card's)")
    p.add_argument("--from", dest="runs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="the table of these finished runs' records (e.g. a calibrate pass) instead of running")
    p.add_argument("--markdown", action="store_true", help="print the table in markdown (docs/)")
    args = p.parse_args(own)
    if args.runs:
        records = from_runs(args.runs)
    else:
        records = []
        with tempfile.TemporaryDirectory(prefix="kb-memory-") as tmp:
            for problem in sample(args.problems_dir, args.per_level, args.problem):
                for record in run(problem, args, extra, Path(tmp)):
                    records.append(record)
                    print("  ".join(row(record)), file=sys.stderr, flush=True)      # as they come
    print("\n".join(table([row(r) for r in records], args.markdown)))
    print("\n".join(summary(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
