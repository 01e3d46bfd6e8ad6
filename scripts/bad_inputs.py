#!/usr/bin/env python3
"""Bad-input battery for the harness's command line: a report, not a test.

Runs the real CLI (`run_eval.py` and its subcommands) once per case over fixtures built in a temporary directory
(a one-pair problems/solutions tree, small configs, broken problem files, damaged run folders) and checks that
every bad input is answered the way harness/cli.py promises: exit code 2, no Python traceback anywhere in stdout
or stderr, and a last non-empty stderr line (earlier `warning:` lines are allowed) that names the offending flag,
file or key. Prints one line per case and a summary; always exits 0.

    python scripts/bad_inputs.py

Nothing is written outside the temporary directory: every case passes its own --config, --output-dir or
--problems-dir, so the repository's config.yaml, problems/ and results/ are never used.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

REPO = Path(__file__).resolve().parent.parent
FIXTURE_PROBLEM = REPO / "tests" / "fixtures" / "tree" / "problems" / "level1" / "001_linear_relu.py"
CASE_TIMEOUT_S = 120
TRACEBACK = "Traceback (most recent call last)"
SHOWN_CHARS = 120

# Placeholders in a case's argv and text files: the shared fixtures, and the case's own scratch directory.
FX, CASE = "{fx}", "{case}"

PLAIN_CANDIDATE = '''\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
'''

GOOD_MODEL = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

'''


@dataclass(frozen=True)
class Case:
    """One bad input: the CLI arguments (after run_eval.py), the words its error line must contain, and the files
    (relative to the case's scratch directory) written before it runs."""
    name: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]
    files: Mapping[str, str | bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    case: Case
    exit_code: int | None          # None: killed after CASE_TIMEOUT_S
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    @property
    def error_line(self) -> str:
        lines = self.stderr_lines
        return lines[-1] if lines else ""

    @property
    def extra_lines(self) -> int:
        """Non-empty stderr lines before the error line that are not `warning:` lines (e.g. a usage block)."""
        return sum(1 for line in self.stderr_lines[:-1] if not line.lstrip().startswith("warning:"))

    def problem(self) -> str | None:
        """Why this is not one clear line naming the culprit with exit 2; None when it is."""
        if self.exit_code is None:
            return f"timed out after {CASE_TIMEOUT_S} s"
        if TRACEBACK in self.stdout + self.stderr:
            return "traceback"
        if self.exit_code != 2:
            return f"exit {self.exit_code}"
        missing = [w for w in self.case.expect if w.lower() not in self.error_line.lower()]
        if missing:
            return f"last stderr line lacks {', '.join(map(repr, missing))}"
        return None


# ---------------------------------------------------------------------------------------------------- fixtures

def small_config(**overrides: Any) -> dict[str, Any]:
    """The settings of tests/conftest.py's write_config over the fixture tree, with `overrides` on top (the
    'timing' mapping merged key by key)."""
    cfg: dict[str, Any] = {
        "problems_dir": f"{FX}/tree/problems", "solutions_dir": f"{FX}/tree/solutions",
        "output_dir": f"{FX}/out", "cache_dir": f"{FX}/cache", "device": "cpu", "trials": 3, "timeout": 30,
        "timing": {"warmup": 2, "block_samples": 2, "min_rounds": 6, "target_rel_ci": 0.5,
                   "max_pair_seconds": 20, "interference_tolerance": 0.25, "compile_modes": []},
    }
    for key, value in overrides.items():
        if key == "timing":
            cfg["timing"] = {**cfg["timing"], **value}
        else:
            cfg[key] = value
    return cfg


def config_text(**overrides: Any) -> str:
    return yaml.safe_dump(small_config(**overrides), sort_keys=False)


def substitute(text: str, fx: Path, case_dir: Path) -> str:
    return text.replace(FX, str(fx)).replace(CASE, str(case_dir))


def write_files(files: Mapping[str, str | bytes], base: Path, fx: Path) -> None:
    for rel, content in files.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(substitute(content, fx, base))


def build_fixtures(fx: Path) -> None:
    """The valid one-pair tree, the small config, and odd paths a careless user points at."""
    problem = fx / "tree" / "problems" / "level1" / FIXTURE_PROBLEM.name
    problem.parent.mkdir(parents=True)
    shutil.copy(FIXTURE_PROBLEM, problem)
    write_files({
        "tree/solutions/level1/001_linear_relu/plain.py": PLAIN_CANDIDATE,
        "config.yaml": config_text(),
        "a_file.txt": "not a directory\n",
        "flat/001_linear_relu.py": FIXTURE_PROBLEM.read_text(),
    }, fx, fx)
    for name in ("empty", "out", "kb/problems", "kb/solutions"):
        (fx / name).mkdir(parents=True, exist_ok=True)


def cli(*args: str, timeout: float = CASE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "run_eval.py", *args], cwd=REPO, capture_output=True, text=True,
                          errors="replace", timeout=timeout, env=env)


