"""Where a pair's time goes: runs `run_eval.py` over a tree twice, cold (empty build cache in a temp dir) then warm
(every build cached), and prints per run the wall time, the pairs, and the mean per-pair split read from the
records: `build.seconds` (cold run only) and the parts of `worker.phases` (summed over a pair's process pairs,
`timing.processes`, with `--processes N`) -- `start` (worker process start until it got its job), `trials`
(candidate import and correctness trials), `derive` (`derive_wait`: the wait after the trials for what the reference
works out meanwhile: FLOPs, the float64 reference), `timing` (interleaved timed rounds), `checks` (verification and
defense checks), `baseline` (reference-only blocks before and after the pair, for the interference check), `close`
(the candidate worker's exit and the sweep after it), `ex close` (`executor_close`, the staged paths: the reference's
executor detached and closed after the verdict), `total` (the whole pair) and `other` (total minus the parts); then
two parts of `timing`: `profile` (the profiled calls, both sides) and `switch` (stopping one side and resuming the
other between blocks); two parts of `baseline` on the staged GPU path: `ex wait` (`executor_wait`, for the executor's
Loaded after the candidate's trials) and `ex attach` (`executor_attach`, its mapping of the arena); and `ref setup`
(`reference_setup`: the problem's reference process from its start to
`ready`, counted by the first pair it serves, before that pair's `total`; averaged over every pair, so a problem
with several candidates spreads it). A pair measured twice (`retried`) counts both tries, the first from
`retried.first_try_phases` (records written before 2026-11-29 lack it: their retried pairs count one try). A part
no record has (records written before phases existed) prints as "-". A
run cut short (Ctrl-C, `timeout -s INT`) prints the pairs it finished. Last column: the harness overhead per pair,
wall time / pairs minus the time inside timed samples (timing.reference.samples_ms + timing.candidate.samples_ms;
past the first process pair, estimated by rounds); then issue 29's figure, `untimed/pair`: everything of a pair but
its timed rounds, the reference's setup included (total - timing + ref setup), and with several runs its mean over
all of them.

    python benchmarks/pair_time.py                                  # tests/fixtures/tree on the CPU
    python benchmarks/pair_time.py --problems-dir problems --solutions-dir solutions [--device cuda]
    python benchmarks/pair_time.py -- --max-pair-seconds 5 --compile-modes none   # more run_eval.py flags
    python benchmarks/pair_time.py --from results/RUN_ID [...]      # the same figures for runs already made

With --from, a run's wall is its run.json `wall_seconds` less `build_seconds` (so it compares with a warm run),
times the GPUs it ran on (config `gpus` on a CUDA run): the overhead per pair is then per GPU, whatever the run's
width. A run with no `wall_seconds` (cut short) or a resumed one (its wall is the last part's) prints its pairs'
parts without the wall and overhead figures.

Nothing here is asserted; it prints figures (performance targets live in benchmarks, not tests).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, NamedTuple

REPO = Path(__file__).resolve().parent.parent
FIXTURE_TREE = REPO / "tests" / "fixtures" / "tree"
PARTS = ("start", "trials", "derive_wait", "timing", "checks", "baseline", "close", "executor_close", "total")
SUBPARTS = ("timing_profile", "timing_switch",      # inside `timing`: profiled calls, stopping/resuming the sides
            "executor_wait", "executor_attach",     # inside `baseline` (staged GPU path): the executor's Loaded, attach
            "samples_stage", "samples_call", "samples_read")    # inside `baseline` + `timing`: every sample's parts
LABELS = {"derive_wait": "derive", "executor_close": "ex close", "timing_profile": "profile", "timing_switch": "switch",
          "executor_wait": "ex wait", "executor_attach": "ex attach", "reference_setup": "ref setup",
          "samples_stage": "stage", "samples_call": "call", "samples_read": "read"}
BEFORE = ("reference_setup",)                       # before the pair (the problem's reference process), not in total
UNTIMED_TARGET_S = 3.0     # issues 29 and 44: a pair's untimed part at most 3 s (issue 29: the suite's mean)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _process_phases(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The worker.phases of each process pair the record stands for: with `--processes N` the record's own
    worker.phases is the first pair's, and timing.processes[i].phases has each one's; and of a retried pair's first
    try (retried.first_try_phases, its reference's setup with it), which the second try's record replaced."""
    procs = (record.get("timing") or {}).get("processes")
    if isinstance(procs, list) and procs and all(isinstance(p, dict) and isinstance(p.get("phases"), dict)
                                                 for p in procs):
        found = [p["phases"] for p in procs]
    else:
        phases = (record.get("worker") or {}).get("phases")
        found = [phases] if isinstance(phases, dict) else []
    first = (record.get("retried") or {}).get("first_try_phases")
    return found + [first] if found and isinstance(first, dict) else found


def _phases(record: dict[str, Any]) -> dict[str, float] | None:
    """The pair's phases summed over its process pairs, baseline_before + baseline_after folded into `baseline`;
    None without."""
    dicts = _process_phases(record)
    if not dicts:
        return None
    out: dict[str, float] = {}
    for phases in dicts:
        for k in PARTS + SUBPARTS + BEFORE:
            parts = ("baseline_before", "baseline_after", "baseline") if k == "baseline" else (k,)
            values = [v for v in (_num(phases.get(part)) for part in parts) if v is not None]
            if values:
                out[k] = out.get(k, 0.0) + sum(values)
    return out


