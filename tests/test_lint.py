"""Problem lint: degenerate problems are caught by `lint`, and flagged in every record when evaluated."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import FIXTURES, json_records, run_cli, write_config


@pytest.fixture(scope="module")
def lint_all(tmp_path_factory):
    """One lint over the fixture's four problems, --strict: (output folder, the CompletedProcess)."""
    tmp = tmp_path_factory.mktemp("lint")
    done = run_cli("lint", "--problems-dir", str(FIXTURES / "lint" / "problems"), "--device", "cpu",
                   "--output-dir", str(tmp), "--json", "--per-gpu", "2", "--strict")     # two workers taking turns
    return tmp, done


def test_lint_verdicts(lint_all):
    tmp_path, done = lint_all
    assert done.returncode == 1, done.stderr                      # --strict, and two problems are degenerate
    results = {json.loads(l)["problem"].split("/")[1]: json.loads(l) for l in done.stdout.splitlines()}
    wide = results["001_wide_softmax"]
    assert wide["verdict"] == "degenerate" and wide["zeros_pass"] and wide["constant_pass"]
    ignores = results["002_ignores_input"]
    assert ignores["verdict"] == "degenerate" and ignores["input_dependent"] is False
    assert "does not change with the inputs" in " ".join(ignores["reasons"])
    healthy = results["003_healthy_gelu"]
    assert healthy["verdict"] == "ok" and healthy["reasons"] == []
    assert healthy["param_dependent"] and healthy["deterministic"] and not healthy["nan_or_inf"]
    assert healthy["eager_ms"] > 0 and healthy["mean_abs"] > 0
    assert list(tmp_path.glob("lint-*.json"))
    noisy = results["004_rounding_noise"]                  # determinism is bit for bit, and not a degeneracy
    assert noisy["verdict"] == "ok" and noisy["deterministic"] is False and noisy["reasons"] == []
    assert 0 < noisy["run_to_run_max_abs"] < 1e-5


def test_lint_strict_exits_1_on_a_degenerate_problem(lint_all, tmp_path):
    """lint_all holds degenerate problems: exit 1. The one that is only nondeterministic passes lint: exit 0, and
    the summary counts it."""
    assert lint_all[1].returncode == 1, lint_all[1].stderr
    done = run_cli("lint", "--problems-dir", str(FIXTURES / "lint" / "problems"), "--device", "cpu",
                   "--problem", "*004*", "--output-dir", str(tmp_path), "--strict")
    assert done.returncode == 0, done.stderr
    assert "1 not bit-for-bit deterministic" in done.stdout


def test_degenerate_problem_is_flagged_when_evaluated(tmp_path):
    config = write_config(tmp_path, FIXTURES / "lint")
    done = run_cli("--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    record = json_records(done.stdout)["zeros"]
    # zeros pass this problem's tolerance, but not fp32 arithmetic: far off the float64 reference ...
    assert record["status"] == "invalid" and "reduced_precision" in record["flags"], record["error"]
    assert "degenerate_problem" in record["flags"]        # ... and the record says why the tolerance meant nothing
    assert "all-zeros" in record["flag_details"]["degenerate_problem"]


def test_lint_constant_check_on_scalar_outputs_uses_another_input_draw():
    from harness.worker.lint import degenerate_checks
    x = [torch.randn(4, 4)]
    loss, loss_other = [torch.tensor(4.32)], [torch.tensor(5.10)]
    checks = degenerate_checks(loss, loss_other, x, 1e-4, 1e-3)
    assert not checks["constant_pass"] and not checks["degenerate"]
    stable = degenerate_checks(loss, [torch.tensor(4.3201)], x, 1e-4, 1e-3)
    assert stable["constant_pass"] and stable["degenerate"]     # a loss that barely moves with its inputs


def test_degenerate_checks_sample_first_but_decide_on_every_position():
    """The checks look at a sample of positions first (harness.worker.lint.SAMPLE) and compare the whole only where
    the sample passed: an output that is constant but for one position off the sample is not `constant_pass`, and
    a truly constant one still is."""
    import torch
    from harness.worker import lint
    n = 4 * lint.SAMPLE
    almost = torch.full((n,), 3.0)
    at = lint._positions((n,), "cpu")[0]
    off = next(i for i in range(n) if not bool((at == i).any()))          # a position the sample never looks at
    almost[off] = 100.0
    inputs = [torch.randn(n)]
    checks = lint.degenerate_checks([almost], [almost.clone()], inputs, 1e-5, 1e-5)
    assert not checks["constant_pass"] and not checks["zeros_pass"], checks
    constant = torch.full((n,), 3.0)
    checks = lint.degenerate_checks([constant], [constant.clone()], inputs, 1e-5, 1e-5)
    assert checks["constant_pass"] and checks["degenerate"] and checks["input_dependent"] is False, checks
    varied = torch.randn(n)
    checks = lint.degenerate_checks([varied], [torch.randn(n)], inputs, 1e-5, 1e-5)
    assert not checks["degenerate"] and checks["input_dependent"], checks


def test_sampled_positions_match_unravel_index_without_importing_sympy():
    """The lint sample's positions: torch.unravel_index's, without its first call's imports (sympy, 1.8 s of each
    reference's setup on the H200 box)."""
    import subprocess
    import sys
    import torch
    from harness.worker import lint
    flat = torch.randint(0, 6 * 7 * 9, (1000,))
    assert all(torch.equal(a, b) for a, b in zip(lint._unravel(flat, (6, 7, 9)), torch.unravel_index(flat, (6, 7, 9))))
    code = ("import sys, torch\nfrom harness.worker.lint import degenerate_checks\n"
            "x = torch.randn(1024, 1024)\ndegenerate_checks([x.relu()], [x.abs()], [x], 1e-4, 1e-4)\n"
            "print('sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