def make_runs(fx: Path) -> str:
    """One real (tiny) run under fx/runs, and damaged copies of it; returns the real run's id."""
    runs = fx / "runs"
    result = cli("--config", str(fx / "config.yaml"), "--output-dir", str(runs), "--json")
    found = sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []
    if result.returncode != 0 or len(found) != 1:
        print(f"note: the setup run failed (exit {result.returncode}); cases that need it will say so:\n"
              f"{result.stderr[-600:]}", file=sys.stderr)
        runs.mkdir(exist_ok=True)
        return "setup-run-missing"
    real = found[0]
    meta = json.loads((runs / real / "run.json").read_text())
    _copy_run(runs, real, "nokey", run_json=json.dumps({**meta, "signing": {
        **meta.get("signing", {}), "key_file": str(fx / "cache" / "keys" / "gone.key")}}))
    _copy_run(runs, real, "noconfig", run_json=json.dumps({"run_id": "noconfig"}))
    _copy_run(runs, real, "badjson", run_json="{this is not json")
    _copy_run(runs, real, "listjson", run_json="[1, 2, 3]\n")
    _copy_run(runs, real, "garbage", results=b"this is not a record\n\x00\xff{\"half\": \n[1, 2]\n")
    return real


def _copy_run(runs: Path, real: str, name: str, run_json: str | None = None, results: bytes | None = None) -> None:
    dest = runs / name
    shutil.copytree(runs / real, dest)
    if run_json is not None:
        (dest / "run.json").write_text(run_json)
    if results is not None:
        (dest / "results.jsonl").write_bytes(results)


# ------------------------------------------------------------------------------------------------------- cases

def run(*args: str) -> tuple[str, ...]:
    """A main-command invocation over the small config (so a case that is not rejected finishes in seconds)."""
    return ("--config", f"{FX}/config.yaml", "--json", *args)


def config_case(name: str, expect: tuple[str, ...], text: str | bytes | None = None, **overrides: Any) -> Case:
    """A run whose --config file (named after the case, so the error can name it) is `text` or the small config
    with `overrides`."""
    fname = f"{name}.yaml"
    body = text if text is not None else config_text(**overrides)
    return Case(name, ("--config", f"{CASE}/{fname}", "--json"), expect, {fname: body})


def flag_cases() -> list[Case]:
    return [
        Case("samples_negative", run("--samples", "-1"), ("--samples",)),
        Case("samples_zero", run("--samples", "0"), ("--samples",)),
        Case("trials_zero", run("--trials", "0"), ("--trials",)),
        Case("trials_negative", run("--trials", "-3"), ("--trials",)),
        Case("trials_float", run("--trials", "1.5"), ("--trials",)),
        Case("gpus_letters", run("--gpus", "x"), ("--gpus",)),
        Case("gpus_negative", run("--gpus", "-1"), ("--gpus",)),
        Case("gpus_duplicate", run("--gpus", "0,0"), ("--gpus",)),
        Case("gpus_0_1_no_gpu", ("--config", f"{CASE}/auto.yaml", "--json", "--gpus", "0,1"), ("--gpus",),
             {"auto.yaml": config_text(device="auto")}),
        Case("device_cuda_no_gpu", run("--device", "cuda"), ("--device",)),
        Case("device_tpu", run("--device", "tpu"), ("--device",)),
        Case("timeout_negative", run("--timeout", "-5"), ("--timeout",)),
        Case("timeout_zero", run("--timeout", "0"), ("--timeout",)),
        Case("timeout_text", run("--timeout", "abc"), ("--timeout",)),
        Case("jobs_negative", run("--jobs", "-1"), ("--jobs",)),
        Case("jobs_text", run("--jobs", "many"), ("--jobs",)),
        Case("seed_text", run("--seed", "abc"), ("--seed",)),
        Case("seed_negative", run("--seed", "-1"), ("--seed",)),
        Case("seed_too_big", run("--seed", "2147483648"), ("--seed",)),
        Case("timing_mode_bad", run("--timing-mode", "fast"), ("--timing-mode",)),
        Case("target_rel_ci_zero", run("--target-rel-ci", "0"), ("--target-rel-ci",)),
        Case("target_rel_ci_above_1", run("--target-rel-ci", "1.5"), ("--target-rel-ci",)),
        Case("target_rel_ci_nan", run("--target-rel-ci", "nan"), ("--target-rel-ci",)),
        Case("min_rounds_zero", run("--min-rounds", "0"), ("--min-rounds",)),
        Case("max_pair_seconds_negative", run("--max-pair-seconds", "-1"), ("--max-pair-seconds",)),
        Case("compile_modes_bad", run("--compile-modes", "turbo"), ("--compile-modes",)),
        Case("cpu_threads_zero", run("--cpu-threads", "0"), ("--cpu-threads",)),
        Case("unknown_flag", run("--trails", "3"), ("--trails",)),
        Case("flag_missing_value", run("--level"), ("--level",)),
        Case("stray_positional", run("foo"), ("foo",)),
        Case("misspelled_subcommand", ("reprot", "abc"), ("reprot",)),
        Case("output_dir_empty", run("--output-dir", ""), ("--output-dir",)),
        Case("output_dir_is_file", run("--output-dir", f"{FX}/a_file.txt"), ("a_file.txt",)),
        Case("config_missing", ("--config", "/nonexistent.yaml"), ("/nonexistent.yaml",)),
        Case("config_is_directory", ("--config", FX), ("no such config file",)),
    ]


