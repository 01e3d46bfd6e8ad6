"""The command line. `main(argv) -> int` is the one place where errors become messages and exit codes:
0 when the run completed (whatever the verdicts), 2 for usage and input errors, 1 for a harness fault."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from harness.results import report
from harness.results.render import config_output_dir as _config_output_dir, render, wide_console, write_site
from harness.core.config import EXECUTORS, PRECISIONS, TIMING_MODES, Config, flatten, load_config
from harness.core.errors import (HarnessError, OneLineParser, UsageError, interrupted_code, interrupted_message,
                                 silence_stdout, stdout_pipe_closed, terminate_as_interrupt)
from harness.core.request import RunRequest

if TYPE_CHECKING:
    from harness.run.resume import GivenFlag

# The subcommands, in the order --help lists them, each with its line there. `run_eval.py` with none is the main run.
COMMANDS = {
    "report": "re-render a past run (table, leaderboard.md, index.html) or export its records",
    "compare": "compare two runs pair by pair; exit 1 when a pair got slower or broke",
    "calibrate": "the A/A test: every selected problem's reference against itself",
    "lint": "check problems for degeneracy (outputs that zeros or a constant would match, ...)",
    "import-kernelbench": "copy in a KernelBench checkout's problems or a KernelBench run folder's kernels",
    "export-kernelbench": "write KernelBench's runs/<run_name>/ and results/timing/ files for a run",
    "new": "write a candidate skeleton for a problem",
    "ci": "evaluate what a branch changed (the CI workflow's check)",
    "profile": "one call of each selected candidate and its reference under Nsight Compute (ncu), a table per pair",
}
_MODULES = {"compare": "compare", "lint": "lint", "import-kernelbench": "kbimport", "export-kernelbench": "kbexport",
            "new": "scaffold", "profile": "profile"}     # modules with add_arguments(p) and main(args); the others are below

Arguments = Callable[[argparse.ArgumentParser], Any]
Body = Callable[[argparse.Namespace, list[str]], int]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with terminate_as_interrupt():
        return _main(argv)


def _main(argv: list[str]) -> int:
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
        return interrupted_code(exc)
    except SystemExit as exc:                      # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    except Exception:                              # noqa: BLE001 - the harness itself is broken
        traceback.print_exc()
        print("error: harness fault (traceback above)", file=sys.stderr)
        return 1


def _dispatch(argv: list[str]) -> int:
    args = build_parser(next((word for word in argv if word in COMMANDS), None)).parse_args(argv)
    if args.command is None:
        return cmd_run(args, argv)
    if argv[0] != args.command:
        raise UsageError(f"flags go after the command: run_eval.py {args.command} [flags] (the flags before it are "
                         f"the main run's; see run_eval.py {args.command} --help)")
    return _subcommand(args.command)[1](args, argv[1:])


def _subcommand(name: str) -> tuple[Arguments, Body]:
    """A subcommand's arguments and its body, body(args, what followed the command's name). A module is imported
    only for the command being run, so --help and usage errors stay quick."""
    if name == "report":
        return report_arguments, cmd_report
    if name == "calibrate":
        return calibrate_arguments, cmd_calibrate
    if name == "ci":
        return ci_arguments, cmd_ci
    module = importlib.import_module(f"harness.commands.{_MODULES[name]}")
    return module.add_arguments, lambda args, argv: module.main(args)


def build_parser(command: str | None = None) -> OneLineParser:
    """run_eval.py's parser: the main run's flags, then the subcommands; of those only `command` gets its arguments
    (the others' modules stay unimported)."""
    names = ",".join(COMMANDS)
    p = OneLineParser(
        prog="run_eval.py",
        usage=f"%(prog)s [flags]\n       %(prog)s {{{names}}} [flags] ...",
        description="Build, verify and time candidate kernels (solutions/) against reference problems (problems/): "
                    "without a command, every selected candidate (the flags below). A command does something else "
                    "and takes its own flags: run_eval.py COMMAND --help.",
        epilog="Every flag of the main run can also be set in config.yaml; flags win. Exit codes: 0 run completed "
               "(whatever the verdicts), 2 usage or input error, 1 harness fault.")
    add_run_arguments(p)
    commands = p.add_subparsers(dest="command", title="commands", metavar="COMMAND", parser_class=OneLineParser)
    for name, summary in COMMANDS.items():
        sub = commands.add_parser(name, prog=f"run_eval.py {name}", help=summary, description=summary)
        if name == command:
            _subcommand(name)[0](sub)
    return p


def command_parser(name: str) -> OneLineParser:
    """One command's parser, with its arguments, as run_eval.py builds it."""
    parsed = argparse.Namespace(command=name)
    return build_parser(name).chosen(parsed)


def _run_parser() -> OneLineParser:
    """The main run's parser (what --resume matches flags against)."""
    return build_parser()


CALIBRATE_PROCESSES = 3     # the fewest process pairs `calibrate` measures a problem in, unless --processes is given

# Flags of the main run that calibrate and ci do not take, and why (the one line a user gets for one).
CALIBRATE_NOT_HERE = {flag: "it runs each problem's own Model as the candidate; select problems with --level and "
                            "--problem" for flag in ("--candidate", "--problem-file", "--solution-file")}
CI_NOT_HERE = {**{flag: "it selects its pairs from git and starts a run of its own each time"
                  for flag in ("--resume", "--add-new")},
               **{flag: "it selects its pairs from git (what changed since --base)"
                  for flag in ("--problem-file", "--solution-file")}}


def add_run_arguments(p: argparse.ArgumentParser, without: dict[str, str] | None = None,
                      processes_default: str = "1", compile_modes_default: str = "both of those",
                      json_help: str = "print records as JSON lines on stdout instead of a table") -> None:
    """The main run's flags (calibrate and ci take them too, less the flags in `without`, which get a default of
    None so the run's code reads them the same)."""
    without = without or {}

    def add(flag: str, **kwargs: Any) -> None:
        if flag in without:
            p.set_defaults(**{flag[2:].replace("-", "_"): None})
        else:
            p.add_argument(flag, **kwargs)

    if without and isinstance(p, OneLineParser):
        p.not_here = without
    add("--config", type=Path, help="config file (default: ./config.yaml when it exists)")
    add("--problems-dir", help="root of <level>/<name>.py problem files (default: problems)")
    add("--solutions-dir", help="root of <level>/<name>/<candidate>.py files (default: solutions)")
    add("--output-dir", help="where runs are written (default: results)")
    add("--level", help="only this level, e.g. level1 or 1")
    add("--problem", metavar="GLOB", help="only problems matching GLOB (on <level>/<name> or <name>)")
    add("--candidate", metavar="GLOB", help="only candidates matching GLOB (on the file stem)")
    add("--problem-file", type=Path, metavar="P", help="evaluate one pair: this problem file ...")
    add("--solution-file", type=Path, metavar="S", help="... with this candidate file")
    add("--device", choices=("auto", "cuda", "cpu"), help="default: auto (cuda when a GPU exists)")
    add("--gpus", metavar="LIST", help="GPU indices to schedule pairs over, e.g. 0,1, counted as CUDA counts them "
                                       "(within CUDA_VISIBLE_DEVICES where it is set; default: 0)")
    add("--precision", choices=PRECISIONS,
        help="inputs and both models in this dtype, with its tolerances, for problems that set no DTYPE (a "
             "problem's own DTYPE wins; default: fp32)")
    add("--trials", type=int, help="correctness trials per pair, each with fresh inputs (default: 5)")
    add("--samples", type=int, help="deprecated: at least this many timed samples per side (raises --min-rounds); "
                                    "pairs are timed in rounds until the speedup's CI reaches --target-rel-ci")
    add("--seed", type=int, help="base seed, for reproducible weights and correctness trials (default: drawn from "
                                 "os.urandom per run); timed samples' inputs stay secret either way")
    add("--timing-mode", choices=TIMING_MODES,
        help="cold: one call per sample, L2 flushed; graph: CUDA-graph replay; auto (default): graph when the "
             "reference's call takes under timing.graph_below_ms")
    add("--target-rel-ci", type=float, metavar="X",
        help="stop a pair once its speedup's 95%% CI half-width is within X of it (default: 0.005; on the "
             "CPU path 0.05, config cpu_timing)")
    add("--min-rounds", type=int, help="rounds (A B B A blocks) before the stopping rule applies (default: 10)")
    add("--max-pair-seconds", type=float, metavar="S",
        help="time cap on one pair's timed rounds; a pair that hits it is flagged noisy (default: 30; on the CPU "
             "path 8, config cpu_timing)")
    add("--processes", type=int, metavar="N",
        help="measure each pair in N process pairs (fresh reference and candidate workers) and combine them: the CI "
             f"then covers the bias each process has of its own (default: {processes_default})")
    add("--compile-modes", metavar="LIST",
        help="torch.compile baselines, e.g. default,max-autotune-no-cudagraphs, or none (default: "
             f"{compile_modes_default}{'' if 'none' in compile_modes_default else '; none on the CPU path, config cpu_timing'})")
    add("--time-sizes", choices=("main", "all"),
        help="problems that declare several input sizes (SIZES): time the main size only (default) or every size; "
             "correctness runs on every size either way")
    add("--cpu-threads", type=int, help="intra-op threads on both sides (default: 1)")
    add("--gpu-memory-gb", type=float, metavar="N",
        help="plan each pair within N GiB of GPU memory, both workers together: a pair that cannot fit is skipped "
             "(harness_oom), not blamed on the candidate; e.g. 24 emulates a 24 GB card (default: the card's)")
    add("--timeout", type=float, help="seconds one pair may take in its worker (default: 600)")
    add("--jobs", type=int, help="parallel builds (default: 0 = number of CPU cores)")
    add("--executor", choices=tuple(EXECUTORS),
        help="local (default): this machine's --gpus or CPU; dask: one task per problem on a dask cluster (README: "
             "Scale-out on Dask; needs the dask extra: pip install -e '.[dask]')")
    add("--scheduler", metavar="ADDRESS",
        help="with --executor dask: the dask scheduler to use, e.g. tcp://host:8786 (default: start a LocalCluster "
             "on this machine)")
    add("--resume", metavar="RUN_ID", help="continue a run: evaluate only its pairs without a record, with the "
                                           "config and selection the run recorded; never a pair the run did not "
                                           "have (a candidate written since it started)")
    add("--add-new", action="store_true", help="with --resume: also evaluate, and add to the run, the pairs its "
                                               "selection matches now that it did not have")
    add("--json", action="store_true", help=json_help)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("problems_dir", "solutions_dir", "output_dir", "level", "problem", "candidate", "device", "gpus",
            "trials", "timeout", "jobs", "seed", "cpu_threads", "precision", "executor", "scheduler", "gpu_memory_gb")
    overrides = {k: getattr(args, k) for k in keys}
    timing = {"samples": args.samples, "mode": args.timing_mode, "target_rel_ci": args.target_rel_ci,
              "min_rounds": args.min_rounds, "max_pair_seconds": args.max_pair_seconds,
              "compile_modes": args.compile_modes, "processes": args.processes,
              "sizes": getattr(args, "time_sizes", None)}
    timing = {k: v for k, v in timing.items() if v is not None}
    if timing:
        overrides["timing"] = timing
    return overrides


def flag_keys(parser: argparse.ArgumentParser, overrides: Callable[[argparse.Namespace], dict[str, Any]]
              ) -> dict[str, tuple[str, list[str]]]:
    """dest -> (flag, the dotted config keys it sets), found by passing one flag at a time through `overrides`:
    a flag added to the parser and to `overrides` is covered without a table here."""
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    mapping: dict[str, tuple[str, list[str]]] = {}
    for dest, action in actions.items():
        marker = object()
        ns = argparse.Namespace(**{d: None for d in actions})
        setattr(ns, dest, marker)
        try:
            flat = flatten(overrides(ns))
        except Exception:                                   # noqa: BLE001 - an override that transforms its value
            flat = {}
        mapping[dest] = (max(action.option_strings, key=len), [k for k, v in flat.items() if v is marker])
    return mapping


def flag_names(parser: argparse.ArgumentParser, overrides: Callable[[argparse.Namespace], dict[str, Any]]
               ) -> dict[str, str]:
    """dotted config key -> the flag that sets it ('timing.samples' -> '--samples')."""
    return {key: flag for flag, keys in flag_keys(parser, overrides).values() for key in keys}


def _given_flags(args: argparse.Namespace) -> list[GivenFlag]:
    """The main run's flags given on this command line, each with the config overrides it makes on its own (what
    --resume matches against the run's record)."""
    from harness.run.resume import GivenFlag

    def alone(dest: str) -> dict[str, Any]:
        return _overrides(argparse.Namespace(**{k: (v if k == dest else None) for k, v in vars(args).items()}))

    given = []
    for dest, (flag, keys) in flag_keys(_run_parser(), _overrides).items():
        value = getattr(args, dest, None)
        if value is not None and value is not False:
            given.append(GivenFlag(flag, dest, value, alone(dest) if keys else None))
    return given


def _config_file(path: Path | None) -> Path | None:
    """--config, or ./config.yaml where it exists."""
    if path is None and Path("config.yaml").is_file():
        return Path("config.yaml")
    if path is not None and not path.is_file():
        raise UsageError(f"{path}: no such config file")
    return path


def load_run(args: argparse.Namespace, argv: Sequence[str] = ()) -> tuple[Config, RunRequest]:
    """The parsed flags of a run (the main run, calibrate, ci) as the run layer takes them: its Config and its
    RunRequest (`argv`: the command as run.json records it). The one place a Namespace becomes them."""
    if (args.problem_file is None) != (args.solution_file is None):
        raise UsageError("--problem-file and --solution-file go together")
    path = _config_file(args.config)
    if args.add_new and args.resume is None:
        raise UsageError("--add-new goes with --resume RUN_ID (it adds pairs to that run); a new run takes every "
                         "selected pair")
    request = RunRequest(tuple(argv), args.problem_file, args.solution_file, resume=args.resume,
                         add_new=bool(args.add_new), json=args.json, gpus_given=args.gpus is not None)
    names = flag_names(_run_parser(), _overrides)
    if request.resume is None:
        return load_config(path, _overrides(args), names), request
    output_dir = Path(args.output_dir or (load_config(path, {}).output_dir if path else "results"))
    from harness.run.resume import resumed_config   # the run's own config and selection; today's say where it is
    return resumed_config(request, _given_flags(args), names, output_dir)


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    """The main run: every selected pair (argv: as given, for run.json)."""
    cfg, request = load_run(args, argv)
    from harness.run.pipeline import run_pipeline  # here, not above: --help and usage errors stay quick
    return run_pipeline(cfg, request)


def ci_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Evaluate what a branch changed under the problems and solutions trees since it left BASE "
                     "(git diff BASE...HEAD, plus uncommitted files): every changed candidate and every candidate of "
                     "a changed problem. Writes a Markdown summary to --summary or $GITHUB_STEP_SUMMARY and stdout; "
                     "exits 1 when a pair is not ok (skipped excepted) or regressed against --baseline (SLOWER or "
                     "BROKEN, as `compare` judges). The summary names every problem file the branch changed. In CI, "
                     "run the base branch's run_eval.py with --problems-dir/--solutions-dir pointing at the pull "
                     "request's checkout: the diff is taken in that checkout. The main run's flags apply, except "
                     "--resume, --problem-file and --solution-file.")
    p.add_argument("--base", required=True, metavar="REF", help="the git ref the branch is compared with, e.g. "
                   "origin/main")
    p.add_argument("--baseline", metavar="RUN", help="main's last run: a run folder, or a folder of runs (the newest "
                   "is taken); only read, before any candidate runs: an --output-dir, cache_dir or --summary inside "
                   "it is refused")
    p.add_argument("--summary", type=Path, metavar="PATH", help="append the Markdown summary here (default: "
                   "$GITHUB_STEP_SUMMARY when set)")
    add_run_arguments(p, without=CI_NOT_HERE, json_help="also print each record as a JSON line on stdout (the "
                                                        "summary follows)")


