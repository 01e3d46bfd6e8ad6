"""KernelBench out: a run's records as the files KernelBench's own scripts write and read, and fast_p / pass@k
counted the way KernelBench counts them.

* `run_eval.py export-kernelbench RUN_ID` writes, for the candidates that came from one KernelBench run folder of one
  level (`solutions/kernelbench-level<L>/<NNN>_<Name>/<run>_sample_<S>.py`, see harness/commands/kbimport.py), the
  files of a KernelBench checkout (relative to `--kb-root`, default the current directory), as KernelBench's
  scripts/benchmark_eval_analysis.py finds them:
  - `runs/<run_name>/eval_results.json`, as scripts/eval_from_generations.py writes it: keyed by problem id P (the
    number of `NNN_Name`, as a string), each a list of samples `{"sample_id", "compiled", "correctness",
    "metadata", "runtime", "runtime_stats"}` in sample order; `runtime_stats` is kernelbench.timing's
    get_timing_stats of the candidate's timed samples (`mean`, `std` (population), `min`, `max` to 3 significant
    figures, `num_trials`, `hardware`, `device`) and `runtime` its `mean`, as kernelbench.eval sets them;
  - `runs/<run_name>/pass_at_k_results.json`, as eval_from_generations' calculate_pass_at_k writes it
    (`averages`, `metadata`, `problems`);
  - `results/timing/<hardware>/<baseline>.json`, as scripts/generate_baseline_time.py writes it
    (`{"level<L>": {"<P>_<Name>.py": timing stats}}`) from our reference timings: `baseline_time_torch` (eager) and
    `baseline_time_torch_compile_inductor_<mode>` for each torch.compile mode measured.
  (Earlier KernelBench versions keyed the samples by id, or held one sample per problem; the import reads all
  three.)
* `run_eval.py report RUN_ID --kernelbench` (`kernelbench_metrics`): per level, fast_p with
  benchmark_eval_analysis's arithmetic (kernelbench.score.fastp: baseline mean / runtime > p over every problem of
  the level, a problem without sample 0 failing) on the numbers the export writes, and pass@k over all samples
  with the unbiased estimator 1 - C(n-c, k) / C(n, k).

"Correct" for fast_p and `correctness` is *ranked* (harness.core.ranking: ok, no flag keeps it off the ranking, not
a control), as report's fast_p counts; controls (`aa_*`, `control_*`) are no problem's samples; pass@k counts correct
outputs (status ok), as report --kernelbench always has. `compiled` is true only for a candidate that was built.

Pure functions over `Record`s (as RunStore.records() gives them), except the command helpers at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from harness.core.errors import InputError, UsageError
from harness.core.numbers import number
from harness.results.parts import Baseline, SideStats
from harness.results.records import Record, Status
from harness.core.untrusted import ReadError, load_json, read_run_file, write_text

KB_LEVEL = re.compile(r"^kernelbench-level(\d+)$")
KB_PROBLEM = re.compile(r"^(\d+)_(.*)$")
KB_SAMPLE = re.compile(r"^(.+)_sample_(\d+)$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
NOT_COMPILED = (Status.COMPILE_ERROR, Status.LOAD_ERROR)
FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)           # benchmark_eval_analysis's p_values
EAGER = "eager"                                   # our reference variant names: "eager", "compile:<mode>"
UNMEASURED = -1.0                                 # KernelBench's "not measured" (runtime of a failed sample)


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


def kb_problem_name(problem: str) -> str | None:
    """KernelBench's file name of one of our problem ids (`kernelbench-level1/001_Square_matmul` ->
    `1_Square_matmul.py`, the key of its baseline timing files), or None when the stem is not `<number>_<name>`."""
    match = KB_PROBLEM.match(problem.rsplit("/", 1)[-1])
    return f"{int(match.group(1))}_{match.group(2)}.py" if match else None


def baseline_name(variant: str) -> str:
    """The baseline file KernelBench's generate_baseline_time.py writes for one of our reference variants."""
    if variant == EAGER:
        return "baseline_time_torch"
    return f"baseline_time_torch_compile_inductor_{variant.split(':', 1)[1]}"


