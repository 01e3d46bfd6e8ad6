"""`run_eval.py lint [selection]`: check that each problem is worth benchmarking, in worker processes (the parent
imports no problem code), on the GPU where there is one. See harness/worker/lint.py for the checks."""
from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from harness.run import meta
from harness.core.config import PRECISIONS, count_flag, load_config, usable_cores
from harness.shared import messages as m
from harness.shared.messages import LintJob
from harness.run.clients import LintClient
from harness.core.discover import Problem, check_problem_selection, discover
from harness.run.schedule import Slot
from harness.core.seeds import RunSeed
from harness.results.records import Status, exit_status
from harness.run.workerproc import Worker, WorkerExit, set_worker_memory_gb, worker_env
from harness.results.store import new_run_id, write_json_atomic
from harness.results import fit
from harness.results.fit import Col


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`lint`'s description and arguments, on run_eval.py's subparser."""
    p.description = ("Check that problems are not degenerate: output scale and spread, dependence on inputs and "
                     "weights, whether zeros, a constant or the first input would pass, NaN/Inf, determinism, eager "
                     "time, peak memory. Writes <output-dir>/lint-<id>.json.")
    p.add_argument("--config", type=Path, help="config file (default: ./config.yaml when it exists)")
    p.add_argument("--problems-dir", help="root of <level>/<name>.py problem files (default: problems)")
    p.add_argument("--output-dir", help="where lint-<id>.json is written (default: results)")
    p.add_argument("--level", help="only this level, e.g. level1 or 1")
    p.add_argument("--problem", metavar="GLOB", help="only problems matching GLOB (on <level>/<name> or <name>)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), help="default: auto (cuda when a GPU exists)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="dtype for problems that set no DTYPE (default: precision in config.yaml, else fp32)")
    p.add_argument("--gpus", metavar="LIST", help="GPU indices to lint on, e.g. 0,1 (default: 0)")
    p.add_argument("--timeout", type=float, help="seconds per problem (default: reference_timeout)")
    p.add_argument("--gpu-memory-gb", type=float, metavar="N",
                   help="lint within N GiB of GPU memory: a check that does not fit beside the kept outputs is "
                        "skipped and named; only the eager forward not fitting is oom (default: gpu_memory_gb in "
                        "config.yaml, else the card's)")
    p.add_argument("--per-gpu", type=int, default=1, metavar="N",
                   help="start N lint workers per GPU: they import torch side by side and take turns on the GPU, "
                        "so eager times stay exclusive (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON line per problem instead of a table")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any problem is degenerate or cannot be linted (error, oom), for CI")
    return p


def main(args: argparse.Namespace) -> int:
    """`run_eval.py lint [selection]`, parsed."""
    from harness.results.render import wide_console
    from harness.run.pipeline import resolve_slots
    path = args.config or (Path("config.yaml") if Path("config.yaml").is_file() else None)
    cfg = load_config(path, {"problems_dir": args.problems_dir, "output_dir": args.output_dir, "level": args.level,
                             "problem": args.problem, "device": args.device, "gpus": args.gpus,
                             "precision": args.precision, "gpu_memory_gb": args.gpu_memory_gb,
                             "reference_timeout": args.timeout}, {"reference_timeout": "--timeout"})
    count_flag("--per-gpu", args.per_gpu, 1, usable_cores())
    problems, _ = discover(Path(cfg.problems_dir), Path(cfg.problems_dir) / "__none__", cfg.level, cfg.problem)
    if not problems:
        check_problem_selection(Path(cfg.problems_dir), cfg.level, cfg.problem)
    _, slots = resolve_slots(cfg, meta.gpus(), gpus_given=args.gpus is not None)
    slots = slots * args.per_gpu
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_dir = out_dir / ".lint-logs"
    log_dir.mkdir(exist_ok=True)
    started = time.monotonic()
    seed = RunSeed.resolve(cfg.seed).base              # seed: null draws one (written to the lint file)
    set_worker_memory_gb(cfg.worker_memory_gb)
    path = out_dir / f"lint-{new_run_id()}.json"
    done: list[dict[str, Any]] = []

    def finished(result: dict[str, Any]) -> None:
        done.append(result)
        progress.advance(task)
        if args.json:                                  # as each finishes: an interrupted lint keeps what it did
            print(json.dumps(result), flush=True)

    try:
        with _progress(wide_console(stderr=True)) as progress:
            task = progress.add_task("lint", total=len(problems))
            results = lint_problems(problems, slots, seed, cfg.reference_timeout, log_dir,
                                    on_done=finished, precision=cfg.precision, gpu_memory_gb=cfg.gpu_memory_gb)
    except KeyboardInterrupt:
        write_json_atomic(path, {"problems": sorted(done, key=lambda r: r["problem"]), "seed": seed,
                                 "wall_seconds": round(time.monotonic() - started, 1), "interrupted": True})
        print(f"interrupted: {len(done)} of {len(problems)} problems linted, written to {path}", file=sys.stderr)
        return 130
    write_json_atomic(path, {"problems": results, "seed": seed,
                             "wall_seconds": round(time.monotonic() - started, 1)})
    if not args.json:
        console = wide_console()
        console.print(table(results, console.width))
        bad = [r for r in results if r["verdict"] != "ok"]
        nondet = sum(1 for r in results if r.get("deterministic") is False)
        console.print(f"{len(results)} problems, {len(results) - len(bad)} pass lint, {len(bad)} do not, "
                      f"{nondet} not bit-for-bit deterministic; {time.monotonic() - started:.0f} s; written to "
                      f"{path}", highlight=False, soft_wrap=True)     # a path at its end: never broken
    return 1 if args.strict and any(r["verdict"] != "ok" for r in results) else 0


def _progress(console):
    """The run's progress bar (harness.run.progress), with the time left: problems done so far, extrapolated."""
    from harness.run.progress import bar
    return bar(console)