def cmd_ci(args: argparse.Namespace, argv: list[str]) -> int:
    """A pull request's check: evaluate the candidates it changed (and every candidate of a problem it changed),
    write a Markdown summary, exit 1 on a pair that is not ok or that regressed against main's last run."""
    import os
    from harness.commands import ci
    from harness.core.discover import discover
    cfg, request = load_run(args, ["ci", *argv])
    summary = args.summary or (Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY")
                               else None)
    ci.check_summary(summary, "--summary" if args.summary else "$GITHUB_STEP_SUMMARY")
    ci.check_outside_baseline(args.baseline, {"--output-dir": Path(cfg.output_dir), "cache_dir": Path(cfg.cache_dir),
                                              "--summary": summary})
    baseline_name, baseline, baseline_meta = ci.load_baseline(args.baseline)     # read now, before any PR code runs
    _, pairs = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, cfg.candidate,
                        warn=lambda text: print(f"warning: {text}", file=sys.stderr))
    changed = ci.changed_files(args.base, Path(cfg.solutions_dir)) | ci.changed_files(args.base, Path(cfg.problems_dir))
    selected = ci.select(pairs, changed)
    problems = ci.changed_problems(changed, Path(cfg.problems_dir))

    def publish(text: str) -> None:
        print(text)
        if summary is not None:
            ci.append_summary(summary, text)

    if not selected:
        note = "\n".join(ci.problems_note(problems))
        publish(f"## Kernel evaluation: nothing to evaluate\n\n{note}\nno candidate of a changed problem and no "
                f"changed candidate since {args.base}\n" if problems else
                f"## Kernel evaluation: nothing to evaluate\n\nno candidate or problem changed since {args.base}\n")
        return 0

    def conclude(store) -> int:
        records = store.records()
        verdict = ci.judge(records, baseline)
        from harness.results.render import run_target
        machines = [*ci.machine_lines(baseline, baseline_meta, records, store.metadata()),
                    *report.widening_lines(records, run_target(store.metadata()))]    # a CI a calibration widened
        publish(ci.markdown(records, verdict, store.run_id, baseline_name, machines, problems))
        return verdict.exit_code

    from harness.run.pipeline import run_pipeline
    return run_pipeline(cfg, request, pairs=selected, conclude=conclude)


