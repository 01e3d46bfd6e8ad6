"""Issue 45 item 1: one selection of shipped honest candidates run on 1, 2 and 4 GPUs, with the local and the dask
executors; the evaluate phase's seconds, the parallel efficiency, and whether the verdicts agree across runs.

What it runs. The selection (default: every honest candidate of level 2, 40 pairs: the `.py` candidates, no
`aa_*`/`control_*` controls, no KernelBench seed responses `.txt`/`.md`) is copied into `<workdir>/solutions/`
(same bytes, same ids, so the same build keys). Its candidates are built once, up front, into the config's
`cache_dir` (harness.run.build.build_all, as a run's build stage does; `--cache-dir` for another). Then, one after
another, one `run_eval.py` per setting, each a fresh process over the same pairs with `--compile-modes none`:

    local:1   --gpus 0                      (the baseline every other setting is compared with)
    dask:1    --executor dask --gpus 0      (dask's own baseline: a LocalCluster, a worker per GPU)
    local:2   --gpus 0,1                    dask:2   --executor dask --gpus 0,1
    local:4   --gpus 0,1,2,3                dask:4   --executor dask --gpus 0,1,2,3

Settings need as many GPUs as they name (counts above this machine's are left out, said once); `--settings` picks
others (e.g. local:1,local:2,dask:2). The runs go to `<workdir>/runs/<setting>/<run-id>/`, their output to
`<workdir>/logs/`. A setting that already has a complete run in the workdir is not run again (`--rerun` to measure
it anew): a machine held between device commands keeps the workdir (default `results/scaling`, ignored by git), so
the settings can be spread over several commands (`--deadline-s`), and each invocation prints the table over all of
them.

What each number means:

* evaluate s: the run's evaluate phase, from its run.json: `wall_seconds - build_seconds`, i.e. from the end of
  the build stage (cached builds: a check only) to the last record (for dask: the LocalCluster's start and close
  included, as a user of --executor dask pays them). The run's process start, discovery and report are outside.
* span s: from the first pair's start to the last pair's end (the records' started_at/finished_at, whole seconds):
  the evaluate phase less what comes before the first pair and after the last (e.g. a dask cluster's start).
* efficiency: t1 / (n * tn), t1 = local:1's evaluate s, tn = this setting's, n its GPUs. 1.0 is perfect scaling;
  the issue's target is >= 0.9 at 2 GPUs and >= 0.85 at 4, for both executors.
* own eff.: the same with t1 the same executor's run on one GPU (dask:1 for dask:n): the usual definition of
  parallel efficiency, where a cost every run of that executor pays once (a LocalCluster's start) is on both sides.
* span eff.: the same over the spans (local:1's span s against this setting's): what is left of the efficiency
  without the fixed parts before the first pair and after the last. A fixed start of S seconds bounds the
  efficiency of P pairs of w seconds each at (S + P w) / (n S + P w) even where everything else scales perfectly.
* statuses: how many pairs have the same `status` as in local:1 (of the pairs both runs have).
* CIs overlap / inside / apart: of the pairs with a speedup and a CI in both runs, how many have overlapping 95%
  CIs (what `compare` calls the same), how many have each speedup inside the other's CI (holds only ~83% of the
  time for two exact CIs of equal width), and how many differ beyond their combined CI, |z| > 1.96 (5% by chance;
  harness.commands.compare.agreement).
* built: `builds_compiled` of the run (should be 0: the builds were done up front) / `builds_cached`.
* below the table, for a dask run: its LocalCluster's start (run.json's `dask.cluster_start`): seconds to come up,
  to warm its workers (torch, their zygotes), and how long the run waited for both once its builds were done.

How to run it:

    # a GPU machine (dask needs the dask extra: pip install -e '.[dask]', or wheels on PYTHONPATH)
    python benchmarks/scaling.py --json scaling.json                       # every setting the machine has
    python benchmarks/scaling.py --settings local:1 --deadline-s 540      # spread over calls: the rest later
    bash scripts/gpu_check.sh scaling                                      # the same, as a gpu_check phase
    # here, on the CPU (one slot: the plumbing only): examples/cpu's honest candidates, local:1 and dask:1
    python benchmarks/scaling.py --device cpu --gpus-list 1 --workdir /tmp/scaling-dry

Options limit the selection (`--levels`, `--problem GLOB`, `--pairs N`) and the GPU counts (`--gpus-list 1,2`).
Nothing is asserted; the figures are printed and saved (`--json`).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CONTROL_PREFIXES = ("aa_", "control_")      # controls (harness.core.ranking): not candidates of their own
BASELINE = "local:1"
EXECUTORS = ("local", "dask")
MIN_PAIRS = 32                               # issue 45: at least 32 pairs
CPU_TREE = REPO / "examples" / "cpu"


@dataclass(frozen=True)
class Setting:
    executor: str
    gpus: int

    @property
    def name(self) -> str:
        return f"{self.executor}:{self.gpus}"

    @property
    def folder(self) -> str:
        return f"{self.executor}-{self.gpus}"


# ------------------------------------------------------------------------------------------------ the settings


def parse_setting(text: str) -> Setting:
    executor, _, count = text.partition(":")
    if executor not in EXECUTORS or not count.isdigit() or int(count) < 1:
        raise SystemExit(f"--settings: {text!r} is not EXECUTOR:N (executor local or dask)")
    return Setting(executor, int(count))


def default_settings(counts: list[int]) -> list[Setting]:
    """local:n and dask:n for every n (dask:1 is dask's own baseline: `own eff.`)."""
    return [Setting(executor, n) for n in counts for executor in EXECUTORS]


def usable_settings(wanted: list[Setting], device: str, gpus_here: int, dask_ok: str | None) -> list[Setting]:
    """The settings this machine can run (said once for each that it cannot), local:1 first, then by GPUs, dask:1
    last (it gives only `own eff.`, where a deadline may leave it for a later call)."""
    keep = []
    for s in wanted:
        why = None
        if device == "cuda" and s.gpus > gpus_here:
            why = f"needs {s.gpus} GPUs, this machine has {gpus_here}"
        elif device == "cpu" and s.gpus != 1:
            why = "the CPU path has one slot"
        elif s.executor == "dask" and dask_ok:
            why = dask_ok
        if why:
            print(f"{s.name}: left out ({why})", flush=True)
        else:
            keep.append(s)
    if BASELINE not in {s.name for s in keep}:
        keep.append(Setting("local", 1))
    return sorted(set(keep), key=lambda s: (s.name != BASELINE, s.name == "dask:1", s.gpus, s.executor != "local"))


def dask_missing() -> str | None:
    try:
        import distributed  # noqa: F401
    except ImportError:
        return "dask.distributed is not installed (pip install -e '.[dask]', or its wheels on PYTHONPATH)"
    return None


def gpu_count() -> int:
    from harness.run import meta
    return len(meta.gpus())


# ------------------------------------------------------------------------------------------------ the selection


def shipped_pairs(problems: Path, solutions: Path, levels: list[str], glob: str, controls: bool) -> list[str]:
    """Candidate ids (<level>/<problem>/<stem>) of the honest `.py` candidates whose problem file exists."""
    found = []
    for level in levels:
        for folder in sorted(p for p in (solutions / level).glob("*") if p.is_dir()):
            problem = f"{level}/{folder.name}"
            if not (problems / f"{problem}.py").is_file() or not fnmatch.fnmatch(problem, glob):
                continue
            for cand in sorted(folder.glob("*.py")):
                if controls or not cand.stem.startswith(CONTROL_PREFIXES):
                    found.append(f"{problem}/{cand.stem}")
    return found


def copy_selection(pairs: list[str], solutions: Path, dest: Path) -> None:
    """The selected candidate files, byte for byte, under dest (a tree of only these)."""
    if dest.exists():
        shutil.rmtree(dest)
    for cid in pairs:
        target = dest / f"{cid}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(solutions / f"{cid}.py", target)


def check_workdir(work: Path, selection: dict[str, Any], fresh: bool) -> None:
    """A workdir holds runs of one selection only: another one is refused (or, with --fresh, the old one removed)."""
    saved = work / "selection.json"
    if saved.is_file() and json.loads(saved.read_text()) != selection:
        if not fresh:
            raise SystemExit(f"{work} holds runs of another selection or settings ({saved}); give --fresh to "
                             "remove them, or another --workdir")
        for name in ("runs", "logs", "configs"):
            shutil.rmtree(work / name, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(selection, indent=2) + "\n")


def write_config(work: Path, setting: Setting, problems: Path, cache_dir: Path) -> Path:
    """The repository's config.yaml with the trees, the cache, the output folder and (CPU dask) dask_workers."""
    import yaml
    values = repo_config()
    values.update(problems_dir=str(problems), solutions_dir=str(work / "solutions"), cache_dir=str(cache_dir),
                  output_dir=str(work / "runs" / setting.folder), dask_workers=setting.gpus)
    path = work / "configs" / f"{setting.folder}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def repo_config() -> dict[str, Any]:
    import yaml
    base = REPO / "config.yaml"
    return (yaml.safe_load(base.read_text()) or {}) if base.is_file() else {}


def cache_dir_of(args: argparse.Namespace) -> Path:
    """--cache-dir, else config.yaml's cache_dir (relative to the repository), where the runs find the builds."""
    if args.cache_dir is not None:
        return args.cache_dir.resolve()
    return (REPO / repo_config().get("cache_dir", ".cache")).resolve()


# ------------------------------------------------------------------------------------------------ builds, runs


def prebuild(config: Path, device: str) -> str:
    """Every selected candidate built into cache_dir, as a run's build stage does (cached ones: a check only)."""
    started = time.monotonic()
    try:
        from harness.core.config import load_config
        from harness.core.discover import discover
        from harness.run import meta
        from harness.run.build import build_all
        from harness.run.pipeline import toolchain_for
        cfg = load_config(config, {"device": device})
        _, pairs = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir))
        builds = build_all(pairs, Path(cfg.cache_dir) / "builds", toolchain_for(device, cfg, meta.gpus()),
                           cfg.build_jobs(), cfg.build_timeout, 0)
    except (ImportError, TypeError, AttributeError) as exc:     # the harness's build API moved: the runs build
        return (f"prebuild failed ({type(exc).__name__}: {exc}); the first run builds instead (its build_seconds "
                "is left out of its evaluate phase either way)")
    counts: dict[str, int] = {}
    for b in builds.values():
        kind = f"{b.status}{' (cached)' if b.cached else ''}"
        counts[kind] = counts.get(kind, 0) + 1
    bad = sorted(cid for cid, b in builds.items() if b.status not in ("built", "skipped"))
    said = f"builds: {len(builds)} in {time.monotonic() - started:.1f} s: {counts}"
    return said + (f"; not built: {', '.join(bad)}" if bad else "")