def config_cases() -> list[Case]:
    return [
        config_case("cfg_non_utf8", ("cfg_non_utf8.yaml",), b"device: cpu\ntrials: \xff\xfe3\n"),
        config_case("cfg_not_yaml", ("cfg_not_yaml.yaml",), "problems_dir: [unclosed\ntrials: 3\n"),
        config_case("cfg_tab_indent", ("cfg_tab_indent.yaml",), "timing:\n\twarmup: 2\n"),
        config_case("cfg_yaml_list", ("cfg_yaml_list.yaml",), "- device: cpu\n- trials: 3\n"),
        config_case("cfg_yaml_scalar", ("cfg_yaml_scalar.yaml",), "just some words\n"),
        Case("cfg_empty_plus_bad_flag", ("--config", f"{CASE}/empty.yaml", "--trials", "0"), ("--trials",),
             {"empty.yaml": ""}),
        config_case("cfg_unknown_key", ("trails",), trails=3),
        config_case("cfg_unknown_timing_key", ("timing.sample",), timing={"sample": 100}),
        config_case("cfg_timing_not_mapping", ("timing",), _replace_timing("5")),
        config_case("cfg_trials_string", ("trials",), trials="five"),
        config_case("cfg_trials_bool", ("trials",), trials=True),
        config_case("cfg_trials_zero", ("trials",), trials=0),
        config_case("cfg_timeout_negative", ("timeout",), timeout=-1),
        config_case("cfg_build_timeout_zero", ("build_timeout",), build_timeout=0),
        config_case("cfg_jobs_negative", ("jobs",), jobs=-4),
        config_case("cfg_seed_negative", ("seed",), seed=-1),
        config_case("cfg_seed_string", ("seed",), seed="abc"),
        config_case("cfg_device_tpu", ("device",), device="tpu"),
        config_case("cfg_timing_mode_bad", ("timing.mode",), timing={"mode": "fast"}),
        config_case("cfg_spare_workers_bad", ("spare_workers",), spare_workers="maybe"),
        config_case("cfg_compile_modes_bad", ("compile_modes",), timing={"compile_modes": ["turbo"]}),
        config_case("cfg_gpus_duplicate", ("gpus",), gpus=[0, 0]),
        config_case("cfg_gpus_letters", ("gpus",), gpus="a,b"),
        config_case("cfg_target_rel_ci_2", ("target_rel_ci",), timing={"target_rel_ci": 2}),
        config_case("cfg_min_rounds_negative", ("min_rounds",), timing={"min_rounds": -1}),
        config_case("cfg_max_rounds_below_min", ("max_rounds",), timing={"max_rounds": 3}),
        config_case("cfg_warmup_negative", ("warmup",), timing={"warmup": -1}),
        config_case("cfg_samples_zero", ("samples",), timing={"samples": 0}),
        config_case("cfg_interference_negative", ("interference_tolerance",),
                    timing={"interference_tolerance": -0.1}),
        config_case("cfg_worker_memory_negative", ("worker_memory_gb",), worker_memory_gb=-1),
        config_case("cfg_defenses_string", ("defenses",), defenses="no"),
        config_case("cfg_cpu_threads_zero", ("cpu_threads",), cpu_threads=0),
        config_case("cfg_problems_dir_number", ("problems_dir",), problems_dir=5),
        config_case("cfg_problems_dir_missing", ("no_such_problems",), problems_dir=f"{FX}/no_such_problems"),
        config_case("cfg_output_dir_is_file", ("a_file.txt",), output_dir=f"{FX}/a_file.txt"),
        config_case("cfg_cache_dir_is_file", ("cache_dir",), cache_dir=f"{FX}/a_file.txt"),
        config_case("cfg_level_list", ("level",), level=[1, 2]),
    ]