def sample_key(record: Record) -> tuple:
    """Order of a problem's samples: KernelBench samples by sample id (then name), before our own candidates,
    which go by name."""
    match = KB_SAMPLE.match(record.candidate)
    return (0, int(match.group(2)), record.candidate) if match else (1, 0, record.candidate)


def sample0(records: list[Record]) -> Record | None:
    """A problem's sample 0, the one fast_p looks at: the first in sample order; None when that is a KernelBench
    sample whose id is not 0 (benchmark_eval_analysis takes only sample_id 0: the problem fails)."""
    if not records:
        return None
    first = min(records, key=sample_key)
    key = sample_key(first)
    return None if key[0] == 0 and key[1] != 0 else first


# ---------------------------------------------------------------- timing stats, as KernelBench writes them

def kb_round(value: float) -> float:
    """kernelbench.timing.get_timing_stats's rounding: 3 significant figures."""
    return float(f"{value:.3g}")


def where(record: Record) -> dict[str, str]:
    """get_timing_stats's `hardware` (the device name) and `device`."""
    return {"hardware": str((record.gpu.name if record.gpu else None) or record.device), "device": record.device}


def side(record: Record, variant: str) -> SideStats | Baseline | None:
    """One side's sample summary in a record: "candidate", "eager" (the reference) or "compile:<mode>"."""
    timing = record.timing
    if timing is None:
        return None
    if variant in ("candidate", EAGER):
        return timing.candidate if variant == "candidate" else timing.reference
    return (timing.baselines or {}).get(variant)


def timing_stats(record: Record, variant: str) -> dict[str, Any] | None:
    """get_timing_stats of one side's timed samples from its summary (mean, population std from our sample stdev,
    min, max: 3 significant figures; num_trials; hardware, device), or None when the summary lacks them (not
    measured, or a record from before compile baselines kept their mean)."""
    stats = side(record, variant)
    n = stats.n if stats is not None else None
    values = [number(getattr(stats, k, None)) for k in ("mean_ms", "stdev_ms", "min_ms", "max_ms")]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1 or None in values:
        return None
    mean, stdev, low, high = values
    std = stdev * math.sqrt((n - 1) / n)
    return {"mean": kb_round(mean), "std": kb_round(std), "min": kb_round(low), "max": kb_round(high),
            "num_trials": n, **where(record)}


def runtime_stats(record: Record) -> dict[str, Any] | None:
    """The candidate's runtime_stats when KernelBench counts the sample as correct (ranked, both sides timed);
    None otherwise."""
    if not record.ranked or timing_stats(record, EAGER) is None:
        return None
    return timing_stats(record, "candidate")


def problem_baseline(records: list[Record], variant: str) -> dict[str, Any] | None:
    """A problem's baseline timing for one variant: the reference's stats in the first pair (sample order) that
    measured it, so a correct sample 0 is set against the reference timed beside it; None when none did."""
    for record in sorted(records, key=sample_key):
        stats = timing_stats(record, variant)
        if stats is not None:
            return {**stats, "harness_solution": record.solution}
    return None


# ---------------------------------------------------------------- fast_p, as benchmark_eval_analysis counts it

@dataclass(frozen=True)
class Scored:
    """One problem as benchmark_eval_analysis aligns it: sample 0's correctness and runtime, the baseline mean."""
    correct: bool
    runtime: float
    baseline: float


def score(first: Record | None, baseline: dict[str, Any] | None) -> Scored:
    stats = None if first is None else runtime_stats(first)
    return Scored(stats is not None, UNMEASURED if stats is None else stats["mean"],
                  UNMEASURED if baseline is None else baseline["mean"])


def fast_p(scored: list[Scored], p: float) -> float:
    """kernelbench.score.fastp: the share of the n aligned problems that are correct with baseline / runtime > p
    (a runtime that rounds to 0 is infinitely fast, as numpy divides)."""
    n = len(scored)
    hits = sum(1 for s in scored if s.correct and (s.baseline / s.runtime if s.runtime else math.inf) > p)
    return hits / n if n > 0 else 0.0