def sampled_s(record: dict[str, Any]) -> float:
    """Seconds inside the record's timed samples, both sides. With `--processes N` the record keeps the first
    process pair's samples only: the others' are estimated from them, in proportion to their rounds."""
    timing = record.get("timing") or {}
    total = 0.0
    for side in ("reference", "candidate"):
        samples = (timing.get(side) or {}).get("samples_ms") or []
        total += sum(s for s in samples if _num(s) is not None) / 1e3
    procs = timing.get("processes")
    first = _num(procs[0].get("rounds")) if isinstance(procs, list) and procs and isinstance(procs[0], dict) else None
    rounds = _num(timing.get("rounds"))
    return total * rounds / first if first and rounds else total


def summarize(records: Iterable[dict[str, Any]], wall_s: float, cold: bool) -> dict[str, Any]:
    """Per-run figures from its records: pairs, mean build seconds (cold runs), the mean of each worker phase over
    the pairs that report phases (a part a pair never reached counts 0; a part no pair reports is None), the time
    inside timed samples and the overhead per pair."""
    records = list(records)
    pairs = len(records)
    builds = [_num((r.get("build") or {}).get("seconds")) for r in records]
    builds = [b for b in builds if b is not None]
    phased = [p for p in (_phases(r) for r in records) if p is not None]
    means: dict[str, float | None] = {}
    for part in PARTS + SUBPARTS + BEFORE:
        if any(part in p for p in phased):
            means[part] = sum(p.get(part, 0.0) for p in phased) / len(phased)
        else:
            means[part] = None
    parts = [means[k] for k in PARTS if k != "total" and means[k] is not None]
    means["other"] = means["total"] - sum(parts) if means["total"] is not None and parts else None
    in_samples = sum(sampled_s(r) for r in records)
    untimed = [untimed_s(p) for p in phased]
    return {
        "wall_s": wall_s, "pairs": pairs,
        "build_s": (sum(builds) / len(builds) if builds else None) if cold else None,
        "builds_cached": sum(1 for r in records if (r.get("build") or {}).get("cached")),
        "phases": means, "pairs_with_phases": len(phased),
        "in_samples_s": in_samples,
        "overhead_per_pair_s": (wall_s - in_samples) / pairs if pairs and wall_s is not None else None,
        "untimed": [u for u in untimed if u is not None],
    }


def untimed_s(phases: dict[str, float]) -> float | None:
    """Issue 29's overhead of one pair: everything but its timed rounds, the reference's setup included
    (`total` - `timing` + `reference_setup`); None where the pair has no total."""
    if "total" not in phases:
        return None
    return phases["total"] - phases.get("timing", 0.0) + phases.get("reference_setup", 0.0)


def _cell(x: float | None, width: int, digits: int = 2) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.{digits}f}"


def format_rows(rows: list[tuple[str, dict[str, Any]]], pooled: bool = False) -> list[str]:
    """The printed table: one line per run, seconds. `profile` and `switch` are parts of `timing`. `pooled`: runs of
    one pass (--from), whose untimed figure is also given over all of them."""
    columns = ["build", *(LABELS.get(p, p) for p in PARTS + ("other",) + SUBPARTS + BEFORE)]
    lines = [f"{'run':24} {'wall s':>8} {'pairs':>5} " + " ".join(f"{c:>8}" for c in columns)
             + f" {'in samples s':>12} {'overhead/pair s':>15} {'untimed/pair s':>14}",
             f"{'':24} {'':>8} {'':>5} " + "mean seconds per pair".center(9 * len(columns) - 1, "-")]
    for name, s in rows:
        values = [s["build_s"], *(s["phases"].get(c) for c in PARTS + ("other",) + SUBPARTS + BEFORE)]
        untimed = statistics.fmean(s["untimed"]) if s["untimed"] else None
        lines.append(f"{name:24} {_cell(s['wall_s'], 8, 1)} {s['pairs']:>5} " + " ".join(_cell(v, 8) for v in values)
                     + f" {_cell(s['in_samples_s'], 12)} {_cell(s['overhead_per_pair_s'], 15)} {_cell(untimed, 14)}")
    every = [u for _, s in rows for u in s["untimed"]]
    if pooled and len(rows) > 1 and every:
        within = sum(u <= UNTIMED_TARGET_S for u in every)
        lines.append(f"untimed over every run: {statistics.fmean(every):.2f} s a pair (median "
                     f"{statistics.median(every):.2f} s, {len(every)} pairs, {within} at most "
                     f"{UNTIMED_TARGET_S:g} s): everything but the timed rounds, the reference's setup included")
    return lines


