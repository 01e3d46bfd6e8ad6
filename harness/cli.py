"""The command line. `main(argv) -> int` is the one place where errors become messages and exit codes:
0 when the run completed (whatever the verdicts), 2 for usage and input errors, 1 for a harness fault."""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from . import report
from .render import config_output_dir as _config_output_dir, render, wide_console, write_site
from .config import PRECISIONS, Config, load_config
from .errors import HarnessError, OneLineParser, UsageError, interrupted_message, silence_stdout, stdout_pipe_closed

SUBCOMMANDS = ("report", "compare", "lint", "import-kernelbench", "export-kernelbench", "calibrate", "new")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _dispatch(argv)
        sys.stdout.flush()                         # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        if not stdout_pipe_closed():               # a pipe of the harness's own: a fault, not a reader gone
            traceback.print_exc()
            print("error: harness fault (traceback above)", file=sys.stderr)
            return 1
        silence_stdout()                           # `report --csv | head`: the reader has what it wanted
        return 0
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print(interrupted_message(exc), file=sys.stderr)
        return 130
    except SystemExit as exc:                      # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    except Exception:                              # noqa: BLE001 - the harness itself is broken
        traceback.print_exc()
        print("error: harness fault (traceback above)", file=sys.stderr)
        return 1


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "report":
        return cmd_report(argv[1:])
    if argv and argv[0] == "compare":
        from .compare import cmd_compare
        return cmd_compare(argv[1:])
    if argv and argv[0] == "lint":
        from .lint import cmd_lint
        return cmd_lint(argv[1:])
    if argv and argv[0] == "calibrate":
        return cmd_calibrate(argv[1:])
    if argv and argv[0] == "import-kernelbench":
        from .kbimport import cmd_import
        return cmd_import(argv[1:])
    if argv and argv[0] == "export-kernelbench":
        from .kbexport import cmd_export
        return cmd_export(argv[1:])
    if argv and argv[0] == "ci":
        return cmd_ci(argv[1:])
    if argv and argv[0] == "new":
        from .scaffold import cmd_new
        return cmd_new(argv[1:])
    return cmd_run(argv)


CALIBRATE_PROCESSES = 3     # the fewest process pairs `calibrate` measures a problem in, unless --processes is given


