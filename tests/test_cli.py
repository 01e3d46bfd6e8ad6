"""harness.cli through run_eval.py: usage errors are one line and exit 2; --help exits 0."""
from __future__ import annotations

import pytest

from conftest import REPO, run_cli


@pytest.mark.parametrize("args, words", [
    (["--trials", "x"], "invalid int value"),
    (["--device", "tpu"], "invalid choice"),
    (["--problem-file", "nope.py", "--solution-file", "nope2.py"], "nope.py: no such file"),
    (["--problem-file", "x.py"], "go together"),
    (["--config", "missing.yaml"], "missing.yaml: no such config file"),
    (["--problems-dir", "/nonexistent/problems", "--device", "cpu"], "problems directory does not exist"),
    (["--gpus", "a,b", "--device", "cpu"], "gpus"),
])
def test_cli_usage_errors_exit_2_with_one_line(args, words):
    done = run_cli(*args)
    assert done.returncode == 2
    assert words in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_config_typo_names_file_and_key(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("device: cpu\nsamplez: 3\n")
    done = run_cli("--config", str(cfg))
    assert done.returncode == 2 and f"{cfg}: unknown config key 'samplez'" in done.stderr


def test_cli_single_pair_with_broken_problem_is_exit_2(tmp_path):
    problem = REPO / "tests/fixtures/tree/problems/level1/002_broken_problem.py"
    solution = REPO / "tests/fixtures/tree/solutions/level1/002_broken_problem/identity.py"
    done = run_cli("--problem-file", str(problem), "--solution-file", str(solution), "--device", "cpu",
                   "--output-dir", str(tmp_path))
    assert done.returncode == 2 and "no get_inputs" in done.stderr and "Traceback" not in done.stderr


def test_help_exits_0():
    done = run_cli("--help")
    assert done.returncode == 0 and "--resume" in done.stdout