def calibrate_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("The A/A test: every selected problem's own Model, as the candidate `class ModelNew(Model): "
                     "pass`, through the full candidate path against the reference. Prints each speedup with its "
                     "95% CI and writes <output-dir>/calibrate-<run-id>.json. torch.compile baselines are off "
                     "(whatever config.yaml says) unless --compile-modes is given. On a machine not calibrated yet "
                     f"each problem is measured in at least {CALIBRATE_PROCESSES} process pairs (timing.processes), "
                     "and the bias between process pairs is kept in the cache as this machine's between-process "
                     "term, which widens every later one-process-pair CI here; once it is kept, calibrate runs "
                     "like a default run (one process pair, CIs widened by the term), which checks the term. "
                     "--processes says otherwise (2 or more measures the term again). The main run's flags apply, "
                     "except --candidate, --problem-file and --solution-file.")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any problem reads outside 1 +/- target_rel_ci or its CI excludes 1.0")
    p.add_argument("--busy-ok", action="store_true",
                   help="keep the between-process term even when the machine was busy while calibrate ran (load "
                        "average over cores + 2); the cache entry and the printed line say it was busy")
    p.add_argument("--forget", action="store_true",
                   help="remove this machine's between-process term from the cache (runs nothing); later "
                        "one-process-pair CIs here take the defaults until calibrate keeps a term again")
    add_run_arguments(p, without=CALIBRATE_NOT_HERE,
                      processes_default=f"at least {CALIBRATE_PROCESSES} until this machine's between-process "
                                        "term is kept, then timing.processes",
                      compile_modes_default="none here, whatever config.yaml says",
                      json_help="also print each record as a JSON line on stdout (the calibration table follows)")