# ---------------------------------------------------------------- eval_results.json

def compiled(record: Record) -> bool:
    """KernelBench's `compiled`: the candidate was built. A build error or a load error was not; neither was a
    pair whose build did not end `built` (a CUDA candidate skipped on a machine without a GPU is never built), nor
    a skipped pair whose record has no build."""
    if record.status in NOT_COMPILED:
        return False
    if record.build is not None:
        return record.build.status == "built"
    return record.status is not Status.SKIPPED


def kb_sample(record: Record, run_id: str, sample: int) -> dict[str, Any]:
    stats = runtime_stats(record)
    metadata = {**where(record), "status": record.status.value, "error": record.error, "ranked": record.ranked,
                "flags": list(record.flags), "speedup": record.speedup,
                "speedup_ci": list(record.speedup_ci) if record.speedup_ci else None,
                "reference_runtime_stats": timing_stats(record, EAGER),
                "harness_run_id": run_id, "solution": record.solution}
    return {"sample_id": sample, "compiled": compiled(record), "correctness": stats is not None,
            "metadata": metadata, "runtime": UNMEASURED if stats is None else stats["mean"],
            "runtime_stats": stats or {}}


def _narrow(found: list, part: int, wanted: Any, missing: str) -> list:
    """The (origin, record) pairs whose origin[part] is `wanted` (all when it is None); a UsageError naming what
    is there when none is."""
    if wanted is None:
        return found
    kept = [(o, r) for o, r in found if o[part] == wanted]
    if not kept:
        raise UsageError(f"{missing}; there: {', '.join(map(str, sorted({o[part] for o, _ in found})))}")
    return kept


def kb_samples(records: Iterable[Record], run_id: str, kb_run: str | None = None,
               level: int | None = None) -> list[tuple[tuple[int, int, str, int], Record]]:
    """(origin, record) of the candidates from one KernelBench run folder of one level, by problem and sample id.
    A UsageError when there are none, or when they come from several run folders or levels and `kb_run` / `level`
    does not say which."""
    found = [(origin, r) for r in records if (origin := kb_origin(r)) is not None]
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
    return sorted(found, key=lambda x: (x[0][1], x[0][3]))