def _config(tmp: Path, problems: Path, solutions: Path, device: str, timeout: float | None) -> Path:
    """The repository's config.yaml (if any) with the trees, the device and a private output and build cache."""
    import yaml
    base = REPO / "config.yaml"
    values = (yaml.safe_load(base.read_text()) or {}) if base.is_file() else {}
    values.update(problems_dir=str(problems), solutions_dir=str(solutions), output_dir=str(tmp / "results"),
                  cache_dir=str(tmp / "cache"), device=device)
    if timeout is not None:
        values["timeout"] = timeout
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


class Finished(NamedTuple):
    wall_s: float
    run_dir: Path
    records: list[dict[str, Any]]
    interrupted: bool


def run(config: Path, results: Path, extra: list[str]) -> Finished:
    """`run_eval.py --config CONFIG --json EXTRA`, and the run folder it wrote under `results`. An interrupt (Ctrl-C,
    `timeout -s INT`) reaches run_eval.py too, which writes the pairs it finished: those are returned, so a run cut
    short by a time limit still reports (benchmarks/harness_overhead.py runs through here too)."""
    before = set(results.glob("*")) if results.exists() else set()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(REPO / "run_eval.py"), "--config", str(config), "--json", *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    interrupted = False
    try:
        _, err = proc.communicate()
    except KeyboardInterrupt:
        interrupted = True
        _, err = proc.communicate()
    wall = time.monotonic() - started
    new = sorted(set(results.glob("*")) - before)
    if proc.returncode != 0 and not (interrupted and new):
        raise SystemExit(f"run_eval.py failed ({proc.returncode}): {err[-2000:]}")
    path = new[-1] / "results.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Finished(wall, new[-1], [json.loads(line) for line in lines if line.strip()], interrupted)


def from_runs(run_dirs: list[Path]) -> list[tuple[str, dict[str, Any]]]:
    """summarize() over finished run folders: wall after the builds, times the GPUs the run used."""
    rows = []
    for run_dir in run_dirs:
        meta = json.loads((run_dir / "run.json").read_text())
        wall = _num(meta.get("wall_seconds"))
        if wall is None or meta.get("resumed_at"):
            why = "was resumed: its wall_seconds is the last part's" if wall is not None else \
                "has no wall_seconds in run.json (cut short?)"
            print(f"{run_dir}: {why}: no wall or overhead figures, the pairs' parts only", file=sys.stderr)
        gpus = (meta.get("config") or {}).get("gpus") or []
        width = len(gpus) if meta.get("device") == "cuda" and gpus else 1
        jsonl = run_dir / "results.jsonl"
        records = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
        if wall is not None and not meta.get("resumed_at"):
            wall = (wall - (_num(meta.get("build_seconds")) or 0.0)) * width
        else:
            wall = None
        rows.append((f"{run_dir.name} x{width}", summarize(records, wall, cold=False)))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problems-dir", type=Path, help="default: tests/fixtures/tree/problems")
    p.add_argument("--solutions-dir", type=Path, help="default: tests/fixtures/tree/solutions")
    p.add_argument("--device", choices=("cpu", "cuda"),
                   help="default: cpu on the fixture tree, cuda on a given tree")
    p.add_argument("--timeout", type=float,
                   help="seconds per pair (default: 20 on the fixture tree, whose `hang` candidate waits for it, "
                        "with --max-pair-seconds 5 unless given; else the config's)")
    p.add_argument("--from", dest="runs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="print the figures of these finished run folders instead of running")
    p.add_argument("extra", nargs="*", help="after --: more run_eval.py flags, e.g. --max-pair-seconds 5")
    args = p.parse_args(argv)
    if args.runs:
        for line in format_rows(from_runs(args.runs), pooled=True):
            print(line)
        return 0
    fixture = args.problems_dir is None and args.solutions_dir is None
    problems = args.problems_dir or (FIXTURE_TREE / "problems" if fixture else REPO / "problems")
    solutions = args.solutions_dir or (FIXTURE_TREE / "solutions" if fixture else REPO / "solutions")
    device = args.device or ("cpu" if fixture else "cuda")
    timeout = args.timeout if args.timeout is not None else (20.0 if fixture else None)
    extra = list(args.extra)
    if fixture and not any(a.startswith("--max-pair-seconds") for a in extra):
        extra += ["--max-pair-seconds", "5"]        # inside the 20 s pair timeout, or every pair times out
    with tempfile.TemporaryDirectory(prefix="pair_time-") as tmp_name:
        tmp = Path(tmp_name)
        config = _config(tmp, problems.resolve(), solutions.resolve(), device, timeout)
        rows = []
        for name, cold in (("cold (empty build cache)", True), ("warm (all builds cached)", False)):
            done = run(config, tmp / "results", extra)
            label = name + (" (interrupted)" if done.interrupted else "")
            rows.append((label, summarize(done.records, done.wall_s, cold)))
            if done.interrupted:
                break
    print(f"problems {problems}  solutions {solutions}  device {device}"
          + (f"  extra {' '.join(extra)}" if extra else ""))
    for line in format_rows(rows):
        print(line)
    for name, s in rows:
        if s["pairs"] and s["pairs_with_phases"] < s["pairs"]:
            print(f"{name}: {s['pairs'] - s['pairs_with_phases']} of {s['pairs']} pairs have no worker.phases "
                  f"(never reached a worker, or an older record)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