def _run_parser(processes_default: str = "1") -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="run_eval.py",
        description="Build, verify and time candidate kernels (solutions/) against reference problems (problems/). "
                    "Other commands: 'run_eval.py report RUN_ID' re-renders a past run; 'run_eval.py compare RUN_A RUN_B' compares two runs pair by pair (exit 1 when a pair got slower or broke); 'run_eval.py calibrate [selection]' runs the A/A test (each problem against itself); 'run_eval.py lint [selection]' checks "
                    "problems for degeneracy; 'run_eval.py import-kernelbench PATH' imports a KernelBench checkout "
                    "or run folder; 'run_eval.py export-kernelbench RUN_ID' writes KernelBench's eval_results.json; "
                    "'run_eval.py new LEVEL/PROBLEM NAME' writes a candidate skeleton; 'run_eval.py ci --base REF' "
                    "evaluates what a branch changed (the CI workflow's check). Each has its own --help.",
        epilog="Every option can also be set in config.yaml; flags win. Exit codes: 0 run completed (whatever the "
               "verdicts), 2 usage or input error, 1 harness fault.")
    p.add_argument("--config", type=Path, help="config file (default: ./config.yaml when it exists)")
    p.add_argument("--problems-dir", help="root of <level>/<name>.py problem files (default: problems)")
    p.add_argument("--solutions-dir", help="root of <level>/<name>/<candidate>.py files (default: solutions)")
    p.add_argument("--output-dir", help="where runs are written (default: results)")
    p.add_argument("--level", help="only this level, e.g. level1 or 1")
    p.add_argument("--problem", metavar="GLOB", help="only problems matching GLOB (on <level>/<name> or <name>)")
    p.add_argument("--candidate", metavar="GLOB", help="only candidates matching GLOB (on the file stem)")
    p.add_argument("--problem-file", type=Path, metavar="P", help="evaluate one pair: this problem file ...")
    p.add_argument("--solution-file", type=Path, metavar="S", help="... with this candidate file")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), help="default: auto (cuda when a GPU exists)")
    p.add_argument("--gpus", metavar="LIST", help="GPU indices to schedule pairs over, e.g. 0,1 (default: 0)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="inputs and both models in this dtype, with its tolerances, for problems that set no DTYPE "
                        "(a problem's own DTYPE wins; default: fp32)")
    p.add_argument("--trials", type=int, help="correctness trials per pair, each with fresh inputs (default: 5)")
    p.add_argument("--samples", type=int, help="deprecated: at least this many timed samples per side (raises "
                   "--min-rounds); pairs are timed in rounds until the speedup's CI reaches --target-rel-ci")
    p.add_argument("--seed", type=int, help="base seed, for reproducible weights and correctness trials (default: "
                   "drawn from os.urandom per run); timed samples' inputs stay secret either way")
    p.add_argument("--timing-mode", choices=("auto", "cold", "graph"),
                   help="cold: one call per sample, L2 flushed; graph: CUDA-graph replay; auto (default): graph when "
                        "the reference's call takes under timing.graph_below_ms")
    p.add_argument("--target-rel-ci", type=float, metavar="X",
                   help="stop a pair once its speedup's 95%% CI half-width is within X of it (default: 0.005; "
                        "on the CPU path 0.05, config cpu_timing)")
    p.add_argument("--min-rounds", type=int, help="rounds (A B B A blocks) before the stopping rule applies (default: 10)")
    p.add_argument("--max-pair-seconds", type=float, metavar="S",
                   help="time cap on one pair's timed rounds; a pair that hits it is flagged noisy (default: 30; "
                        "on the CPU path 8, config cpu_timing)")
    p.add_argument("--processes", type=int, metavar="N",
                   help="measure each pair in N process pairs (fresh reference and candidate workers) and combine "
                        f"them: the CI then covers the bias each process has of its own (default: {processes_default})")
    p.add_argument("--compile-modes", metavar="LIST",
                   help="torch.compile baselines, e.g. default,max-autotune-no-cudagraphs, or none "
                        "(default: both of those; none on the CPU path, config cpu_timing)")
    p.add_argument("--cpu-threads", type=int, help="intra-op threads on both sides (default: 1)")
    p.add_argument("--timeout", type=float, help="seconds one pair may take in its worker (default: 600)")
    p.add_argument("--jobs", type=int, help="parallel builds (default: 0 = number of CPU cores)")
    p.add_argument("--executor", choices=("local", "dask"),
                   help="local (default): this machine's --gpus or CPU; dask: one task per problem on a dask "
                        "cluster (README: Scale-out on Dask)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --executor dask: the dask scheduler to use, e.g. tcp://host:8786 (default: start a "
                        "LocalCluster on this machine)")
    p.add_argument("--resume", metavar="RUN_ID", help="continue a run: evaluate only pairs without a record")
    p.add_argument("--json", action="store_true", help="print records as JSON lines on stdout instead of a table")
    return p


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("problems_dir", "solutions_dir", "output_dir", "level", "problem", "candidate", "device", "gpus",
            "trials", "timeout", "jobs", "seed", "cpu_threads", "precision", "executor", "scheduler")
    overrides = {k: getattr(args, k) for k in keys}
    timing = {"samples": args.samples, "mode": args.timing_mode, "target_rel_ci": args.target_rel_ci,
              "min_rounds": args.min_rounds, "max_pair_seconds": args.max_pair_seconds,
              "compile_modes": args.compile_modes, "processes": args.processes}
    timing = {k: v for k, v in timing.items() if v is not None}
    if timing:
        overrides["timing"] = timing
    return overrides


def load_run_config(args: argparse.Namespace) -> Config:
    from .resume import flag_names, resumed_config
    path = args.config
    if path is None and Path("config.yaml").is_file():
        path = Path("config.yaml")
    elif path is not None and not path.is_file():
        raise UsageError(f"{path}: no such config file")
    if args.resume is not None:             # the run's own config and selection; today's only say where it is
        output_dir = Path(args.output_dir or (load_config(path, {}).output_dir if path else "results"))
        return resumed_config(args, _run_parser(), _overrides, output_dir)
    return load_config(path, _overrides(args), flag_names(_run_parser(), _overrides))


def cmd_run(argv: list[str]) -> int:
    args = _run_parser().parse_args(argv)
    if (args.problem_file is None) != (args.solution_file is None):
        raise UsageError("--problem-file and --solution-file go together")
    cfg = load_run_config(args)
    from .pipeline import run_pipeline     # here, not above: --help and usage errors stay quick
    return run_pipeline(cfg, args, argv)