def eval_results(records: Iterable[Record], run_id: str, kb_run: str | None = None,
                 level: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """KernelBench's eval_results.json for the records of candidates from one KernelBench run folder of one level
    (kb_samples says when that is ambiguous)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for (_, problem, _, sample), record in kb_samples(records, run_id, kb_run, level):
        out.setdefault(str(problem), []).append(kb_sample(record, run_id, sample))
    return out


# ---------------------------------------------------------------- pass@k

def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if k <= 0 or n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def ks_for(counts: Iterable[tuple[int, int]]) -> list[int]:
    """The k of pass@k: 1, and 5 when some problem has 5 or more samples."""
    return [1] + ([5] if any(n >= 5 for n, _ in counts) else [])


def pass_at_k_results(counts: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """pass_at_k_results.json as eval_from_generations' calculate_pass_at_k writes it, from {problem id: (samples,
    correct)}. Unlike it, pass@k of a problem with fewer than k samples is left out (not taken at k = n), and each
    average is over the problems that have it: the figures report --kernelbench prints."""
    ks = ks_for(counts.values())
    problems = {pid: {"total_samples": n, "correct_samples": c,
                      **{f"pass@{k}": pass_at_k(n, c, k) for k in ks if n >= k}}
                for pid, (n, c) in counts.items()}
    averages, metadata = {}, {
        "total_problems": len(problems),
        "problems_with_samples": sum(1 for n, _ in counts.values() if n > 0),
        "total_evaluated_samples": sum(n for n, _ in counts.values()),
        "total_correct_samples": sum(c for _, c in counts.values())}
    for k in ks:
        values = [p[f"pass@{k}"] for p in problems.values() if f"pass@{k}" in p]
        if values:
            averages[f"avg_pass@{k}"] = sum(values) / len(values)
        metadata[f"pass@{k}_count"] = len(values)
    return {"averages": averages, "metadata": metadata, "problems": problems}


# ---------------------------------------------------------------- the metrics report --kernelbench prints

def tree_problems(problems_dir: Path | None) -> dict[str, list[str]]:
    """{level: [problem ids]} of a problems tree (as discover walks it); {} when there is none."""
    out: dict[str, list[str]] = {}
    if problems_dir is None or not Path(problems_dir).is_dir():
        return out
    for path in sorted(Path(problems_dir).glob("*/*.py")):
        if not path.name.startswith("_"):
            out.setdefault(path.parent.name, []).append(f"{path.parent.name}/{path.stem}")
    return out


def kernelbench_metrics(records: Iterable[Record], tree: dict[str, list[str]]) -> dict[str, Any]:
    """Per level of the records: fast_p on each problem's sample 0 over every problem of the level in `tree`
    (plus any problem with records that the tree lacks), with benchmark_eval_analysis's arithmetic on the eager
    baseline the export writes, and pass@k over all samples, averaged over the problems with at least k samples
    (k = 1, and 5 when some problem has 5 or more)."""
    by_problem: dict[str, list[Record]] = {}
    for r in records:
        if not r.control:                   # controls are no candidate's sample (harness.core.ranking)
            by_problem.setdefault(r.problem, []).append(r)
    levels: dict[str, Any] = {}
    for level in sorted({pid.split("/", 1)[0] for pid in by_problem}):
        pids = sorted(set(tree.get(level, [])) | {p for p in by_problem if p.split("/", 1)[0] == level})
        first = {pid: sample0(by_problem[pid]) for pid in pids if pid in by_problem}
        scored = [score(first.get(pid), problem_baseline(by_problem.get(pid, []), EAGER)) for pid in pids]
        counts = {pid: (len(rs), sum(1 for r in rs if r.ok))
                  for pid, rs in by_problem.items() if pid.split("/", 1)[0] == level}
        passes = pass_at_k_results(counts)
        levels[level] = {
            "problems": len(pids),
            "evaluated": len(first),
            "missing": [pid for pid in pids if pid not in by_problem],
            "samples": sum(n for n, _ in counts.values()),
            "sample0": {pid: r.solution for pid, r in sorted(first.items()) if r is not None},
            "fast_p": {str(p): fast_p(scored, p) for p in FAST_P},
            "pass_at_k": {str(k): {"value": passes["averages"].get(f"avg_pass@{k}"),
                                   "problems": passes["metadata"][f"pass@{k}_count"]}
                          for k in ks_for(counts.values())},
        }
    return {"levels": levels}


def kernelbench_table(metrics: dict[str, Any], title: str, width: int | None = None):
    """Per level: its counts, fast_p and pass@k; within `width` columns the counts and the rarer p values are left
    out first (harness.results.fit), never cut into unreadable headers."""
    from harness.results.fit import Col, table
    ks = sorted({k for m in metrics["levels"].values() for k in m["pass_at_k"]}, key=int)
    rarer = {0.5: 3, 0.8: 3, 1.5: 2, 2.0: 2}                # fast_0 and fast_1 stay longest
    cols = [Col("level", cut="middle", least=8), Col("problems", keep=4, justify="right"),
            Col("evaluated", keep=5, justify="right"), Col("samples", keep=5, justify="right"),
            *(Col(f"fast_{p:g}", keep=rarer.get(p, 0), justify="right") for p in FAST_P),
            *(Col(f"pass@{k}", keep=1, justify="right") for k in ks)]
    rows = []
    for level, m in metrics["levels"].items():
        row = [level, str(m["problems"]), str(m["evaluated"]), str(m["samples"])]
        row += [f"{m['fast_p'][str(p)]:.1%}" for p in FAST_P]
        for k in ks:
            entry = m["pass_at_k"].get(k)
            value = None if entry is None else entry["value"]
            row.append("-" if value is None else f"{value:.1%} (n={entry['problems']})")
        rows.append(row)
    return table(cols, rows, title, width)


# ---------------------------------------------------------------- the export

@dataclass(frozen=True)
class KbExport:
    """What export-kernelbench writes for one KernelBench run folder of one level."""
    run_name: str                                          # the KernelBench run folder the samples came from
    level: int
    hardware: str                                          # results/timing/<hardware>/ (a folder name)
    eval_results: dict[str, list[dict[str, Any]]]
    pass_at_k: dict[str, Any]
    baselines: dict[str, dict[str, dict[str, Any]]]       # baseline file name -> {"<P>_<Name>.py": timing stats}


def hardware_name(records: list[Record]) -> str:
    """A results/timing folder name for the records' device: the GPU's name (`NVIDIA H200` -> `NVIDIA_H200`), else
    the device (`cpu`)."""
    name = next((str(r.gpu.name) for r in records if r.gpu and r.gpu.name), None) or records[0].device
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "unknown"


def variants_measured(records: list[Record]) -> list[str]:
    """Eager, then each torch.compile mode some record has the timing stats of."""
    modes = {v for r in records if r.timing for v in r.timing.baselines or {} if timing_stats(r, v)}
    return [EAGER, *sorted(modes)]


def baseline_files(by_problem: dict[str, list[Record]], pids: list[str], run_id: str, variants: list[str], device: dict[str, str]) -> dict[str, dict[str, dict[str, Any]]]:
    """{baseline file name: {"<P>_<Name>.py": stats}} over every problem of the level; a problem whose reference was
    not measured (no record, or no pair timed it) gets -1.0s and num_trials 0, so that benchmark_eval_analysis
    aligns it and counts it as a failure, as report --kernelbench does."""
    unmeasured = {"mean": UNMEASURED, "std": UNMEASURED, "min": UNMEASURED, "max": UNMEASURED, "num_trials": 0,
                  **device}
    files: dict[str, dict[str, dict[str, Any]]] = {}
    for variant in variants:
        entries = {}
        for pid in pids:
            name = kb_problem_name(pid)
            if name is not None:
                found = problem_baseline(by_problem.get(pid, []), variant)
                entries[name] = {**(found or unmeasured), "harness_run_id": run_id}
        files[baseline_name(variant)] = entries
    return files


def build_export(records: Iterable[Record], run_id: str, tree: dict[str, list[str]],
                 kb_run: str | None = None, level: int | None = None, hardware: str | None = None) -> KbExport:
    """The files for the candidates of one KernelBench run folder of one level (kb_samples says when that is
    ambiguous); the baselines cover every problem of the level in `tree` and those with samples."""
    found = kb_samples(records, run_id, kb_run, level)
    (level_n, _, run_name, _), first = found[0]
    by_problem: dict[str, list[Record]] = {}
    results: dict[str, list[dict[str, Any]]] = {}
    for (_, problem, _, sample), record in found:
        by_problem.setdefault(record.problem, []).append(record)
        results.setdefault(str(problem), []).append(kb_sample(record, run_id, sample))
    counts = {str(kb_origin(rs[0])[1]): (len(rs), sum(1 for r in rs if r.ok)) for rs in by_problem.values()}
    pids = sorted(set(tree.get(f"kernelbench-level{level_n}", [])) | set(by_problem))
    chosen = [r for _, r in found]
    baselines = baseline_files(by_problem, pids, run_id, variants_measured(chosen), where(first))
    return KbExport(run_name, level_n, hardware or hardware_name(chosen), results, pass_at_k_results(counts),
                    baselines)


# ---------------------------------------------------------------- commands

def problems_dir_of(run_dir: Path, override: Path | None) -> Path | None:
    """The problems tree a run was evaluated on: the flag, else run.json's config.problems_dir."""
    if override is not None:
        if not Path(override).is_dir():
            raise UsageError(f"--problems-dir {override}: no such directory")
        return Path(override)
    try:
        meta = load_json(read_run_file(run_dir, "run.json") or b"{}")
        value = (meta.get("config") or {}).get("problems_dir")
    except (ReadError, ValueError, AttributeError):
        return None
    if not isinstance(value, str):
        return None
    return Path(value) if value else None


