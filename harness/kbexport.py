"""KernelBench out: a run's records as KernelBench's `eval_results.json`, and fast_p / pass@k counted the way
KernelBench counts them.

* `run_eval.py export-kernelbench RUN_ID [--output PATH]` writes, for the candidates that came from a KernelBench
  run folder (`solutions/kernelbench-level<L>/<NNN>_<Name>/<run>_sample_<S>.py`, see harness/kbimport.py), the
  file KernelBench's scripts/eval_from_generations.py writes today (and scripts/benchmark_eval_analysis.py reads,
  taking the entry whose sample_id is 0): a JSON object keyed by problem id P (the number of `NNN_Name`, as a
  string), each a list of samples `{"sample_id", "compiled", "correctness", "metadata", "runtime",
  "runtime_stats"}` in sample order. (Earlier KernelBench versions keyed the samples by id, or held one sample per
  problem; the import reads all three.)
* `run_eval.py report RUN_ID --kernelbench` (`kernelbench_metrics`): per level, fast_p over every problem of that
  level in the problems tree (a problem without a record counts as a failure) on each problem's sample 0, counting
  only ranked records as report's fast_p does (ok, and no flag keeps them off the ranking: harness.flags), and
  pass@k over all samples (correct ones) with the unbiased estimator 1 - C(n-c, k) / C(n, k).

Pure functions over records (`Record`s, or their JSON objects), except the two command helpers at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterable

from .errors import InputError, UsageError
from .records import Record, Status, as_records

KB_LEVEL = re.compile(r"^kernelbench-level(\d+)$")
KB_PROBLEM = re.compile(r"^(\d+)_")
KB_SAMPLE = re.compile(r"^(.+)_sample_(\d+)$")
NOT_COMPILED = (Status.COMPILE_ERROR, Status.LOAD_ERROR)
FAST_P = (0.0, 1.0, 1.5, 2.0)


# ---------------------------------------------------------------- names

def kb_origin(record: Record) -> tuple[int, int, str, int] | None:
    """(level L, problem id P, run folder name, sample id S) of a candidate imported from a KernelBench run folder
    (`kernelbench-level<L>/<NNN>_<Name>/<run>_sample_<S>`), or None for any other candidate."""
    parts = record.solution.split("/")
    if len(parts) != 3:
        return None
    level, problem, candidate = (KB_LEVEL.match(parts[0]), KB_PROBLEM.match(parts[1]), KB_SAMPLE.match(parts[2]))
    if not (level and problem and candidate):
        return None
    return int(level.group(1)), int(problem.group(1)), candidate.group(1), int(candidate.group(2))


def sample_key(record: Record) -> tuple:
    """Order of a problem's samples: KernelBench samples by sample id (then name), before our own candidates,
    which go by name. The first one is the problem's "sample 0"."""
    match = KB_SAMPLE.match(record.candidate)
    return (0, int(match.group(2)), record.candidate) if match else (1, 0, record.candidate)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


# ---------------------------------------------------------------- eval_results.json

def kb_sample(record: Record, run_id: str, sample: int) -> dict[str, Any]:
    correct = record.ok
    timing = record.timing or {}
    stats = timing.get("candidate") or {}
    median = _number(stats.get("median_ms"))
    runtime = median if correct and median is not None else -1.0
    runtime_stats: dict[str, Any] = {}
    if correct and median is not None:
        runtime_stats = {"mean": _number(stats.get("mean_ms")), "std": _number(stats.get("stdev_ms")),
                         "min": _number(stats.get("min_ms")), "max": _number(stats.get("max_ms")),
                         "num_trials": stats.get("n")}
    metadata = {"hardware": (record.gpu or {}).get("name") or record.device, "device": record.device,
                "status": record.status.value, "error": record.error, "speedup": record.speedup,
                "speedup_ci": list(record.speedup_ci) if record.speedup_ci else None, "flags": list(record.flags),
                "reference_runtime": _number((timing.get("reference") or {}).get("median_ms")),
                "harness_run_id": run_id, "solution": record.solution}
    return {"sample_id": sample, "compiled": record.status not in NOT_COMPILED, "correctness": correct,
            "metadata": metadata, "runtime": runtime, "runtime_stats": runtime_stats}



