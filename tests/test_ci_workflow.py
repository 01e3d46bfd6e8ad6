"""The CI workflow against a pull request that tries to bend it: a temp git repository whose base commit holds this
harness, and pull-request commits that edit harness/ (the judge always says ok) or change a problem's reference,
beside a wrong candidate. The pull request job's own evaluation step (taken from kernels.yml) runs in a base
checkout on the pull request's trees; and kernels.yml itself is checked for what keeps a pull request out: read-only
permissions, concurrency, timeouts, no step that runs the pull request's harness, a baseline the pull request job
cannot write."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import FIXTURES, REPO, write_config

TREE = FIXTURES / "tree"
PROBLEM = "level1/001_linear_relu"
WORKFLOW = REPO / ".github" / "workflows" / "kernels.yml"
EVAL_STEP = "evaluate what the pull request changed"
ALWAYS_OK = "\n\ndef judge(records, baseline):    # the pull request's edit: every pair passes\n    return Verdict()\n"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))             # YAML 1.1 reads the key `on` as True
    return data


def step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name", "").startswith(name))


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    """origin: main (this harness, its run_eval.py, a config, two problems) and pull-request branches: `bend`
    edits harness/commands/ci.py so that every pair passes and adds a wrong candidate; `weaken` changes the problem's
    reference so that the same wrong candidate is right; `drop` deletes a problem."""
    root = tmp_path_factory.mktemp("wf")
    repo = root / "origin"
    repo.mkdir()
    shutil.copytree(REPO / "harness", repo / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "run_eval.py", repo / "run_eval.py")
    shutil.copy(REPO / "requirements.txt", repo / "requirements.txt")
    (repo / "problems" / "level1").mkdir(parents=True)
    (repo / "solutions" / PROBLEM).mkdir(parents=True)
    shutil.copy(TREE / "problems" / f"{PROBLEM}.py", repo / "problems" / f"{PROBLEM}.py")
    shutil.copy(TREE / "problems" / f"{PROBLEM}.py", repo / "problems" / "level1" / "003_another.py")
    (repo / "solutions" / PROBLEM / ".gitkeep").write_text("")
    config = write_config(root, repo)                       # the base's config.yaml: CPU, quick timing
    shutil.move(config, repo / "config.yaml")
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, "main")

    git(repo, "checkout", "-q", "-b", "bend")
    with open(repo / "harness" / "commands" / "ci.py", "a") as f:
        f.write(ALWAYS_OK)
    shutil.copy(TREE / "solutions" / PROBLEM / "incorrect.py", repo / "solutions" / PROBLEM / "cheat.py")
    bend = commit(repo, "a candidate, and a judge that says ok")

    git(repo, "checkout", "-q", "-b", "weaken", base)
    problem = repo / "problems" / f"{PROBLEM}.py"
    text = problem.read_text()                                   # the reference now computes what cheat does
    problem.write_text(text.replace("torch.relu(self.linear(x))", "nn.functional.leaky_relu(self.linear(x), 0.01)"))
    shutil.copy(TREE / "solutions" / PROBLEM / "incorrect.py", repo / "solutions" / PROBLEM / "cheat.py")
    weaken = commit(repo, "a candidate, and a reference it fits")

    git(repo, "checkout", "-q", "-b", "drop", base)
    (repo / "problems" / f"{PROBLEM}.py").unlink()
    drop = commit(repo, "no more problem")
    git(repo, "checkout", "-q", "main")
    return root, repo, {"base": base, "bend": bend, "weaken": weaken, "drop": drop}


def checkout(origin: Path, sha: str, dest: Path) -> Path:
    """What actions/checkout leaves: a clone of the repository at one commit, the history there (fetch-depth 0)."""
    if not dest.exists():
        subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True)
    git(dest, "checkout", "-q", "--detach", sha)
    return dest


def runner_temp(root: Path) -> Path:
    """$RUNNER_TEMP with the job's venv: venv/bin/python runs this interpreter."""
    temp = root / "runner-temp"
    python = temp / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    shutil.rmtree(temp / "results-pr", ignore_errors=True)
    return temp