def _replace_timing(value: str) -> str:
    """The small config with its timing block replaced by `timing: <value>`."""
    cfg = small_config()
    del cfg["timing"]
    return yaml.safe_dump(cfg, sort_keys=False) + f"timing: {value}\n"


def tree_cases() -> list[Case]:
    return [
        Case("problems_dir_missing", run("--problems-dir", f"{FX}/missing_problems"), ("missing_problems",)),
        Case("solutions_dir_missing", run("--solutions-dir", f"{FX}/missing_solutions"), ("missing_solutions",)),
        Case("problems_dir_empty", run("--problems-dir", f"{FX}/empty"), ("empty",)),
        Case("solutions_dir_empty", run("--solutions-dir", f"{FX}/empty"), ("empty",)),
        Case("problems_dir_is_file", run("--problems-dir", f"{FX}/a_file.txt"), ("a_file.txt",)),
        Case("solutions_dir_is_file", run("--solutions-dir", f"{FX}/a_file.txt"), ("a_file.txt",)),
        Case("problems_dir_without_levels", run("--problems-dir", f"{FX}/flat"), ("flat",)),
        Case("problems_dir_is_tree_root", run("--problems-dir", f"{FX}/tree"), ("tree",)),
        Case("problems_solutions_swapped", run("--problems-dir", f"{FX}/tree/solutions",
                                               "--solutions-dir", f"{FX}/tree/problems"), ("solutions",)),
    ]


def selection_cases() -> list[Case]:
    return [
        Case("problem_glob_nomatch", run("--problem", "nomatch*"), ("--problem",)),
        Case("problem_glob_empty", run("--problem", ""), ("--problem",)),
        Case("level_9", run("--level", "9"), ("--level",)),
        Case("level_empty", run("--level", ""), ("--level",)),
        Case("candidate_nope", run("--candidate", "nope"), ("--candidate",)),
        Case("level_ok_problem_nomatch", run("--level", "level1", "--problem", "nomatch"), ("--problem",)),
    ]


def problem_file_cases() -> list[Case]:
    solution = f"{FX}/tree/solutions/level1/001_linear_relu/plain.py"
    problem = f"{FX}/tree/problems/level1/001_linear_relu.py"

    def pair_case(name: str, body: str | bytes, expect: tuple[str, ...]) -> Case:
        fname = f"{name}.py"
        return Case(name, run("--problem-file", f"{CASE}/{fname}", "--solution-file", solution), expect,
                    {fname: body})

    return [
        pair_case("problem_syntax_error", GOOD_MODEL + "def get_inputs(:\n", ("problem_syntax_error.py",)),
        pair_case("problem_no_model", "def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n",
                  ("problem_no_model.py", "Model")),
        pair_case("problem_no_get_inputs", GOOD_MODEL + "def get_init_inputs():\n    return []\n",
                  ("problem_no_get_inputs.py", "get_inputs")),
        pair_case("problem_get_inputs_raises", GOOD_MODEL + "def get_inputs():\n    raise RuntimeError('boom')\n\n"
                  "def get_init_inputs():\n    return []\n", ("problem_get_inputs_raises.py",)),
        pair_case("problem_non_utf8", b"\xff\xfe" + GOOD_MODEL.encode(), ("problem_non_utf8.py",)),
        pair_case("problem_empty", "", ("problem_empty.py",)),
        Case("problem_file_missing", run("--problem-file", f"{FX}/nope.py", "--solution-file", solution),
             ("nope.py",)),
        Case("solution_file_missing", run("--problem-file", problem, "--solution-file", f"{FX}/nope.py"),
             ("nope.py",)),
        Case("problem_file_is_directory", run("--problem-file", f"{FX}/tree", "--solution-file", solution),
             ("tree",)),
        Case("problem_file_alone", run("--problem-file", problem), ("--solution-file",)),
        Case("solution_file_alone", run("--solution-file", solution), ("--problem-file",)),
        Case("problem_solution_swapped", run("--problem-file", solution, "--solution-file", problem),
             ("plain.py",)),
    ]