def report_kernelbench(store, records: Iterable[Record], problems_dir: Path | None, json_mode: bool,
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
    console.print(kernelbench_table(metrics, f"run {store.run_id}: KernelBench fast_p (sample 0) and pass@k",
                                    console.width))
    for level, m in metrics["levels"].items():
        if m["missing"]:
            shown = ", ".join(p.split("/", 1)[1] for p in m["missing"][:5])
            more = f" and {len(m['missing']) - 5} more" if len(m["missing"]) > 5 else ""
            console.print(f"{level}: {len(m['missing'])} problem(s) without a record count as failures: "
                          f"{shown}{more}", highlight=False)
    return 0


@dataclass(frozen=True)
class Written:
    """Where export-kernelbench puts each file (no baseline files when timing_dir is None)."""
    eval_results: Path
    pass_at_k: Path
    timing_dir: Path | None


def destinations(kb_root: Path | None, run_name: str, hardware: str, output: str | None) -> Written:
    """runs/<run_name>/ and results/timing/<hardware>/ under kb_root (default: the current directory), as
    KernelBench lays them out. `--output` puts eval_results.json there instead, pass_at_k_results.json beside it
    (where KernelBench puts it), and the baseline files only with an explicit kb_root."""
    for flag, value in (("--run-name", run_name), ("--hardware", hardware)):
        if not NAME.match(value):
            raise UsageError(f"{flag} {value!r}: a folder name of letters, digits, '.', '_' and '-' only")
    root = Path(".") if kb_root is None else kb_root
    eval_path = Path(output) if output else root / "runs" / run_name / "eval_results.json"
    timing_dir = root / "results" / "timing" / hardware if output is None or kb_root is not None else None
    return Written(eval_path, eval_path.parent / "pass_at_k_results.json", timing_dir)


def _ours(entries: Any) -> bool:
    """Whether every entry (a dict's values or a list's items) is a dict we wrote: it, or its metadata, carries
    `harness_run_id`."""
    items = entries.values() if isinstance(entries, dict) else entries if isinstance(entries, list) else None
    return items is not None and all(isinstance(e, dict) and ("harness_run_id" in e or "harness_run_id" in (
        e["metadata"] if isinstance(e.get("metadata"), dict) else {})) for e in items)


def _read_existing(path: Path) -> Any:
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: exists and is not readable JSON ({exc}); not overwritten") from None


def _check_eval_results(path: Path) -> None:
    """Refuse to overwrite an eval_results.json that export-kernelbench did not write (KernelBench's own)."""
    data = _read_existing(path)
    if data is not None and not (isinstance(data, dict) and all(_ours(v) for v in data.values())):
        raise UsageError(f"{path} exists and was not written by export-kernelbench; not overwritten (choose "
                         "--run-name or --output)")


def merged_baseline(path: Path, level: int, entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The baseline file with this level's entries replaced and other levels kept; a UsageError when the level's
    entries there were not written by export-kernelbench (KernelBench's own timings)."""
    data = _read_existing(path)
    if data is None:
        data = {}
    key = f"level{level}"
    if not isinstance(data, dict) or (key in data and not _ours(data[key])):
        raise UsageError(f"{path} holds {key} timings not written by export-kernelbench; not overwritten "
                         "(choose --hardware)")
    return {**data, key: entries}


def _write(path: Path, data: Any) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(data, indent=4) + "\n")       # a link at the path is replaced, not followed
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror}") from None


def write_export(export: KbExport, where_to: Written) -> list[Path]:
    """Write the files (checking first that none of KernelBench's own would be overwritten); their paths."""
    _check_eval_results(where_to.eval_results)
    timing = where_to.timing_dir
    files = {} if timing is None else {timing / f"{name}.json": merged_baseline(timing / f"{name}.json",
                                                                               export.level, entries)
                                       for name, entries in export.baselines.items()}
    _write(where_to.eval_results, export.eval_results)
    _write(where_to.pass_at_k, export.pass_at_k)
    for path, data in files.items():
        _write(path, data)
    return [where_to.eval_results, where_to.pass_at_k, *files]


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`export-kernelbench`'s description and arguments, on run_eval.py's subparser."""
    p.description = (
        "Write, for the candidates of a run that were imported from a KernelBench run folder (<run>_sample_<S>), "
        "the files KernelBench's scripts/benchmark_eval_analysis.py reads, in a KernelBench checkout's layout under "
        "--kb-root: runs/<run_name>/eval_results.json (as eval_from_generations.py writes it: compiled = status "
        "not compile_error/load_error; correctness = ok and ranked; runtime = the mean of the candidate's timed "
        "samples in ms, runtime_stats = mean/std/min/max (3 significant figures)/num_trials, as kernelbench.eval "
        "writes them, -1.0 and {} when not correct; our status, flags and speedup in metadata), "
        "runs/<run_name>/pass_at_k_results.json, and results/timing/<hardware>/baseline_time_torch.json (and "
        "baseline_time_torch_compile_inductor_<mode>.json per torch.compile mode measured) from our reference "
        "timings. Files KernelBench wrote itself are never overwritten.")
    p.add_argument("run_id", metavar="RUN_ID", help="the run: a run id under --output-dir")
    p.add_argument("--kb-root", type=Path, metavar="DIR",
                   help="the KernelBench top folder the files go under (default: the current directory)")
    p.add_argument("--run-name", metavar="NAME", help="runs/<NAME>/ (default: the KernelBench run folder's name)")
    p.add_argument("--hardware", metavar="NAME", help="results/timing/<NAME>/ (default: the GPU's name, "
                   "e.g. NVIDIA_H200, or cpu)")
    p.add_argument("--output", "-o", help="write eval_results.json here instead, pass_at_k_results.json beside it, "
                   "and the baseline files only with --kb-root; '-' prints eval_results.json on stdout and writes "
                   "nothing")
    p.add_argument("--kb-run", metavar="NAME", help="only samples of this KernelBench run folder (needed when the "
                   "run holds several)")
    p.add_argument("--level", type=int, metavar="L", help="only this KernelBench level (needed when the run holds "
                   "several)")
    p.add_argument("--problems-dir", type=Path, help="the problems tree whose kernelbench-level<L> problems the "
                   "baseline files cover (default: the run's own problems_dir)")
    p.add_argument("--output-dir", default=None, help="where runs are (default: output_dir in config, or results)")
    p.add_argument("--config", type=Path, help="config file for the default --output-dir")
    return p


def main(args: argparse.Namespace) -> int:
    """`run_eval.py export-kernelbench RUN_ID`, parsed."""
    from harness.results.render import config_output_dir as _config_output_dir
    from harness.results.store import RunStore
    store = RunStore.open(Path(args.output_dir or _config_output_dir(args.config)), args.run_id)
    tree = tree_problems(problems_dir_of(store.dir, args.problems_dir))
    export = build_export(store.records(), store.run_id, tree, args.kb_run, args.level, args.hardware)
    if args.output == "-":
        sys.stdout.write(json.dumps(export.eval_results, indent=4) + "\n")
        return 0
    run_name = args.run_name or export.run_name
    paths = write_export(export, destinations(args.kb_root, run_name, export.hardware, args.output))
    samples = sum(len(v) for v in export.eval_results.values())
    print(f"eval_results.json: {len(export.eval_results)} problems, {samples} samples: {paths[0]}")
    for path in paths[1:]:
        print(f"wrote {path}")
    if args.output is None:
        print(f"KernelBench: python scripts/benchmark_eval_analysis.py run_name={run_name} level={export.level} "
              f"hardware={export.hardware} baseline=baseline_time_torch")
    return 0