def cmd_ci(argv: list[str]) -> int:
    """A pull request's check: evaluate the candidates it changed (and every candidate of a problem it changed),
    write a Markdown summary, exit 1 on a pair that is not ok or that regressed against main's last run."""
    import os
    from . import ci
    from .discover import discover
    from .records import as_records
    p = _run_parser()
    p.prog = "run_eval.py ci"
    p.description = ("Evaluate what a branch changed under the problems and solutions trees since it left BASE "
                     "(git diff BASE...HEAD, plus uncommitted files): every changed candidate and every candidate of "
                     "a changed problem. Writes a Markdown summary to --summary or $GITHUB_STEP_SUMMARY and stdout; "
                     "exits 1 when a pair is not ok (skipped excepted) or regressed against --baseline (SLOWER or "
                     "BROKEN, as `compare` judges). The summary names every problem file the branch changed. In CI, "
                     "run the base branch's run_eval.py with --problems-dir/--solutions-dir pointing at the pull "
                     "request's checkout: the diff is taken in that checkout.")
    p.add_argument("--base", required=True, metavar="REF", help="the git ref the branch is compared with, e.g. "
                   "origin/main")
    p.add_argument("--baseline", metavar="RUN", help="main's last run: a run folder, or a folder of runs (the newest "
                   "is taken); only read, before any candidate runs: an --output-dir, cache_dir or --summary inside "
                   "it is refused")
    p.add_argument("--summary", type=Path, metavar="PATH", help="append the Markdown summary here (default: "
                   "$GITHUB_STEP_SUMMARY when set)")
    args = p.parse_args(argv)
    if args.resume is not None or args.problem_file is not None:
        raise UsageError("ci selects its pairs from git; --resume and --problem-file do not apply")
    cfg = load_run_config(args)
    summary = args.summary or (Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY")
                               else None)
    ci.check_outside_baseline(args.baseline, {"--output-dir": Path(cfg.output_dir), "cache_dir": Path(cfg.cache_dir),
                                              "--summary": summary})
    baseline_name, baseline, baseline_meta = ci.load_baseline(args.baseline)     # read now, before any PR code runs
    _, pairs = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, cfg.candidate)
    changed = ci.changed_files(args.base, Path(cfg.solutions_dir)) | ci.changed_files(args.base, Path(cfg.problems_dir))
    selected = ci.select(pairs, changed)
    problems = ci.changed_problems(changed, Path(cfg.problems_dir))

    def publish(text: str) -> None:
        print(text)
        if summary is not None:
            with open(summary, "a") as f:
                f.write(text)

    if not selected:
        note = "\n".join(ci.problems_note(problems))
        publish(f"## Kernel evaluation: nothing to evaluate\n\n{note}\nno candidate of a changed problem and no "
                f"changed candidate since {args.base}\n" if problems else
                f"## Kernel evaluation: nothing to evaluate\n\nno candidate or problem changed since {args.base}\n")
        return 0

    def conclude(store) -> int:
        records = as_records(store.records())
        verdict = ci.judge(records, baseline)
        machines = ci.machine_lines(baseline, baseline_meta, records, store.metadata())
        publish(ci.markdown(records, verdict, store.run_id, baseline_name, machines, problems))
        return verdict.exit_code

    from .pipeline import run_pipeline
    return run_pipeline(cfg, args, ["ci", *argv], pairs=selected, conclude=conclude)