def store_cases(real: str) -> list[Case]:
    """report, compare and --resume against missing and damaged run folders under {fx}/runs."""
    runs = f"{FX}/runs"
    at = ("--output-dir", runs)
    return [
        Case("report_no_such_run", ("report", "no-such-run", *at), ("no-such-run",)),
        Case("report_dotdot_id", ("report", "../x", *at), ("../x",)),
        Case("report_no_run_id", ("report", *at), ("run_id",)),
        Case("report_garbage_results", ("report", "garbage", *at), ("results.jsonl",)),
        Case("report_garbage_run_json", ("report", "badjson", *at), ("run.json",)),
        Case("report_config_missing", ("report", real, "--config", "/nonexistent.yaml"), ("/nonexistent.yaml",)),
        Case("report_config_bad_yaml", ("report", real, "--config", f"{CASE}/bad.yaml"), ("bad.yaml",),
             {"bad.yaml": "output_dir: [unclosed\n"}),
        Case("report_extra_arg", ("report", real, "again", *at), ("again",)),
        Case("compare_both_missing", ("compare", "nope_a", "nope_b", *at), ("nope_a",)),
        Case("compare_b_missing", ("compare", real, "nope_b", *at), ("nope_b",)),
        Case("compare_one_run_only", ("compare", real, *at), ("RUN_B",)),
        Case("compare_tolerance_5", ("compare", real, real, "--tolerance", "5", *at), ("--tolerance",)),
        Case("compare_tolerance_text", ("compare", real, real, "--tolerance", "abc", *at), ("--tolerance",)),
        Case("compare_config_missing", ("compare", "a", "b", "--config", "/nonexistent.yaml"),
             ("/nonexistent.yaml",)),
        Case("compare_garbage_results", ("compare", real, "garbage", *at), ("results.jsonl",)),
        Case("resume_no_such_run", run("--resume", "no-such-run", *at), ("no-such-run",)),
        Case("resume_dotdot_id", run("--resume", "../x", *at), ("../x",)),
        Case("resume_empty_id", run("--resume", "", *at), ("run id",)),
        Case("resume_changed_trials", run("--resume", real, "--trials", "9", *at), ("--trials",)),
        Case("resume_changed_problem", run("--resume", real, "--problem", "other*", *at), ("--problem",)),
        Case("resume_bad_jobs", run("--resume", real, "--jobs", "-1", *at), ("--jobs",)),
        Case("resume_key_file_gone", run("--resume", "nokey", *at), ("key file",)),
        Case("resume_no_recorded_config", run("--resume", "noconfig", *at), ("config",)),
        Case("resume_run_json_garbage", run("--resume", "badjson", *at), ("run.json",)),
        Case("resume_run_json_list", run("--resume", "listjson", *at), ("run.json",)),
    ]