def pr_job(root: Path, repo: Path, shas: dict[str, str], head: str, baseline: Path | None = None):
    """The pull request job's evaluation step, as kernels.yml writes it, in a workspace of base/ (the base commit)
    and pr/ (the pull request's head)."""
    workspace = root / f"workspace-{head}"
    checkout(repo, shas["base"], workspace / "base")
    checkout(repo, shas[head], workspace / "pr")
    temp = runner_temp(root)
    shutil.rmtree(temp / "baseline", ignore_errors=True)
    if baseline is not None:
        shutil.copytree(baseline, temp / "baseline")         # what download-artifact leaves
    summary = root / f"summary-{head}.md"
    summary.unlink(missing_ok=True)
    job = workflow()["jobs"]["pull-request"]
    the_step = step(job, EVAL_STEP)
    env = {**os.environ, "RUNNER_TEMP": str(temp), "GITHUB_WORKSPACE": str(workspace), "BASE_SHA": shas["base"],
           "GITHUB_STEP_SUMMARY": str(summary), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(["bash", "-e", "-c", the_step["run"]], cwd=workspace / the_step["working-directory"],
                          env=env, capture_output=True, text=True, timeout=900)
    return done, summary.read_text() if summary.exists() else "", workspace


def test_a_pull_request_that_edits_the_harness_is_judged_by_the_base(origin):
    root, repo, shas = origin
    done, summary, workspace = pr_job(root, repo, shas, "bend")
    assert done.returncode == 1, done.stdout + done.stderr
    assert summary.startswith("## Kernel evaluation: FAIL") and "| cheat | incorrect |" in summary
    assert "changes 1 problem" not in summary                              # bend changed no problem
    # the control: the pull request's own harness, which the old workflow ran, passes the same wrong candidate
    pr = workspace / "pr"
    own = subprocess.run([sys.executable, "run_eval.py", "ci", "--base", shas["base"], "--problems-dir",
                          str(pr / "problems"), "--solutions-dir", str(pr / "solutions"), "--output-dir",
                          str(root / "own-results"), "--summary", str(root / "own.md")], cwd=pr,
                         capture_output=True, text=True, timeout=900)
    assert own.returncode == 0, own.stdout + own.stderr
    assert (root / "own.md").read_text().startswith("## Kernel evaluation: PASS")


def test_a_changed_problem_is_named_above_the_table(origin):
    """A pull request that weakens a problem makes its wrong candidate pass under any harness: the summary puts the
    changed problem in front of the reviewer."""
    root, repo, shas = origin
    done, summary, _ = pr_job(root, repo, shas, "weaken")
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary.startswith("## Kernel evaluation: PASS")
    note = f"> **This branch changes 1 problem file**: `{PROBLEM}.py`."
    assert note in summary and summary.index(note) < summary.index("| problem |")
    assert "| cheat | ok |" in summary


def test_a_deleted_problem_is_named_even_when_nothing_runs(origin):
    root, repo, shas = origin
    done, summary, _ = pr_job(root, repo, shas, "drop")
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary.startswith("## Kernel evaluation: nothing to evaluate")
    assert f"> **This branch changes 1 problem file**: `{PROBLEM}.py`." in summary


def tree_digest(folder: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_baseline_is_read_never_written(origin):
    """main's last run, read-only in the job: read, compared with, left byte for byte as it was; an output folder
    inside it is refused before anything runs."""
    from harness.results.records import Status, finish, new_record
    from harness.results.store import RunStore
    root, repo, shas = origin
    main_runs = root / "main-runs"
    store = RunStore.create(main_runs, {"config": {"cache_dir": str(root / "cache")}})
    record = finish(new_record(PROBLEM, f"{PROBLEM}/cheat", "cpu", store.run_id), Status.OK)
    record.correct, record.speedup, record.speedup_ci = True, 1.0, [0.9, 1.1]
    store.append(record)
    store.finish()
    done, summary, workspace = pr_job(root, repo, shas, "bend", baseline=main_runs)
    copy = root / "runner-temp" / "baseline"
    try:
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"compared with `{store.run_id}`" in summary and "| cheat | incorrect |" in summary
        assert tree_digest(copy) == tree_digest(main_runs)
        assert not any(p.stat().st_mode & 0o222 for p in copy.rglob("*"))      # the step made it read-only

        inside = subprocess.run([sys.executable, "run_eval.py", "ci", "--base", shas["base"], "--baseline", str(copy),
                                 "--output-dir", str(copy / "results"),
                                 "--problems-dir", str(workspace / "pr/problems"),
                                 "--solutions-dir", str(workspace / "pr/solutions")], cwd=workspace / "base",
                                capture_output=True, text=True, timeout=300)
        assert inside.returncode == 2 and inside.stderr.count("\n") == 1, inside.stderr
        assert "is inside --baseline" in inside.stderr and "ci never writes there" in inside.stderr
        assert tree_digest(copy) == tree_digest(main_runs)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(copy)], check=False)