def cmd_calibrate(args: argparse.Namespace, argv: list[str]) -> int:
    """The A/A test: each selected problem's reference through the full candidate path against itself."""
    from harness.commands import calibrate
    from harness.core.discover import check_problem_selection, discover
    if args.compile_modes is None:
        args.compile_modes = "none"
    cfg, request = load_run(args, ["calibrate", *argv])
    if args.forget:
        return _forget_term(cfg)
    if (args.processes is None and args.resume is None and cfg.timing.processes < CALIBRATE_PROCESSES
            and not _machine_calibrated(cfg)):
        args.processes = CALIBRATE_PROCESSES
        argv = [*argv, "--processes", str(CALIBRATE_PROCESSES)]     # in run.json's argv too, for --resume
        cfg, request = load_run(args, ["calibrate", *argv])
    problems, _ = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, "*")
    if not problems:
        check_problem_selection(Path(cfg.problems_dir), cfg.level, cfg.problem)

    watch = calibrate.LoadWatch().start()          # the machine's load while the A/A pairs run

    def conclude(store) -> int:
        target = store.metadata()["config"]["timing"]["target_rel_ci"]     # what the run used (cpu_timing on the CPU)
        min_rounds = store.metadata()["config"]["timing"]["min_rounds"]
        load = watch.stop()
        store.update_metadata(load=load)
        table = calibrate.rows(store.records(), target)
        found = calibrate.readings(store.records())
        why_not = calibrate.soundness(table, found, None if args.busy_ok else load, min_rounds) if found else []
        path = Path(cfg.output_dir) / f"calibrate-{store.run_id}.json"
        calibrate.write(path, store.run_id, target, table, load, why_not)
        calibrate.render(table, target, wide_console())
        print(f"calibration: {path}", file=sys.stderr)
        if load.get("busy") and not found:
            print(f"warning: {calibrate.soundness([], [], load, min_rounds)[0]}; these readings measure them too",
                  file=sys.stderr)
        kept = calibrate.keep_between_term(store, cfg.cache_dir, why_not, load)
        if why_not:
            lines = [calibrate.not_kept_line(why_not)]
        elif kept:
            lines = calibrate.between_lines(kept[1], target)
        else:
            lines = ["between-process term: not measured (one process pair per problem; --processes 2 or more)"]
        for line in lines:
            print(line, file=sys.stderr)
        return 1 if args.strict and not calibrate.verdict(table)["passed"] else 0

    from harness.run.pipeline import run_pipeline
    try:
        return run_pipeline(cfg, request, pairs=calibrate.aa_pairs(problems), conclude=conclude)
    finally:
        watch.stop()