def subcommand_cases() -> list[Case]:
    cfg = ("--config", f"{FX}/config.yaml")
    lint = ("lint", *cfg, "--output-dir", f"{FX}/lint_out", "--json")
    kb = ("import-kernelbench", "--problems-dir", f"{FX}/kb/problems", "--solutions-dir", f"{FX}/kb/solutions")
    return [
        Case("lint_problem_nomatch", (*lint, "--problem", "nomatch"), ("--problem",)),
        Case("lint_level_9", (*lint, "--level", "9"), ("--level",)),
        Case("lint_problems_dir_missing", (*lint, "--problems-dir", f"{FX}/missing_problems"),
             ("missing_problems",)),
        Case("lint_per_gpu_zero", (*lint, "--per-gpu", "0"), ("--per-gpu",)),
        Case("lint_device_tpu", (*lint, "--device", "tpu"), ("--device",)),
        Case("lint_gpus_letters", (*lint, "--gpus", "x"), ("--gpus",)),
        Case("lint_gpus_0_1_no_gpu", ("lint", "--config", f"{CASE}/auto.yaml", "--output-dir", f"{FX}/lint_out",
                                      "--json", "--gpus", "0,1"), ("--gpus",),
             {"auto.yaml": config_text(device="auto")}),
        Case("lint_timeout_negative", (*lint, "--timeout", "-5"), ("--timeout",)),
        Case("lint_config_missing", ("lint", "--config", "/nonexistent.yaml", "--output-dir", f"{FX}/lint_out"),
             ("/nonexistent.yaml",)),
        Case("calibrate_problem_nomatch", ("calibrate", *cfg, "--json", "--problem", "nomatch*"), ("--problem",)),
        Case("calibrate_level_9", ("calibrate", *cfg, "--json", "--level", "9"), ("--level",)),
        Case("calibrate_with_problem_file", ("calibrate", *cfg, "--problem-file", f"{FX}/a_file.txt",
                                             "--solution-file", f"{FX}/a_file.txt"), ("--problem-file",)),
        Case("calibrate_trials_zero", ("calibrate", *cfg, "--trials", "0"), ("--trials",)),
        Case("calibrate_resume_missing", ("calibrate", *cfg, "--resume", "no-such-run"), ("no-such-run",)),
        Case("calibrate_unknown_flag", ("calibrate", *cfg, "--stirct"), ("--stirct",)),
        Case("kb_import_missing_path", (*kb, "/nonexistent"), ("/nonexistent",)),
        Case("kb_import_file_path", (*kb, f"{FX}/a_file.txt"), ("a_file.txt",)),
        Case("kb_import_empty_dir", (*kb, f"{FX}/empty"), ("empty",)),
        Case("kb_import_no_path", kb, ("path",)),
    ]


def all_cases(real_run: str) -> list[Case]:
    cases = [*flag_cases(), *config_cases(), *tree_cases(), *selection_cases(), *problem_file_cases(),
             *store_cases(real_run), *subcommand_cases()]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be distinct"
    return cases


# ----------------------------------------------------------------------------------------------------- running

def run_case(case: Case, fx: Path) -> Outcome:
    case_dir = fx / "cases" / case.name
    case_dir.mkdir(parents=True)
    write_files(case.files, case_dir, fx)
    argv = [substitute(arg, fx, case_dir) for arg in case.argv]
    try:
        result = cli(*argv)
    except subprocess.TimeoutExpired as exc:
        return Outcome(case, None, _text(exc.stdout), _text(exc.stderr))
    return Outcome(case, result.returncode, result.stdout, result.stderr)


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def table_line(outcome: Outcome, width: int) -> str:
    code = "T/O" if outcome.exit_code is None else str(outcome.exit_code)
    verdict = "PASS" if outcome.problem() is None else "FAIL"
    extra = f"+{outcome.extra_lines}" if outcome.extra_lines else ""
    first = outcome.stderr_lines[0] if outcome.stderr_lines else "(no stderr)"
    return f"{outcome.case.name:<{width}}  {code:>4}  {verdict}  {extra:>3}  {shorten(first)}"


def report(outcomes: list[Outcome], seconds: float) -> None:
    width = max(len(o.case.name) for o in outcomes)
    print(f"{'case':<{width}}  {'exit':>4}  {'':4}  {'+ln':>3}  first stderr line")
    for outcome in outcomes:
        print(table_line(outcome, width))
    failed = [o for o in outcomes if o.problem() is not None]
    print()
    print("+ln: non-empty stderr lines before the error line that are not `warning:` lines (e.g. a usage block)")
    print(f"{len(outcomes)} cases: {len(outcomes) - len(failed)} gave one clear line naming the culprit with exit 2; "
          f"{len(failed)} did not")
    if failed:
        print("did not: " + ", ".join(o.case.name for o in failed))
        print()
        for o in failed:
            code = "timeout" if o.exit_code is None else o.exit_code
            print(f"- {o.case.name}: exit {code}; {o.problem()}; expected {', '.join(map(repr, o.case.expect))}")
            print(f"    stderr: {o.stderr.strip()[:300]!r}")
    print(f"total runtime {seconds:.0f} s")


def main() -> int:
    started = time.monotonic()
    fx = Path(tempfile.mkdtemp(prefix="bad_inputs-"))
    try:
        build_fixtures(fx)
        real_run = make_runs(fx)
        outcomes = []
        for case in all_cases(real_run):
            outcomes.append(run_case(case, fx))
            print(f"  {case.name}: exit {outcomes[-1].exit_code}", file=sys.stderr, flush=True)
        report(outcomes, time.monotonic() - started)
    finally:
        shutil.rmtree(fx, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