def run_command(setting: Setting, config: Path, device: str, args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, str(REPO / "run_eval.py"), "--config", str(config), "--device", device,
           "--executor", setting.executor, "--compile-modes", "none", "--json"]
    if device == "cuda":
        cmd += ["--gpus", ",".join(str(g) for g in range(setting.gpus))]
    if args.max_pair_seconds is not None:
        cmd += ["--max-pair-seconds", str(args.max_pair_seconds)]
    return cmd


def run_setting(setting: Setting, cmd: list[str], work: Path, limit_s: float | None) -> tuple[float, str]:
    """One run_eval.py, its output in <work>/logs/; cut by SIGINT past limit_s (it keeps its finished pairs).
    (wall seconds, how it ended)."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(logs / f"{setting.folder}.jsonl", "w") as out, open(logs / f"{setting.folder}.txt", "w") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err)
        try:
            proc.wait(timeout=limit_s)
            how = f"exit {proc.returncode}"
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if isinstance(exc, KeyboardInterrupt):
                raise
            how = f"cut at its time limit ({limit_s:.0f} s)"
    return time.monotonic() - started, how


def estimate_s(setting: Setting, done: dict[str, dict[str, Any]], pairs: int, pair_s: float) -> float:
    """A guess at a setting's wall: local:1's evaluate phase over n (x1.3), else pair_s a pair, plus 45 s."""
    base = (done.get(BASELINE) or {}).get("evaluate_s")
    work = base / setting.gpus * 1.3 if base else pair_s * pairs / setting.gpus
    return work + 45.0 + (30.0 if setting.executor == "dask" else 0.0)


# ------------------------------------------------------------------------------------------------ reading runs


def latest_run(folder: Path, pairs: int) -> Path | None:
    """The newest run folder under `folder` that finished (run.json's wall_seconds) with a record for every pair."""
    for run in sorted(folder.glob("*/run.json"), key=lambda p: p.parent.name, reverse=True):
        meta = json.loads(run.read_text())
        jsonl = run.parent / "results.jsonl"
        lines = jsonl.read_text().splitlines() if jsonl.is_file() else []
        if meta.get("wall_seconds") is not None and len([x for x in lines if x.strip()]) >= pairs:
            return run.parent
    return None


def read_run(run_dir: Path) -> dict[str, Any]:
    """run.json's figures and the records (harness.results.store.read_records: signatures checked)."""
    from harness.results.store import read_records
    meta = json.loads((run_dir / "run.json").read_text())
    wall, built = meta.get("wall_seconds"), meta.get("build_seconds") or 0.0
    records = {r.key: r for r in read_records(run_dir / "results.jsonl")}
    return {"run_dir": str(run_dir), "run_id": meta.get("run_id"), "wall_s": wall, "build_s": built,
            "evaluate_s": wall - built if wall is not None else None, "span_s": pairs_span_s(records.values()),
            "builds_compiled": meta.get("builds_compiled"), "builds_cached": meta.get("builds_cached"),
            "gpus": [g.get("name") for g in meta.get("gpus") or []], "hostname": meta.get("hostname"),
            "cluster_start": (meta.get("dask") or {}).get("cluster_start"), "records": records}


def pairs_span_s(records: Any) -> float | None:
    """From the first record's started_at to the last one's finished_at (whole seconds): the evaluate phase less
    what comes before the first pair and after the last (a dask cluster's start and close)."""
    from datetime import datetime
    starts = [datetime.fromisoformat(r.started_at) for r in records if r.started_at]
    ends = [datetime.fromisoformat(r.finished_at) for r in records if r.finished_at]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else None


def agreement_counts(base: dict, other: dict) -> dict[str, Any]:
    """Statuses and speedups of `other`'s records against the baseline's, pair by pair."""
    from harness.commands.compare import agreement
    shared = sorted(set(base) & set(other))
    same_status = [k for k in shared if base[k].status == other[k].status]
    compared = overlap = inside = apart = 0
    differing = []
    for k in shared:
        a, b = base[k], other[k]
        found = agreement(a.speedup, a.speedup_ci, b.speedup, b.speedup_ci)
        if found is None:
            continue
        compared += 1
        inside += found.inside
        apart += found.apart
        overlaps = a.speedup_ci[0] <= b.speedup_ci[1] and b.speedup_ci[0] <= a.speedup_ci[1]
        overlap += overlaps
        if found.apart or not overlaps:
            differing.append({"pair": k[1], "base": [a.speedup, list(a.speedup_ci)],
                              "this": [b.speedup, list(b.speedup_ci)], "z": round(found.z, 2)})
    status_diff = [{"pair": k[1], "base": base[k].status.value, "this": other[k].status.value}
                   for k in shared if k not in same_status]
    return {"pairs": len(shared), "same_status": len(same_status), "compared": compared, "overlap": overlap,
            "inside": inside, "apart": apart, "status_differs": status_diff, "speedup_differs": differing}


def figures(runs: dict[str, dict[str, Any]], settings: list[Setting]) -> list[dict[str, Any]]:
    """One row per setting with a run: evaluate s; the efficiency against local:1, against the same executor's run
    on one GPU (`own_efficiency`) and over the pairs' spans (`span_efficiency`: local:1's span against this one's);
    agreement with local:1."""
    base = runs.get(BASELINE)
    rows = []
    for s in settings:
        run = runs.get(s.name)
        if run is None:
            continue
        own = runs.get(Setting(s.executor, 1).name) or {}
        row = {k: v for k, v in run.items() if k != "records"}
        row.update(setting=s.name, executor=s.executor, n_gpus=s.gpus, pairs=len(run["records"]),
                   efficiency=efficiency((base or {}).get("evaluate_s"), run["evaluate_s"], s.gpus),
                   own_efficiency=efficiency(own.get("evaluate_s"), run["evaluate_s"], s.gpus),
                   span_efficiency=efficiency((base or {}).get("span_s"), run.get("span_s"), s.gpus))
        row["status_counts"] = count_statuses(run["records"])
        row["agreement"] = agreement_counts(base["records"], run["records"]) if base else None
        rows.append(row)
    return rows


def efficiency(t1: float | None, tn: float | None, n: int) -> float | None:
    """t1 / (n * tn): 1.0 where n GPUs take 1/n of one GPU's time; None without both times."""
    return t1 / (n * tn) if t1 and tn else None


def count_statuses(records: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records.values():
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    return counts


# ------------------------------------------------------------------------------------------------ the table


def cell(x: Any, width: int, digits: int = 1) -> str:
    return f"{x:>{width}.{digits}f}" if isinstance(x, (int, float)) else f"{'-':>{width}}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    head = (f"{'executor':8} {'GPUs':>4} {'pairs':>5} {'evaluate s':>10} {'span s':>6} {'efficiency':>10} "
            f"{'own eff.':>8} {'span eff.':>9} {'statuses':>9} {'CIs overlap':>11} {'inside':>7} {'apart':>6} "
            f"{'built':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        agree = r["agreement"] or {}
        lines.append(f"{r['executor']:8} {r['n_gpus']:>4} {r['pairs']:>5} "
                     f"{cell(r['evaluate_s'], 10)} {cell(r['span_s'], 6, 0)} {cell(r['efficiency'], 10, 3)} "
                     f"{cell(r['own_efficiency'], 8, 3)} {cell(r['span_efficiency'], 9, 3)} "
                     f"{frac(agree, 'same_status', 'pairs'):>9} {frac(agree, 'overlap', 'compared'):>11} "
                     f"{frac(agree, 'inside', 'compared'):>7} {agree.get('apart', '-'):>6} "
                     f"{str(r['builds_compiled']) + '/' + str(r['builds_cached']):>7}")
    for r in rows:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(r["status_counts"].items()))
        lines.append(f"  {r['setting']}: {counts}; {r['run_dir']}")
        start = r.get("cluster_start") or {}
        if start:                                   # a dask run: its LocalCluster's start (run.json's dask)
            lines.append(f"  {r['setting']}: cluster up in {cell(start.get('seconds'), 0)} s, its workers warmed in "
                         f"{cell(start.get('warm_seconds'), 0)} s, the run waited {cell(start.get('waited'), 0)} s "
                         f"for them after its builds" + ("" if start.get("early") else " (started after the builds)"))
        for d in (r["agreement"] or {}).get("status_differs", []):
            lines.append(f"  {r['setting']}: {d['pair']}: status {d['this']} (local:1: {d['base']})")
        for d in (r["agreement"] or {}).get("speedup_differs", []):
            lines.append(f"  {r['setting']}: {d['pair']}: speedup {d['this'][0]:.3f} {fmt_ci(d['this'][1])} against "
                         f"{d['base'][0]:.3f} {fmt_ci(d['base'][1])} (z {d['z']:+.1f})")
    return lines


def frac(agree: dict[str, Any], part: str, whole: str) -> str:
    return f"{agree[part]}/{agree[whole]}" if agree else "-"


def fmt_ci(ci: list[float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


# ------------------------------------------------------------------------------------------------ main


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--gpus-list", default="1,2,4", help="GPU counts (default 1,2,4; counts past the machine's are "
                                                        "left out)")
    p.add_argument("--settings", help="EXECUTOR:N,... instead of every executor at every count (e.g. local:1,dask:2)")
    p.add_argument("--problems-dir", type=Path, help="default: problems (CPU: examples/cpu/problems)")
    p.add_argument("--solutions-dir", type=Path, help="default: solutions (CPU: examples/cpu/solutions)")
    p.add_argument("--levels", help="comma-separated levels (default: level2; CPU: level1)")
    p.add_argument("--problem", default="*", help="glob over <level>/<problem> (default *)")
    p.add_argument("--pairs", type=int, help="only the first N pairs of the selection (default: all)")
    p.add_argument("--include-controls", action="store_true", help="keep aa_*/control_* candidates")
    p.add_argument("--max-pair-seconds", type=float, help="passed to every run (default: the config's)")
    p.add_argument("--cache-dir", type=Path, help="the build cache (default: config.yaml's cache_dir)")
    p.add_argument("--workdir", type=Path, default=REPO / "results" / "scaling",
                   help="copies, configs, runs and logs (default results/scaling; kept: settings already run there "
                        "are not run again)")
    p.add_argument("--rerun", action="store_true", help="run every setting again, even one already run")
    p.add_argument("--fresh", action="store_true", help="remove the workdir's runs of another selection")
    p.add_argument("--deadline-s", type=float, help="seconds this invocation may take: a setting whose estimate "
                                                    "does not fit is left for the next call; one cut is not counted")
    p.add_argument("--pair-s", type=float, default=8.0, help="seconds a pair, for the estimate before local:1 has "
                                                             "run (default 8)")
    p.add_argument("--json", type=Path, help="save the figures here")
    return p.parse_args(argv)


def selection_of(args: argparse.Namespace) -> tuple[Path, Path, list[str]]:
    cpu = args.device == "cpu"
    problems = (args.problems_dir or (CPU_TREE / "problems" if cpu else REPO / "problems")).resolve()
    solutions = (args.solutions_dir or (CPU_TREE / "solutions" if cpu else REPO / "solutions")).resolve()
    levels = (args.levels or ("level1" if cpu else "level2")).split(",")
    pairs = shipped_pairs(problems, solutions, levels, args.problem, args.include_controls)[:args.pairs]
    if not pairs:
        raise SystemExit(f"no candidate selected under {solutions} ({levels}, --problem {args.problem})")
    if len(pairs) < MIN_PAIRS and not cpu:
        print(f"note: {len(pairs)} pairs (issue 45 asks for at least {MIN_PAIRS})", flush=True)
    return problems, solutions, pairs


def run_pending(settings: list[Setting], configs: dict[str, Path], runs: dict[str, dict[str, Any]],
                args: argparse.Namespace, work: Path, n_pairs: int, started: float) -> None:
    """Every setting without a complete run (all with --rerun), while the deadline allows."""
    for s in settings:
        if s.name in runs and not args.rerun:
            print(f"{s.name}: already run ({runs[s.name]['run_dir']})", flush=True)
            continue
        limit = None
        if args.deadline_s is not None:
            left = args.deadline_s - (time.monotonic() - started)
            guess = estimate_s(s, runs, n_pairs, args.pair_s)
            if guess > left:
                print(f"{s.name}: left for the next call (estimate {guess:.0f} s, {left:.0f} s left)", flush=True)
                continue
            limit = left
        print(f"{s.name}: running {n_pairs} pairs ...", flush=True)
        wall, how = run_setting(s, run_command(s, configs[s.name], args.device, args), work, limit)
        found = latest_run(work / "runs" / s.folder, n_pairs)
        if found is None or (args.rerun and runs.get(s.name, {}).get("run_dir") == str(found)):
            print(f"{s.name}: {how} after {wall:.0f} s, no complete run (see {work / 'logs' / s.folder}.txt)",
                  flush=True)
            continue
        runs[s.name] = read_run(found)
        print(f"{s.name}: {how}, {wall:.0f} s in all, evaluate phase {runs[s.name]['evaluate_s']:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    problems, solutions, pairs = selection_of(args)
    counts = sorted({int(c) for c in args.gpus_list.split(",")})
    wanted = [parse_setting(t) for t in args.settings.split(",")] if args.settings else default_settings(counts)
    gpus_here = gpu_count() if args.device == "cuda" else 0
    if args.device == "cuda" and not gpus_here:
        raise SystemExit("--device cuda: nvidia-smi lists no GPU here (--device cpu --gpus-list 1 for a dry run)")
    settings = usable_settings(wanted, args.device, gpus_here, dask_missing())
    work = args.workdir.resolve()
    cache_dir = cache_dir_of(args)
    check_workdir(work, {"device": args.device, "problems_dir": str(problems), "pairs": pairs,
                         "max_pair_seconds": args.max_pair_seconds, "cache_dir": str(cache_dir)}, args.fresh)
    copy_selection(pairs, solutions, work / "solutions")
    configs = {s.name: write_config(work, s, problems, cache_dir) for s in settings}
    print(f"{len(pairs)} pairs ({problems}), settings {', '.join(s.name for s in settings)}, workdir {work}",
          flush=True)
    print(prebuild(configs[BASELINE], args.device), flush=True)
    runs = {s.name: read_run(r) for s in settings if (r := latest_run(work / "runs" / s.folder, len(pairs)))}
    try:
        run_pending(settings, configs, runs, args, work, len(pairs), started)
    finally:
        rows = figures(runs, settings)
        report(rows, runs, pairs, args)
    return 0


def report(rows: list[dict[str, Any]], runs: dict[str, dict[str, Any]], pairs: list[str],
           args: argparse.Namespace) -> None:
    base = runs.get(BASELINE) or {}
    print(f"\nmachine: {base.get('hostname')}, GPUs {base.get('gpus')}; {len(pairs)} pairs, --compile-modes none",
          flush=True)
    print("\n".join(table(rows)), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"pairs": pairs, "device": args.device, "rows": rows}, indent=2,
                                        default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
