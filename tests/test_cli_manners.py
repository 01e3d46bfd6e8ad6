"""The CLI's manners: --help and usage errors that import no torch, a closed pipe that ends quietly, messages that
name the real run and the real path, and `new`'s next command that works as printed. The real CLI in a subprocess,
except where a function is checked on its own."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (FIXTURES, REPO, communicate_or_explain, default_sigint, json_records, skip_timing_if_box_loaded,
                      write_config)
from harness import cli
from harness.core.errors import RunInterrupted, interrupted_message

TREE = FIXTURES / "tree"
RUN_EVAL = str(REPO / "run_eval.py")


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}


def imported_modules(stderr: str) -> list[str]:
    """Module names from `python -X importtime`'s lines on stderr."""
    return [line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")]


def write_run(root: Path, run_id: str, count: int) -> Path:
    """A run folder with `count` records, as `report` and `compare` read it (unsigned: an old run)."""
    d = root / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"schema_version": 2, "run_id": run_id}))
    lines = []
    for i in range(count):
        problem = f"level1/{i % 7:03d}_p"
        lines.append(json.dumps({"schema_version": 2, "run_id": run_id, "problem": problem,
                                 "solution": f"{problem}/c{i}", "status": "ok", "correct": True, "flags": [],
                                 "error": None, "speedup": 1 + i / 1000, "speedup_ci": [1 + i / 1000 - 0.01,
                                                                                        1 + i / 1000 + 0.01],
                                 "device": "cpu"}))
    (d / "results.jsonl").write_text("".join(line + "\n" for line in lines))
    return d


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """<tmp>/results with a small run and two big ones (each command's output far past a pipe's 64 KiB)."""
    root = tmp_path_factory.mktemp("runs") / "results"
    write_run(root, "small", 12)
    write_run(root, "big-a", 3000)
    write_run(root, "big-b", 3000)
    return root


# ---------------------------------------------------------------- 1. no torch before there is work for it