def _forget_term(cfg: Config) -> int:
    """`calibrate --forget`: this machine's between-process term out of the cache, said in one line."""
    from harness.run import between, meta, pipeline
    gpu_list = meta.gpus()
    device, _ = pipeline.resolve_slots(cfg, gpu_list)
    key = between.machine_key(device, gpu_list, meta.torch_versions()["torch"])
    entry = between.forget(cfg.cache_dir, key)
    if entry is None:
        print(f"no between-process term kept for {key} (in {cfg.cache_dir}); nothing to forget")
        return 0
    when = report.calibration_date({"measured_at": entry.get("measured_at"),
                                    "source": f"calibrate {entry.get('run_id')}"})
    print(f"forgot the between-process term of {key} (calibration of {when}, run {entry.get('run_id')}); "
          f"one-process-pair CIs here take the defaults again")
    return 0


def _machine_calibrated(cfg: Config) -> bool:
    """Whether the cache holds this machine's between-process term (a one-process-pair calibrate can use it)."""
    from harness.run import meta, pipeline
    gpu_list = meta.gpus()
    device, _ = pipeline.resolve_slots(cfg, gpu_list)
    terms = pipeline.between_terms(cfg, device, gpu_list)
    return terms is not None and terms.calibrated is not None


def report_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Re-render the table, summary and leaderboard.md of a past run from its results.jsonl; or "
                     "export its records (--csv, --jsonl), or count fast_p and pass@k the way KernelBench does "
                     "(--kernelbench).")
    p.add_argument("run_id", nargs="?", help="the run (optional with --html)")
    p.add_argument("--html", action="store_true", help="rebuild <output-dir>/index.html across every run there "
                   "(best candidate per problem, plots, history), and each run's own index.html")
    p.add_argument("--output-dir", default=None, help="where runs are (default: output_dir in config, or results)")
    p.add_argument("--config", type=Path, help="config file for the default --output-dir")
    p.add_argument("--json", action="store_true", help="print the aggregates as JSON (with --kernelbench: its "
                   "metrics as one JSON object)")
    export = p.add_mutually_exclusive_group()
    export.add_argument("--csv", action="store_true", help="print the records as CSV on stdout: problem, solution, "
                        "status, correct, speedup, speedup_ci_lo, speedup_ci_hi, speedup_vs_compile, "
                        "candidate_median_ms, reference_median_ms, flags (';'-joined), error, sizes_geomean, sizes, "
                        "ranked (true/false: counted in the geomean and fast_p; controls never)")
    export.add_argument("--jsonl", action="store_true", help="print the records as read, one JSON object per line")
    export.add_argument("--kernelbench", action="store_true",
                        help="KernelBench's metrics per level: fast_p (p = 0, 0.5, 0.8, 1, 1.5, 2) on each "
                             "problem's sample 0 over every problem of the level in the problems tree, with "
                             "KernelBench's arithmetic (reference mean / candidate mean, as export-kernelbench writes "
                             "them; ranked samples count as correct), and pass@k over all samples")
    p.add_argument("--problems-dir", type=Path, help="with --kernelbench: the problems tree that gives each level's "
                   "problem count (default: the run's own problems_dir)")


def cmd_report(args: argparse.Namespace, argv: list[str]) -> int:
    """`run_eval.py report RUN_ID`, parsed."""
    from harness.results.store import RunStore
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
            print(json.dumps(record.to_json()))
        return 0
    if args.kernelbench:
        from harness.commands.kbexport import report_kernelbench
        return report_kernelbench(store, records, args.problems_dir, args.json, wide_console())
    render(records, store, json_mode=args.json, console=wide_console())
    return 0