def _narrow(found: list, part: int, wanted: Any, missing: str) -> list:
    """The (origin, record) pairs whose origin[part] is `wanted` (all when it is None); a UsageError naming what
    is there when none is."""
    if wanted is None:
        return found
    kept = [(o, r) for o, r in found if o[part] == wanted]
    if not kept:
        raise UsageError(f"{missing}; there: {', '.join(map(str, sorted({o[part] for o, _ in found})))}")
    return kept


def eval_results(records: Iterable[Record | dict[str, Any]], run_id: str, kb_run: str | None = None,
                 level: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """KernelBench's eval_results.json for the records of candidates from one KernelBench run folder of one level.
    A UsageError when there are none, or when they come from several run folders or levels and `kb_run` / `level`
    does not say which."""
    found = [(origin, r) for r in as_records(records) if (origin := kb_origin(r)) is not None]
    if not found:
        raise UsageError(f"run {run_id} has no candidates imported from a KernelBench run folder "
                         "(solutions/kernelbench-level<L>/<NNN>_<Name>/<run>_sample_<S>.py)")
    found = _narrow(found, 2, kb_run, f"--kb-run: no KernelBench run folder '{kb_run}' in run {run_id}")
    found = _narrow(found, 0, level, f"--level: no KernelBench level {level} in run {run_id}")
    runs = sorted({o[2] for o, _ in found})
    if len(runs) > 1:
        raise UsageError(f"run {run_id} holds samples of {len(runs)} KernelBench run folders ({', '.join(runs)}); "
                         "choose one with --kb-run")
    levels = sorted({o[0] for o, _ in found})
    if len(levels) > 1:
        raise UsageError(f"run {run_id} holds KernelBench levels {', '.join(map(str, levels))}; eval_results.json "
                         "is per level: choose one with --level")
    out: dict[str, list[dict[str, Any]]] = {}
    for (_, problem, _, sample), record in sorted(found, key=lambda x: (x[0][1], x[0][3])):
        out.setdefault(str(problem), []).append(kb_sample(record, run_id, sample))
    return out


# ---------------------------------------------------------------- fast_p and pass@k

def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if k <= 0 or n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def tree_problems(problems_dir: Path | None) -> dict[str, list[str]]:
    """{level: [problem ids]} of a problems tree (as discover walks it); {} when there is none."""
    out: dict[str, list[str]] = {}
    if problems_dir is None or not Path(problems_dir).is_dir():
        return out
    for path in sorted(Path(problems_dir).glob("*/*.py")):
        if not path.name.startswith("_"):
            out.setdefault(path.parent.name, []).append(f"{path.parent.name}/{path.stem}")
    return out


def kernelbench_metrics(records: Iterable[Record | dict[str, Any]], tree: dict[str, list[str]]) -> dict[str, Any]:
    """Per level of the records: fast_p on each problem's sample 0 over every problem of the level in `tree`
    (plus any problem with records that the tree lacks), and pass@k over all samples, averaged over the problems
    with at least k samples (k = 1, and 5 when some problem has 5 or more)."""
    by_problem: dict[str, list[Record]] = {}
    for r in as_records(records):
        by_problem.setdefault(r.problem, []).append(r)
    levels: dict[str, Any] = {}
    for level in sorted({pid.split("/", 1)[0] for pid in by_problem}):
        pids = sorted(set(tree.get(level, [])) | {p for p in by_problem if p.split("/", 1)[0] == level})
        first = {pid: min(by_problem[pid], key=sample_key) for pid in pids if pid in by_problem}
        fast = {}
        for p in FAST_P:
            hits = sum(1 for r in first.values() if r.ranked and (r.speedup or 0.0) > p)   # as report's fast_p
            fast[str(p)] = hits / len(pids) if pids else 0.0
        counts = {pid: (len(rs), sum(1 for r in rs if r.ok))
                  for pid, rs in by_problem.items() if pid.split("/", 1)[0] == level}
        ks = [1] + ([5] if any(n >= 5 for n, _ in counts.values()) else [])
        passes = {}
        for k in ks:
            values = [pass_at_k(n, c, k) for n, c in counts.values() if n >= k]
            passes[str(k)] = {"value": sum(values) / len(values) if values else None, "problems": len(values)}
        levels[level] = {
            "problems": len(pids),
            "evaluated": len(first),
            "missing": [pid for pid in pids if pid not in by_problem],
            "samples": sum(n for n, _ in counts.values()),
            "sample0": {pid: r.solution for pid, r in sorted(first.items())},
            "fast_p": fast,
            "pass_at_k": passes,
        }
    return {"levels": levels}


def kernelbench_table(metrics: dict[str, Any], title: str):
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    ks = sorted({k for m in metrics["levels"].values() for k in m["pass_at_k"]}, key=int)
    for name in ("level", "problems", "evaluated", "samples", *(f"fast_{p:g}" for p in FAST_P),
                 *(f"pass@{k}" for k in ks)):
        t.add_column(name, justify="left" if name == "level" else "right")
    for level, m in metrics["levels"].items():
        row = [level, str(m["problems"]), str(m["evaluated"]), str(m["samples"])]
        row += [f"{m['fast_p'][str(p)]:.1%}" for p in FAST_P]
        for k in ks:
            entry = m["pass_at_k"].get(k)
            value = None if entry is None else entry["value"]
            row.append("-" if value is None else f"{value:.1%} (n={entry['problems']})")
        t.add_row(*row)
    return t


# ---------------------------------------------------------------- commands

def problems_dir_of(run_dir: Path, override: Path | None) -> Path | None:
    """The problems tree a run was evaluated on: the flag, else run.json's config.problems_dir."""
    if override is not None:
        if not Path(override).is_dir():
            raise UsageError(f"--problems-dir {override}: no such directory")
        return Path(override)
    try:
        meta = json.loads((run_dir / "run.json").read_text())
        value = (meta.get("config") or {}).get("problems_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(value) if value else None


def report_kernelbench(store, records: Iterable[Record | dict[str, Any]], problems_dir: Path | None, json_mode: bool,
                       console) -> int:
    root = problems_dir_of(store.dir, problems_dir)
    tree = tree_problems(root)
    if not tree:
        print(f"warning: no problems tree at {root}; fast_p counts only the problems with records "
              "(name one with --problems-dir)", file=sys.stderr)
    metrics = kernelbench_metrics(records, tree)
    if json_mode:
        print(json.dumps({"run_id": store.run_id, "problems_dir": None if root is None else str(root), **metrics}))
        return 0
    console.print(kernelbench_table(metrics, f"run {store.run_id}: KernelBench fast_p (sample 0) and pass@k"))
    for level, m in metrics["levels"].items():
        if m["missing"]:
            shown = ", ".join(p.split("/", 1)[1] for p in m["missing"][:5])
            more = f" and {len(m['missing']) - 5} more" if len(m["missing"]) > 5 else ""
            console.print(f"{level}: {len(m['missing'])} problem(s) without a record count as failures: "
                          f"{shown}{more}", highlight=False)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`export-kernelbench`'s description and arguments, on run_eval.py's subparser."""
    p.description = ("Write KernelBench's eval_results.json (as scripts/eval_from_generations.py writes it) for "
                     "the candidates of a run that were imported from a KernelBench run folder "
                     "(<run>_sample_<S>). compiled = status not compile_error/load_error; correctness = status ok; "
                     "runtime = the candidate's median ms (-1.0 when not correct); our status, error and speedup "
                     "are in metadata.")
    p.add_argument("run_id", metavar="RUN_ID", help="the run: a run id under --output-dir")
    p.add_argument("--output", "-o", help="where to write it; '-' for stdout (default: <run folder>/eval_results.json)")
    p.add_argument("--kb-run", metavar="NAME", help="only samples of this KernelBench run folder (needed when the "
                   "run holds several)")
    p.add_argument("--level", type=int, metavar="L", help="only this KernelBench level (needed when the run holds "
                   "several)")
    p.add_argument("--output-dir", default=None, help="where runs are (default: output_dir in config, or results)")
    p.add_argument("--config", type=Path, help="config file for the default --output-dir")
    return p


def main(args: argparse.Namespace) -> int:
    """`run_eval.py export-kernelbench RUN_ID`, parsed."""
    from .render import config_output_dir as _config_output_dir
    from .store import RunStore
    store = RunStore.open(Path(args.output_dir or _config_output_dir(args.config)), args.run_id)
    results = eval_results(store.records(), store.run_id, args.kb_run, args.level)
    text = json.dumps(results, indent=4) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.output) if args.output else store.dir / "eval_results.json"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as exc:
        raise InputError(f"--output {out}: cannot write: {exc.strerror}") from None
    samples = sum(len(v) for v in results.values())
    print(f"eval_results.json: {len(results)} problems, {samples} samples: {out}")
    return 0