@pytest.mark.parametrize("args, code", [
    (["--help"], 0),
    (["report", "--help"], 0),
    (["compare", "--help"], 0),
    (["lint", "--help"], 0),
    (["calibrate", "--help"], 0),
    (["ci", "--help"], 0),
    (["new", "--help"], 0),
    (["import-kernelbench", "--help"], 0),
    (["export-kernelbench", "--help"], 0),
    (["--bogus"], 2),
    (["--trials", "many"], 2),
    (["--problem-file", "p.py"], 2),
    (["calibrate", "--strict", "--bogus"], 2),
    (["lint", "--bogus"], 2),
    (["report"], 2),
    (["reprot", "r1"], 2),
    (["--problem-dir", "problems"], 2),
    (["calibrate", "--candidate", "x"], 2),
    (["ci", "--base", "main", "--resume", "r1"], 2),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
@pytest.mark.timing
def test_help_and_usage_errors_import_no_torch(args, code):
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-X", "importtime", RUN_EVAL, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=cli_env())
    elapsed = time.monotonic() - t0
    assert done.returncode == code, done.stderr[-2000:]
    torch = [m for m in imported_modules(done.stderr) if m == "torch" or m.startswith("torch.")]
    assert not torch, f"{args} imported {torch[:5]}"
    if code == 2:
        errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
        assert len(errors) == 1 and errors[0].startswith("error: "), errors
    skip_timing_if_box_loaded()
    assert elapsed < 5, f"{args} took {elapsed:.1f} s"         # ~0.3 s on the 2-core box; torch alone is ~2 s


@pytest.mark.parametrize("export", [[], ["--csv"], ["--json"], ["--jsonl"]], ids=lambda v: " ".join(v) or "table")
def test_report_of_a_run_imports_no_torch(runs, export):
    done = subprocess.run([sys.executable, "-X", "importtime", RUN_EVAL, "report", "small", "--output-dir",
                           str(runs), *export], cwd=REPO, capture_output=True, text=True, timeout=60, env=cli_env())
    assert done.returncode == 0, done.stderr[-2000:]
    torch = [m for m in imported_modules(done.stderr) if m == "torch" or m.startswith("torch.")]
    assert not torch, torch[:5]
    assert done.stdout.strip()


def test_timing_keeps_its_names_for_the_workers():
    """The parent's arithmetic moved to harness.shared.stats; harness.worker.timing (the workers' clocks) still offers
    it."""
    from harness.shared import stats
    from harness.worker import timing
    assert timing.summarize is stats.summarize and timing.graph_replays is stats.graph_replays
    assert timing.GRAPH_SAMPLE_MS == stats.GRAPH_SAMPLE_MS and timing.GRAPH_MAX_REPLAYS == stats.GRAPH_MAX_REPLAYS


# ---------------------------------------------------------------- 2. a reader that stops early

@pytest.mark.parametrize("args", [
    ["report", "big-a", "--csv"],
    ["report", "big-a", "--jsonl"],
    ["compare", "big-a", "big-b", "--json"],
    ["report", "big-a"],
], ids=" ".join)
def test_closed_pipe_ends_quietly_with_exit_0(runs, args):
    """`run_eval.py report RUN --csv | head -1`: the reader takes a line and goes; no traceback, exit 0."""
    proc = subprocess.Popen([sys.executable, RUN_EVAL, *args, "--output-dir", str(runs)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    try:
        first = proc.stdout.readline()
        proc.stdout.close()                        # as `head -1` does
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert first.strip()
    err_text = err.decode()
    assert proc.returncode == 0, err_text[-2000:]
    assert "Traceback" not in err_text and "error:" not in err_text and "Exception ignored" not in err_text


def test_a_broken_pipe_of_the_harness_own_is_still_a_fault(monkeypatch, capsys):
    """Only stdout's reader going away is quiet: a BrokenPipeError from anything else (a worker's pipe) is a
    harness fault, as before."""
    def broken(argv):
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(cli, "_dispatch", broken)
    assert cli.main(["report", "x"]) == 1
    assert "harness fault" in capsys.readouterr().err


# ---------------------------------------------------------------- 3. messages that name what they mean

def test_resume_hint_names_the_run_and_the_command():
    from harness.run.pipeline import resume_hint
    results = Path("results/20260101-000000-abcd/results.jsonl")
    plain = resume_hint("20260101-000000-abcd", results, "results", ["--level", "1"])
    assert plain.endswith("continue with: python run_eval.py --resume 20260101-000000-abcd")
    assert "RUN_ID" not in plain and str(results) in plain
    elsewhere = resume_hint("r1", results, "/tmp/my runs", ["calibrate", "--level", "1"])
    assert elsewhere.endswith("python run_eval.py calibrate --resume r1 --output-dir '/tmp/my runs'")
    assert "--resume" not in resume_hint("r1", results, "results", ["ci", "--base", "main"])
    assert interrupted_message(RunInterrupted(plain)) == plain
    assert "RUN_ID" not in interrupted_message(KeyboardInterrupt())


def test_ctrl_c_during_a_run_names_the_run_to_resume(tmp_path):
    config = write_config(tmp_path, TREE, timeout=120)
    proc = subprocess.Popen([sys.executable, RUN_EVAL, "--config", str(config), "--problem", "001_linear_relu",
                             "--candidate", "hang"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=cli_env(), preexec_fn=default_sigint)
    try:
        run_id = None
        deadline = time.monotonic() + 120
        while run_id is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if line.startswith("run "):
                run_id = line.split()[1].rstrip(":")
        assert run_id, "the run never said its id"
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        _, err = communicate_or_explain(proc, 60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: finished pairs are in ") and "RUN_ID" not in last, last
    assert f"--resume {run_id} --output-dir {tmp_path / 'results'}" in last, last


def test_a_missing_tree_says_where_it_looked(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, RUN_EVAL, "--device", "cpu"], cwd=elsewhere, capture_output=True,
                          text=True, timeout=120, env=cli_env())
    assert done.returncode == 2
    assert done.stderr.strip() == (f"error: problems: problems directory does not exist "
                                   f"(looked at {elsewhere / 'problems'})")
    shutil.copytree(TREE / "problems", elsewhere / "problems")
    done = subprocess.run([sys.executable, RUN_EVAL, "--device", "cpu", "--solutions-dir", "mine"], cwd=elsewhere,
                          capture_output=True, text=True, timeout=120, env=cli_env())
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: mine: solutions directory does not exist (looked at {elsewhere / 'mine'})"


# ---------------------------------------------------------------- 4. new's next command works as printed

def new_in(cwd: Path, *args: str) -> list[str]:
    """Run `new` from `cwd`; the printed next command, as argv."""
    done = subprocess.run([sys.executable, RUN_EVAL, "new", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env=cli_env())
    assert done.returncode == 0, done.stderr
    command = shlex.split(done.stdout.split("evaluate it with: ", 1)[1])
    assert command[:2] == ["python", RUN_EVAL]               # run_eval.py as it was started: from another folder
    return command[2:]


def trees_in(tmp_path: Path) -> Path:
    """A folder to work in, with the fixture's problems under a relative path (new's bug dropped such trees)."""
    work = tmp_path / "work"
    shutil.copytree(TREE / "problems", work / "my problems")
    return work


def test_new_command_selects_the_new_candidate(tmp_path, monkeypatch):
    """The printed command, parsed and selected as a run would: exactly the new candidate."""
    from harness.core.discover import discover
    work = trees_in(tmp_path)
    args = new_in(work, "level1/001_linear_relu", "my_kernel", "--problems-dir", "my problems",
                  "--solutions-dir", "my solutions")
    assert args[:4] == ["--problems-dir", "my problems", "--solutions-dir", "my solutions"]
    monkeypatch.chdir(work)
    parsed = cli._run_parser().parse_args(args)
    cfg, _ = cli.load_run(parsed)
    _, pairs = discover(Path(cfg.problems_dir), Path(cfg.solutions_dir), cfg.level, cfg.problem, cfg.candidate)
    assert [p.candidate.id for p in pairs] == ["level1/001_linear_relu/my_kernel"]
    assert pairs[0].problem is not None


def test_new_cuda_command_runs_as_printed(tmp_path):
    """The --cuda variant's command, run from where `new` ran (on the CPU here: --device cpu after it, so the
    pair is selected, built and recorded as skipped rather than refused for want of a GPU)."""
    work = trees_in(tmp_path)
    args = new_in(work, "level1/001_linear_relu", "gpu_kernel", "--cuda", "--problems-dir", "my problems",
                  "--solutions-dir", "my solutions")
    assert args[-2:] == ["--device", "cuda"]
    config = write_config(tmp_path, TREE)                     # quick timing, its own output and cache folders
    done = subprocess.run([sys.executable, RUN_EVAL, *args, "--device", "cpu", "--config", str(config), "--json"],
                          cwd=work, capture_output=True, text=True, timeout=300, env=cli_env())
    assert done.returncode == 0, done.stderr[-2000:]
    records = json_records(done.stdout)
    assert list(records) == ["gpu_kernel"] and records["gpu_kernel"]["status"] == "skipped"


# ---------------------------------------------------------------- 5. one parser tree: commands, suggestions, help

def usage_error(*args: str) -> str:
    """The one line a usage error gives (exit 2)."""
    done = subprocess.run([sys.executable, RUN_EVAL, *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=cli_env())
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (done.returncode, lines)
    return lines[0]


def test_usage_lists_the_commands():
    done = subprocess.run([sys.executable, RUN_EVAL, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=cli_env())
    assert done.returncode == 0
    usage = done.stdout.split("\n\n", 1)[0]
    assert usage.startswith("usage: run_eval.py")
    for name in cli.COMMANDS:
        assert name in usage, name
        assert any(line.split()[:1] == [name] for line in done.stdout.splitlines()), f"{name} not listed"


@pytest.mark.parametrize("args, expected", [
    (["reprot", "x"], "unknown command 'reprot'; did you mean report?"),
    (["--problem-dir", "problems"], "unrecognized arguments: --problem-dir problems; did you mean --problems-dir?"),
    (["--problem-dir=problems"], "did you mean --problems-dir?"),
    (["calibrate", "--stirct"], "did you mean --strict?"),
    (["compare", "a", "b", "--min-chnage", "0.1"], "did you mean --min-change?"),
    (["--device", "cdua"], "did you mean cuda?"),
    (["report", "r1", "--cvs"], "did you mean --csv?"),                # two letters swapped in a short word
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_near_miss_gets_a_suggestion(args, expected):
    assert expected in usage_error(*args)


@pytest.mark.parametrize("args, flag", [
    (["calibrate", "--candidate", "x"], "--candidate"),
    (["calibrate", "--problem-file", "p.py", "--solution-file", "s.py"], "--problem-file"),
    (["ci", "--base", "main", "--resume", "r1"], "--resume"),
    (["ci", "--base", "main", "--problem-file", "p.py"], "--problem-file"),
    (["lint", "--trials", "3"], "--trials"),
    (["report", "r1", "--level", "1"], "--level"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_command_refuses_flags_that_mean_nothing_to_it(args, flag):
    line = usage_error(*args)
    assert flag in line and f"run_eval.py {args[0]} --help" in line, line


def test_calibrate_keeps_resume_as_its_interrupt_message_prints_it():
    """`calibrate --resume RUN` is what Ctrl-C during a calibration tells the user to run: it still parses."""
    args = cli.build_parser("calibrate").parse_args(["calibrate", "--resume", "r1", "--strict"])
    assert cli.command_parser("calibrate").prog == "run_eval.py calibrate"
    assert args.command == "calibrate" and args.resume == "r1" and args.candidate is None


def test_flags_before_a_command_are_refused():
    assert "flags go after the command" in usage_error("--level", "1", "report", "r1")


def test_the_main_run_keeps_every_flag():
    """Every flag README's "The CLI" names still parses for a run without a command."""
    args = cli._run_parser().parse_args([
        "--config", "c.yaml", "--problems-dir", "p", "--solutions-dir", "s", "--output-dir", "o", "--level", "1",
        "--problem", "x*", "--candidate", "y*", "--problem-file", "p.py", "--solution-file", "s.py", "--device",
        "cpu", "--gpus", "0,1", "--precision", "bf16", "--trials", "2", "--samples", "3", "--seed", "4",
        "--timing-mode", "cold", "--target-rel-ci", "0.05", "--min-rounds", "5", "--max-pair-seconds", "6",
        "--processes", "2", "--compile-modes", "none", "--cpu-threads", "1", "--gpu-memory-gb", "24",
        "--timeout", "7", "--jobs", "1",
        "--executor", "dask", "--scheduler", "tcp://h:8786", "--resume", "r1", "--json"])
    assert args.command is None and args.level == "1" and args.json and args.scheduler == "tcp://h:8786"


def every_option(parser) -> list[tuple[str, str, str | None]]:
    """(command, option, help) for every argument of every command, the main run's included."""
    import argparse
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in action.choices:
                rows += [(name, opt, help_) for _, opt, help_ in every_option(cli.command_parser(name))]
        elif not isinstance(action, argparse._HelpAction):
            rows.append(("run", max(action.option_strings, key=len) if action.option_strings else action.dest,
                         action.help))
    return rows


def test_every_option_of_every_command_has_help():
    rows = every_option(cli.build_parser())
    assert {command for command, _, _ in rows} == {"run", *cli.COMMANDS}
    missing = [f"{command} {option}" for command, option, help_ in rows if not (help_ or "").strip()]
    assert not missing, missing


def test_calibrate_help_says_one_thing_about_compile_modes():
    """calibrate turns the torch.compile baselines off unless --compile-modes is given: its flag's help says so
    too (it used to say 'default: both of those', the main run's default)."""
    sub = cli.command_parser("calibrate")
    compile_modes = next(a for a in sub._actions if "--compile-modes" in a.option_strings)
    assert "none" in compile_modes.help.split("(default:", 1)[1] and "both" not in compile_modes.help
    assert "off" in sub.description and "unless --compile-modes" in sub.description


# ---------------------------------------------------------------- 6. the evaluate bar: time left, pair in progress

def test_evaluate_bar_shows_eta_and_the_pair_in_progress():
    import io
    from rich.console import Console
    from rich.progress import Progress
    from harness.run.progress import Current, EtaColumn, columns
    now = [0.0]
    progress = Progress(*columns(), console=Console(file=io.StringIO(), width=160), get_time=lambda: now[0])
    task = progress.add_task("evaluate", total=4)
    current = Current(progress, task, processes=3)

    def shown() -> str:
        console = Console(file=io.StringIO(), width=160)
        console.print(progress.make_tasks_table(progress.tasks))
        return console.file.getvalue()

    assert "ETA -:--:--" in shown()                          # nothing done yet: no estimate
    current.started("cpu0", "level1/001_a/fast", 0)
    current.started("cpu1", "level1/002_b/slow", 1)
    now[0] = 120.0
    current.finished("level1/001_a/fast")
    progress.advance(task)                                  # 1 of 4 in 2 minutes: 6 minutes left
    line = shown()
    assert "ETA 0:06:00" in line and "level1/002_b/slow (process 2/3)" in line and "001_a" not in line, line
    assert str(EtaColumn().render(progress.tasks[0])) == "ETA 0:06:00"
    progress.update(task, completed=4)
    assert "ETA" not in shown()