def lint_problems(problems: list[Problem], slots: list[Slot], seed: int, timeout: float,
                  log_dir: Path, on_done: Callable[[dict[str, Any]], None] | None = None,
                  precision: str | None = None, gpu_memory_gb: float | None = None) -> list[dict[str, Any]]:
    todo: queue.Queue = queue.Queue()
    for problem in problems:
        todo.put(problem)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    gpu_turns = {slot.gpu: threading.Lock() for slot in slots}

    def serve(slot: Slot) -> None:
        while True:
            try:
                problem = todo.get_nowait()
            except queue.Empty:
                return
            result = lint_one(problem, slot, seed, timeout, log_dir, gpu_turns[slot.gpu], precision, gpu_memory_gb)
            with lock:
                results.append(result)
                if on_done is not None:
                    on_done(result)

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r["problem"])


def lint_one(problem: Problem, slot: Slot, seed: int, timeout: float, log_dir: Path,
             gpu_turn: threading.Lock, precision: str | None = None, gpu_memory_gb: float | None = None
             ) -> dict[str, Any]:
    """Workers sharing a GPU (--per-gpu N) start side by side (the torch import), then take turns on the GPU,
    so that eager times are measured on an otherwise idle device. A check skipped for memory is named in `why`."""
    base = {"problem": problem.id, "device": slot.name}
    if problem.error:
        return {**base, "verdict": "error", "reasons": [problem.error]}
    worker = Worker("lint", worker_env(slot.env()), log_dir / f"{problem.id.replace('/', '__')}.log")
    try:
        with gpu_turn:
            reply = LintClient(worker).lint(LintJob(str(problem.path.resolve()), slot.device, seed, precision,
                                                    gpu_memory_gb=gpu_memory_gb), time.monotonic() + timeout)
    except WorkerExit as exc:
        if exit_status(exc.kind) is Status.OOM:
            return {**base, "verdict": "oom", "reasons": [f"oom: lint worker: {exc.detail}"]}
        return {**base, "verdict": "error", "reasons": [f"lint worker: {exc.detail}"]}
    finally:
        worker.close()
    if isinstance(reply, m.Error):
        if reply.oom:
            where = f" during {reply.stage}" if reply.stage else ""
            return {**base, "verdict": "oom", "reasons": [f"oom: out of memory{where}: {reply.error}"]}
        return {**base, "verdict": "error", "reasons": [str(reply.error)]}
    return {**base, "verdict": "degenerate" if reply.degenerate else "ok", **m.payload(reply)}


def _yes(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "no")


LINT_COLUMNS = (                # keep: 0 always shown; at a narrow width the larger numbers go first
    Col("problem", cut="middle", least=14), Col("verdict"), Col("why", keep=1, cut="end", least=16),
    Col("eager ms", keep=2, justify="right"), Col("zeros pass", keep=3), Col("const pass", keep=3),
    Col("identity pass", keep=3), Col("input dep", keep=3), Col("param dep", keep=4), Col("NaN/Inf", keep=4),
    Col("bitwise determ.", keep=4), Col("mean|out|", keep=5, justify="right"), Col("std", keep=5, justify="right"),
    Col("peak GB", keep=5, justify="right"), Col("sizes", keep=6, cut="end", least=16))


def table(results: list[dict[str, Any]], width: int | None = None):
    """The lint table; within `width` columns (the console's) its least needed columns are left out (named in its
    caption) and problem ids cut in their middle (harness.results.fit)."""
    def fmt(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)
    rows = [[r["problem"], r["verdict"],
             "; ".join((r.get("reasons") or []) + [f"skipped {s}" for s in r.get("skipped") or []]) or "-",
             fmt(r.get("eager_ms"), ".3f"), _yes(r.get("zeros_pass")), _yes(r.get("constant_pass")),
             _yes(r.get("identity_pass")), _yes(r.get("input_dependent")), _yes(r.get("param_dependent")),
             _yes(r.get("nan_or_inf")), _yes(r.get("deterministic")), fmt(r.get("mean_abs"), ".3g"),
             fmt(r.get("std"), ".3g"), fmt(r.get("peak_memory_gb"), ".2f"), _sizes_text(r.get("sizes"))]
            for r in results]
    colour = {"ok": "green", "degenerate": "red"}

    def style(row: int, col: int) -> str | None:
        return colour.get(results[row]["verdict"], "yellow") if col == 1 else None
    return fit.table(LINT_COLUMNS, rows, "problem lint", width, style)


def _sizes_text(sizes: Any) -> str:
    """Each declared size's verdict and eager time ("-" for a problem with one size)."""
    if not isinstance(sizes, list) or not sizes:
        return "-"
    def one(s: dict[str, Any]) -> str:
        ms = s.get("eager_ms")
        timed = f" {ms:.3f} ms" if isinstance(ms, (int, float)) else ""
        return f"{s.get('name')}{'*' if s.get('main') else ''}: {s.get('verdict')}{timed}"
    return ", ".join(one(s) for s in sizes if isinstance(s, dict))
