"""`run_eval.py ci`, the command the GitHub workflow calls: on a real git repository holding a problems and a
solutions tree, a branch's changes are evaluated (only those), summarised in Markdown, and judged by exit code."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, run_cli, skip_timing_if_loaded, write_config

TREE = FIXTURES / "tree"
PROBLEM = "level1/001_linear_relu"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """main: one problem with one honest candidate; BASE is that commit."""
    root = tmp_path_factory.mktemp("ci")
    repo = root / "repo"
    (repo / "problems" / "level1").mkdir(parents=True)
    (repo / "solutions" / PROBLEM).mkdir(parents=True)
    shutil.copy(TREE / "problems" / f"{PROBLEM}.py", repo / "problems" / f"{PROBLEM}.py")
    shutil.copy(TREE / "solutions" / PROBLEM / "correct_cpp.py", repo / "solutions" / PROBLEM / "correct_cpp.py")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "main")
    config = write_config(root, repo)
    return root, repo, config, git(repo, "rev-parse", "HEAD")


def ci(root: Path, config: Path, base: str, *extra: str):
    summary = root / "summary.md"
    summary.unlink(missing_ok=True)
    done = run_cli("ci", "--config", str(config), "--base", base, "--summary", str(summary), *extra)
    return done, summary.read_text() if summary.exists() else ""


def test_nothing_changed_is_a_pass_that_evaluates_nothing(repo):
    root, _, config, base = repo
    done, summary = ci(root, config, base)
    assert done.returncode == 0, done.stderr
    assert "nothing to evaluate" in summary and not (root / "results").exists()


def test_a_branch_is_judged_on_what_it_changed(repo):
    root, repo_dir, config, base = repo
    git(repo_dir, "checkout", "-q", "-b", "feature")
    # an honest plain-PyTorch candidate (exploits' control for the same problem): what is judged is the branch's
    # change, and it needs no C++ build (a copy of correct_cpp was a 20 s compile in this test)
    shutil.copy(FIXTURES / "exploits" / "solutions" / PROBLEM / "control_plain.py",
                repo_dir / "solutions" / PROBLEM / "new_ok.py")
    git(repo_dir, "add", "-A")
    git(repo_dir, "commit", "-q", "-m", "a new candidate")
    done, summary = ci(root, config, base)
    assert done.returncode == 0, done.stderr
    assert summary.startswith("## Kernel evaluation: PASS")
    assert "| new_ok | ok |" in summary and "correct_cpp" not in summary        # only what the branch changed

    # an uncommitted wrong candidate joins the evaluation and fails it
    shutil.copy(TREE / "solutions" / PROBLEM / "incorrect.py", repo_dir / "solutions" / PROBLEM / "wrong.py")
    done, summary = ci(root, config, base)
    assert done.returncode == 1, done.stderr
    assert summary.startswith("## Kernel evaluation: FAIL") and "| wrong | incorrect |" in summary
    assert f"Not ok: {PROBLEM}/wrong" in summary
    (repo_dir / "solutions" / PROBLEM / "wrong.py").unlink()


@pytest.mark.timing
def test_a_regression_against_mains_last_run_fails(repo, tmp_path):
    """main's last run read new_ok at 100x with a tight CI: today's reading is SLOWER, so the check fails. Where
    today's pair was timed on a loaded box its rounds disagree, and compare rightly calls no change on the CPU
    (the gap between its two estimates goes into the least change it needs: compare.floor_for), so it skips."""
    from harness.results.records import Status, finish, new_record
    from harness.results.store import RunStore
    root, repo_dir, config, base = repo
    if git(repo_dir, "branch", "--show-current") != "feature":
        pytest.skip("needs the branch made by the test before")
    main_runs = tmp_path / "main-runs"
    store = RunStore.create(main_runs, {"config": {"cache_dir": str(tmp_path / "cache")}})
    record = finish(new_record(PROBLEM, f"{PROBLEM}/new_ok", "cpu", store.run_id), Status.OK)
    record.correct, record.speedup, record.speedup_ci = True, 100.0, [99.0, 101.0]
    store.append(record)
    store.finish()
    done, summary = ci(root, config, base, "--baseline", str(main_runs))
    assert f"compared with `{store.run_id}`" in summary, summary
    today = sorted(p for p in (root / "results").iterdir() if p.is_dir())[-1] / "results.jsonl"
    skip_timing_if_loaded(*[json.loads(line) for line in today.read_text().splitlines() if line.strip()])
    assert done.returncode == 1, done.stderr
    assert "| SLOWER" in summary
    assert f"Regressed against main: {PROBLEM}/new_ok (SLOWER)" in summary


def test_the_summary_says_when_mains_run_was_on_another_machine():
    from harness.commands import ci
    from harness.results.records import Record
    def run(uuid, floor):
        rec = {"schema_version": 2, "problem": PROBLEM, "solution": f"{PROBLEM}/k", "status": "ok", "correct": True,
               "flags": [], "error": None, "speedup": 1.3, "speedup_ci": [1.29, 1.31], "device": "cuda",
               "gpu": {"index": 0}, "timing": {"timer_floor_ms": floor}}
        return [Record.of(rec, "test")], {"gpus": [{"index": 0, "uuid": uuid}]}
    (main_records, main_meta), (ours, meta) = run("GPU-1", 0.005), run("GPU-2", 0.005)
    lines = ci.machine_lines(main_records, main_meta, ours, meta)
    assert lines[0] == "main's run and this run ran on different GPUs (GPU-1 and GPU-2)"
    assert "machines' doing" in lines[-1]
    assert ci.machine_lines(main_records, main_meta, *run("GPU-1", 0.0051)) == []
    assert ci.machine_lines(None, None, ours, meta) == []                      # no baseline, nothing to say
    text = ci.markdown(ours, ci.judge(ours, main_records), "r", "main-run", lines)
    assert f"> {lines[0]}\n" in text and text.index("> main's run") < text.index("| problem")


def test_a_bad_base_is_one_line(repo):
    root, _, config, _ = repo
    done, _ = ci(root, config, "no-such-ref")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--base no-such-ref: no such branch, tag or commit" in done.stderr


def test_the_workflow_calls_the_command():
    workflow = (REPO / ".github" / "workflows" / "kernels.yml").read_text()
    assert "run_eval.py ci --base" in workflow and "solutions/**" in workflow and "problems/**" in workflow