def cmd_calibrate(argv: list[str]) -> int:
    """The A/A test: each selected problem's reference through the full candidate path against itself."""
    from . import calibrate
    from .discover import check_problem_selection, discover
    p = _run_parser(processes_default=f"timing.processes, at least {CALIBRATE_PROCESSES}")
    p.prog = "run_eval.py calibrate"
    p.description = ("The A/A test: every selected problem's own Model, as the candidate `class ModelNew(Model): "
                     "pass`, through the full candidate path against the reference. Prints each speedup with its "
                     "95% CI and writes <output-dir>/calibrate-<run-id>.json. torch.compile baselines are off "
                     "unless --compile-modes is given. Each problem is measured in at least 3 process pairs "
                     "(timing.processes) unless --processes says otherwise: one pair of processes carries a bias of "
                     "its own that its CI does not cover.")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any problem reads outside 1 +/- target_rel_ci or its CI excludes 1.0")
    args = p.parse_args(argv)
    if args.problem_file is not None or args.solution_file is not None:
        raise UsageError("calibrate selects problems with --level/--problem, not --problem-file/--solution-file")
    if args.compile_modes is None:
        args.compile_modes = "none"
    cfg = load_run_config(args)
    if args.processes is None and args.resume is None and cfg.timing.processes < CALIBRATE_PROCESSES:
        argv = [*argv, "--processes", str(CALIBRATE_PROCESSES)]     # in run.json's argv too, for --resume
        args.processes = CALIBRATE_PROCESSES
        cfg = load_run_config(args)
    problems, _ = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, "*")
    if not problems:
        check_problem_selection(Path(cfg.problems_dir), cfg.level, cfg.problem)

    def conclude(store) -> int:
        target = store.metadata()["config"]["timing"]["target_rel_ci"]     # what the run used (cpu_timing on the CPU)
        table = calibrate.rows(store.records(), target)
        path = Path(cfg.output_dir) / f"calibrate-{store.run_id}.json"
        calibrate.write(path, store.run_id, target, table)
        calibrate.render(table, target, wide_console())
        print(f"calibration: {path}", file=sys.stderr)
        return 1 if args.strict and not calibrate.verdict(table)["passed"] else 0

    from .pipeline import run_pipeline
    return run_pipeline(cfg, args, ["calibrate", *argv], pairs=calibrate.aa_pairs(problems), conclude=conclude)


def cmd_report(argv: list[str]) -> int:
    from .store import RunStore
    p = OneLineParser(prog="run_eval.py report", description="Re-render the table, summary and "
                                "leaderboard.md of a past run from its results.jsonl; or export its records "
                                "(--csv, --jsonl), or count fast_p and pass@k the way KernelBench does (--kernelbench).")
    p.add_argument("run_id", nargs="?", help="the run (optional with --html)")
    p.add_argument("--html", action="store_true", help="rebuild <output-dir>/index.html across every run there "
                   "(best candidate per problem, plots, history), and each run's own index.html")
    p.add_argument("--output-dir", default=None, help="where runs are (default: output_dir in config, or results)")
    p.add_argument("--config", type=Path)
    p.add_argument("--json", action="store_true", help="print the aggregates as JSON (with --kernelbench: its "
                   "metrics as one JSON object)")
    export = p.add_mutually_exclusive_group()
    export.add_argument("--csv", action="store_true", help="print the records as CSV on stdout: problem, solution, "
                        "status, correct, speedup, speedup_ci_lo, speedup_ci_hi, speedup_vs_compile, "
                        "candidate_median_ms, reference_median_ms, flags (';'-joined), error")
    export.add_argument("--jsonl", action="store_true", help="print the records as read, one JSON object per line")
    export.add_argument("--kernelbench", action="store_true",
                        help="KernelBench's metrics per level: fast_p (p = 0, 1, 1.5, 2) on each problem's sample 0 "
                             "over every problem of the level in the problems tree, and pass@k over all samples")
    p.add_argument("--problems-dir", type=Path, help="with --kernelbench: the problems tree that gives each level's "
                   "problem count (default: the run's own problems_dir)")
    args = p.parse_args(argv)
    if args.json and (args.csv or args.jsonl):
        raise UsageError(f"--json does not go with {'--csv' if args.csv else '--jsonl'} (see run_eval.py report --help)")
    if args.problems_dir is not None and not args.kernelbench:
        raise UsageError("--problems-dir goes with --kernelbench (see run_eval.py report --help)")
    output_dir = Path(args.output_dir or _config_output_dir(args.config))
    if args.html:
        if args.csv or args.jsonl or args.kernelbench or args.json:
            raise UsageError("--html goes alone (see run_eval.py report --help)")
        page, count = write_site(output_dir, lambda text: print(f"warning: {text}", file=sys.stderr))
        print(f"{page}: {count} runs")
        return 0
    if args.run_id is None:
        raise UsageError("report needs a RUN_ID, or --html (see run_eval.py report --help)")
    store = RunStore.open(output_dir, args.run_id)
    records = store.records()
    if args.csv:
        report.write_csv(records, sys.stdout)
        return 0
    if args.jsonl:
        for record in records:
            print(json.dumps(record))
        return 0
    if args.kernelbench:
        from .kbexport import report_kernelbench
        return report_kernelbench(store, records, args.problems_dir, args.json, wide_console())
    render(records, store, json_mode=args.json, console=wide_console())
    return 0