# kernels.yml itself ---------------------------------------------------------------------------------------------

def jobs() -> dict[str, dict]:
    return workflow()["jobs"]


def runs(job: dict) -> list[str]:
    return [s["run"] for s in job["steps"] if "run" in s]


def test_the_workflow_is_the_base_branchs_and_reads_only():
    data = workflow()
    assert "pull_request_target" in data["on"] and "pull_request" not in data["on"]   # the base's copy of this file
    assert data["permissions"] == {"contents": "read"}
    for name, job in jobs().items():
        assert job["permissions"].get("contents") == "read", name
        assert set(job["permissions"].values()) == {"read"}, name                  # nothing writes with the token
        for s in job["steps"]:
            if s.get("uses", "").startswith("actions/checkout"):
                assert s["with"]["persist-credentials"] is False, name             # no token left in .git/config


def test_each_job_has_a_timeout_and_a_runner_queue():
    for name, job in jobs().items():
        assert isinstance(job["timeout-minutes"], int) and 0 < job["timeout-minutes"] < 360, name
        group = job["concurrency"]
        assert group["group"].startswith("kb-gpu-") and group["cancel-in-progress"] is False, name
        assert group.get("queue") == "max", name                      # waiting jobs queue, none is dropped
    assert len({job["concurrency"]["group"] for job in jobs().values()}) == 1     # PR and main share the GPU's queue


def test_no_pull_request_step_runs_the_pull_requests_harness():
    job = jobs()["pull-request"]
    checkouts = {s["with"]["path"]: s["with"] for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")}
    assert checkouts["base"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    assert checkouts["pr"]["ref"] == "${{ github.event.pull_request.head.sha }}"
    for s in job["steps"]:
        assert s.get("working-directory", "base") == "base", s.get("name")
        text = s.get("run", "")
        assert "pr/" not in text.replace("pr/problems", "").replace("pr/solutions", ""), s.get("name")
        assert "run_eval.py" not in text or s.get("working-directory") == "base", s.get("name")
        assert "-r" not in text.split() or "-r base/requirements.txt" in text, s.get("name")
    the_step = step(job, EVAL_STEP)
    assert '--problems-dir "$GITHUB_WORKSPACE/pr/problems"' in the_step["run"]
    assert '--solutions-dir "$GITHUB_WORKSPACE/pr/solutions"' in the_step["run"]
    assert "run_eval.py ci --base" in the_step["run"]


def test_each_job_builds_a_fresh_venv():
    for name, job in jobs().items():
        text = "\n".join(runs(job))
        assert 'rm -rf "$RUNNER_TEMP/venv"' in text and '-m venv --system-site-packages "$RUNNER_TEMP/venv"' in text
        evaluation = [r for r in runs(job) if "run_eval.py" in r]
        assert evaluation and all('"$RUNNER_TEMP/venv/bin/python" run_eval.py' in r for r in evaluation), name
    assert workflow()["env"]["PYTHONNOUSERSITE"] == "1"


def test_the_pull_request_job_cannot_write_the_baseline():
    """The baseline is an artifact of main's push run: only the main job uploads it; the pull request job downloads
    a copy into its own temp folder, makes it read-only, and names no folder the baseline persists in."""
    pr, main = jobs()["pull-request"], jobs()["main"]
    uploads = {name: [s["with"]["name"] for s in job["steps"]
                      if s.get("uses", "").startswith("actions/upload-artifact")]
               for name, job in (("pull-request", pr), ("main", main))}
    assert "kernels-baseline" in uploads["main"] and "kernels-baseline" not in uploads["pull-request"]
    download = next(s for s in pr["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
    assert download["with"]["name"] == "kernels-baseline" and download["with"]["path"] == "${{ runner.temp }}/baseline"
    finder = step(pr, "find main's last run")["with"]["script"]
    assert "event: 'push'" in finder and "status: 'success'" in finder        # a pull request's run never counts
    text = WORKFLOW.read_text()
    assert "BASELINE_DIR" not in text and "/var/lib" not in text
    the_step = step(pr, EVAL_STEP)["run"]
    assert 'chmod -R a-w "$RUNNER_TEMP/baseline"' in the_step and '--baseline "$RUNNER_TEMP/baseline"' in the_step
    assert pr["permissions"].get("actions") == "read"
