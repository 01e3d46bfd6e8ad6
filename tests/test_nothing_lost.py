"""Issue 12, "Nothing lost, nothing left behind": CI in a fresh environment, --resume with the run's own settings,
torn and tampered result files, one clear line for every bad input, and a tree that runs on a machine without a
GPU (examples/cpu)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import _keep, cuda_available, PAIR_TIMEOUT_ARG, REPO, run_cli, TARGET_REL_CI, TEST_TIMING, verdict

EXAMPLES = REPO / "examples" / "cpu"


def example_config(tmp: Path, cache: Path, **extra) -> Path:
    """The examples tree with the test timing; device auto where there is no GPU (the default gpus [0] must still
    run on the CPU there)."""
    lines = [f"problems_dir: {EXAMPLES / 'problems'}", f"solutions_dir: {EXAMPLES / 'solutions'}",
             f"output_dir: {tmp / 'results'}", f"cache_dir: {cache}",
             f"device: {'cpu' if cuda_available() else 'auto'}", "trials: 3", "timeout: 60",
             *[f"{k}: {v}" for k, v in extra.items()], "timing:", "  warmup: 2", *TEST_TIMING]
    path = tmp / "config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def json_records(stdout: str) -> dict[str, dict]:
    """Records printed by --json, by solution id (the examples' candidate names repeat across problems)."""
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {r["solution"]: r for r in records}


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def keys_of(records: list[dict]) -> list[tuple[str, str]]:
    return [(r["problem"], r["solution"]) for r in records]


@pytest.fixture(scope="module")
def cache(shared_cache) -> Path:
    """The session's build cache (conftest): the examples' C++ candidates are built once per test run."""
    return shared_cache


@pytest.fixture(scope="module")
def example_run(tmp_path_factory, cache):
    """One run of examples/cpu; tests that resume or damage it work on copies of its folder. As soon as its first
    record is in, its results.jsonl and run.json are deleted: the store writes both again from its own copy
    (test_results_deleted_during_a_real_run_are_written_again reads that; it was a run of its own over the first
    problem). Returns (run folder, records printed, the CompletedProcess, whether the files were deleted)."""
    tmp = tmp_path_factory.mktemp("examples")
    # jobs 6: all six builds at once; the three C++ extensions share the two cores instead of the third waiting for
    # one (the build stage 36 s instead of 48 s on a 2-core machine); the timed pairs come after the builds either way
    args = ("--config", str(example_config(tmp, cache, jobs=6)), "--json")
    out, err = tmp / "stdout.txt", tmp / "stderr.txt"             # files, not pipes: nothing waits on a full pipe
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, str(REPO / "run_eval.py"), *args], cwd=REPO, stdout=stdout,
                                stderr=stderr, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + 900
        deleted = False
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((tmp / "results").glob("*/results.jsonl"))
            if found and found[0].read_text().strip():
                found[0].unlink()
                (found[0].parent / "run.json").unlink()
                deleted = True
                break
            time.sleep(0.1)
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())
    _keep(args, done)
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in (tmp / "results").iterdir() if p.is_dir()]
    return run_dir, json_records(done.stdout), done, deleted


def copy_run(run_dir: Path, tmp: Path) -> Path:
    dest = tmp / "out" / run_dir.name
    shutil.copytree(run_dir, dest)
    return dest


# --- 1. CI: a fresh environment, the README's commands --------------------------------------------------------

def readme_commands() -> tuple[str, str]:
    text = (REPO / "README.md").read_text()
    install = re.search(r"^(pip install .*?)\s+#", text, re.M).group(1).strip()
    test = re.search(r"^(python -m pytest[^\n]*)$", text, re.M).group(1).strip()
    return install, test


def test_ci_installs_only_the_readme_command_in_a_fresh_venv():
    script = (REPO / ".ci" / "run").read_text()
    install, test = readme_commands()
    body = [line.split("#")[0].strip() for line in script.splitlines() if line.split("#")[0].strip()]
    venv = next(i for i, line in enumerate(body) if "-m venv" in line)
    path = next(i for i, line in enumerate(body) if line.startswith("export PATH=") and "$VENV/bin" in line)
    plain = [line.replace(" --quiet", "") for line in body]
    assert venv < path < plain.index(install) < plain.index(test + ' "$@"')
    assert [line for line in plain if "pip install" in line] == [install]     # nothing else is installed


def test_requirements_bring_numpy_and_keep_torch_floor():
    reqs = (REPO / "requirements.txt").read_text().split()
    assert "numpy" in reqs and "torch>=2.11" in reqs
    deps = re.search(r"^dependencies = \[(.*?)\]", (REPO / "pyproject.toml").read_text(), re.M | re.S).group(1)
    assert '"numpy"' in deps and '"torch>=2.11"' in deps


# --- 6. a tree that runs on the CPU ---------------------------------------------------------------------------

def test_examples_tree_runs_on_the_cpu_and_every_pair_is_ok(example_run):
    run_dir, records, done, _ = example_run
    assert len(records) == 6 and {verdict(r) for r in records.values()} == {"ok"}, \
        {k: r["error"] for k, r in records.items()}
    assert sorted(records)[0] == "level1/001_relu_scale/aa_same_ops"
    assert {r["device"] for r in records.values()} == {"cpu"}
    assert all(r["build"]["extensions"] for k, r in records.items() if k.endswith("/cpp_loop"))
    assert "CUDA code" not in done.stderr
    for log in (run_dir / "logs").iterdir():
        assert "Failed to initialize NumPy" not in log.read_text(errors="replace"), log


def test_no_example_candidate_needs_cuda():
    from harness.core.discover import discover, needs_cuda
    problems, pairs = discover(EXAMPLES / "problems", EXAMPLES / "solutions")
    assert len(problems) == 3 and len(pairs) == 6
    assert not [p.candidate.id for p in pairs if needs_cuda(p.candidate) or p.candidate.error]
    cpp = [p for p in pairs if "load_inline(" in (p.candidate.source or "")]
    assert len(cpp) == 3 and all("cpp_sources=" in p.candidate.source for p in cpp)


def test_cpu_notice_counts_cuda_candidates_of_the_default_trees():
    from harness.core.discover import discover
    from harness.run.pipeline import cpu_notice
    _, pairs = discover(REPO / "problems", REPO / "solutions")
    notice = cpu_notice(pairs, [])
    assert notice is not None and "\n" not in notice
    assert notice.startswith("no GPU here: ") and f"of {len(pairs)} candidates" in notice
    assert "--problems-dir examples/cpu/problems --solutions-dir examples/cpu/solutions" in notice
    _, cpu_pairs = discover(EXAMPLES / "problems", EXAMPLES / "solutions")
    assert cpu_notice(cpu_pairs, []) is None


@pytest.mark.skipif(cuda_available(), reason="the notice is for a machine without a GPU")
def test_default_run_on_a_cpu_machine_says_so_first(tmp_path):
    """The notice comes before any other line, even the sweep of a killed run's scratch folder (a run of another
    test killed beside this one once put its line first). The planted folder is every run's to sweep: where a run
    of a test beside this one sweeps it first, this run has no line to order, and it tries again with another."""
    from harness.run.executors import scratch_root
    config = tmp_path / "config.yaml"                      # the default trees; only the output goes elsewhere
    config.write_text(f"output_dir: {tmp_path / 'results'}\ncache_dir: {tmp_path / 'cache'}\n")
    for attempt in range(5):
        stale = scratch_root(f"{tmp_path.name}-killed-{attempt}")
        stale.mkdir()
        (stale / "owner").write_text("2147483000 1\n")     # a pid no process has: its run was killed
        done = run_cli("--config", str(config), "--level", "level1", timeout=900)
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        assert lines[0].startswith("no GPU here: ") and "will be skipped" in lines[0] and "examples/cpu" in lines[0]
        assert not stale.exists(), done.stderr
        if any(line.startswith("warning: removed ") and stale.name in line for line in lines[1:]):
            return
    pytest.fail("every planted folder was swept by another run before this one's sweep")


# --- 2. --resume with the run's own settings ------------------------------------------------------------------

def test_run_json_records_the_selection(example_run):
    meta = json.loads((example_run[0] / "run.json").read_text())
    assert meta["selection"] == {"problems_dir": str(EXAMPLES / "problems"),
                                 "solutions_dir": str(EXAMPLES / "solutions"), "level": None, "problem": "*",
                                 "candidate": "*", "problem_file": None, "solution_file": None}


def test_resume_uses_the_recorded_config_and_selection_and_cuts_a_torn_last_line(example_run, tmp_path, cache):
    """A copy of the run killed while writing its fifth line: four whole lines and half of the fifth. --resume with
    another config (other trees, trials 4, another candidate glob) evaluates what the run recorded: the torn line is
    cut and its pair runs again, with the sixth, with the recorded trials. (Two tests, one resume: the torn line's
    was a resume of its own.)"""
    run_dir = copy_run(example_run[0], tmp_path)
    results = run_dir / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    torn, sixth = json.loads(lines[4]), json.loads(lines[5])
    results.write_text("".join(lines[:4]) + lines[4][: len(lines[4]) // 2])           # killed mid-write
    today = tmp_path / "today"
    today.mkdir()
    other = example_config(today, cache, candidate="nothing*")
    other.write_text(other.read_text().replace("trials: 3", "trials: 4")
                     .replace(str(EXAMPLES), str(REPO / "tests" / "fixtures" / "tree")))
    done = run_cli("--config", str(other), "--output-dir", str(run_dir.parent), "--resume", run_dir.name, "--json",
                   "--jobs", "1", "--timeout", PAIR_TIMEOUT_ARG)
    assert done.returncode == 0, done.stderr
    assert "results.jsonl:5: torn last line" in done.stderr
    new = json_records(done.stdout)
    assert list(new) == [torn["solution"], sixth["solution"]]                          # the torn pair runs again
    assert all(r["correctness"]["trials"] == 3 for r in new.values())
    assert all(r["problem"].startswith("level1/00") and verdict(r) == "ok" for r in new.values())     # load: noise
    after = lines_of(results)                                                          # every line parses
    assert len(after) == 6 and len(set(keys_of(after))) == 6
    assert keys_of(after)[4:] == [(torn["problem"], torn["solution"]), (sixth["problem"], sixth["solution"])]


@pytest.mark.parametrize("flags, words", [
    (["--trials", "7"], "--trials 7 differs from the run's recorded trials 3; --resume continues a run with its "
                        "own settings"),
    (["--samples", "9"], "--samples 9 differs from the run's recorded timing.samples null"),
    (["--target-rel-ci", "0.01"], "--target-rel-ci 0.01 differs from the run's recorded timing.target_rel_ci "
                                  f"{TARGET_REL_CI}"),
    (["--seed", "3"], "--seed 3 differs from the run's recorded seed null"),
    (["--problem", "*relu*"], "--problem *relu* differs from the run's recorded problem *"),
    (["--problems-dir", str(REPO / "problems")], "--problems-dir"),
    (["--level", "2"], "--level 2 differs from the run's recorded level null"),
])
def test_resume_refuses_a_flag_that_changes_what_is_measured(example_run, flags, words):
    run_dir = example_run[0]
    done = run_cli("--output-dir", str(run_dir.parent), "--resume", run_dir.name, *flags)
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_resume_accepts_the_recorded_values_and_runtime_flags(example_run, tmp_path):
    run_dir = copy_run(example_run[0], tmp_path)
    before = (run_dir / "results.jsonl").read_bytes()
    done = run_cli("--output-dir", str(run_dir.parent), "--resume", run_dir.name, "--trials", "3", "--jobs", "1",
                   "--timeout", "99", "--target-rel-ci", str(TARGET_REL_CI), "--json")
    assert done.returncode == 0, done.stderr
    assert (run_dir / "results.jsonl").read_bytes() == before               # nothing left to run, nothing touched
    assert len(json.loads((run_dir / "run.json").read_text())["resumed_at"]) == 1


# --- 4. the parent's own copy ---------------------------------------------------------------------------------

def _record(i: int):
    from harness.results.records import Status, finish, new_record
    return finish(new_record("level1/001_x", f"level1/001_x/c{i}", "cpu", "r"), Status.OK)


def _tamper(path: Path, how: str) -> None:
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        with open(path, "r+b") as f:
            f.truncate(max(0, path.stat().st_size - 7))
    elif how == "append":
        with open(path, "ab") as f:
            f.write(b'{"someone": "else"}\n')
    elif how == "replace":
        tmp = path.with_name("other")
        tmp.write_bytes(path.read_bytes())
        os.replace(tmp, path)
        with open(path, "ab") as f:
            f.write(b" ")
    elif how == "overwrite":
        data = bytearray(path.read_bytes())
        data[-3] = ord("X")
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("target", ["results.jsonl", "run.json"])
@pytest.mark.parametrize("how", ["delete", "truncate", "append", "replace", "overwrite"])
def test_store_notices_tampering_and_rewrites_from_its_own_copy(tmp_path, target, how):
    from harness.results.store import RunStore
    other = tmp_path / "other-run"
    other.mkdir()
    (other / "results.jsonl").write_text("not ours\n")
    warnings: list[str] = []
    store = RunStore.create(tmp_path, {"config": {"trials": 1}}, warnings.append)
    store.append(_record(0))
    store.append(_record(1))
    _tamper(store.dir / target, how)
    store.append(_record(2))
    store.update_metadata(finished_at="now")
    store.finish()
    assert len(warnings) >= 1 and all("\n" not in w for w in warnings)
    assert f"{store.dir / target}: " in warnings[0] and "during the run" in warnings[0]
    assert [r["solution"] for r in lines_of(store.results_path)] == [f"level1/001_x/c{i}" for i in range(3)]
    meta = json.loads(store.run_json.read_text())
    assert meta["config"] == {"trials": 1} and meta["finished_at"] == "now"
    assert (other / "results.jsonl").read_text() == "not ours\n"                   # other runs: never touched
    assert [r.to_json() for r in store.records()] == lines_of(store.results_path)


def test_store_without_tampering_says_nothing(tmp_path):
    from harness.results.store import RunStore
    warnings: list[str] = []
    store = RunStore.create(tmp_path, {"config": {}}, warnings.append)
    for i in range(3):
        store.append(_record(i))
        store.update_metadata(step=i)
    store.finish()
    assert warnings == [] and len(lines_of(store.results_path)) == 3


def test_a_file_deleted_the_moment_after_a_write_is_still_noticed(tmp_path, monkeypatch):
    """The store's mark of what it wrote comes from the file it wrote, not from the path a moment later: a
    results.jsonl deleted between the write and that look was rewritten without a word (a real run in CI lost
    its "was deleted" line that way)."""
    from harness.results.store import RunStore
    warnings: list[str] = []
    store = RunStore.create(tmp_path, {"config": {}}, warnings.append)
    store.append(_record(0))
    real_fsync = os.fsync

    def fsync_then_delete(fd):
        real_fsync(fd)
        store.results_path.unlink(missing_ok=True)

    monkeypatch.setattr(os, "fsync", fsync_then_delete)
    store.append(_record(1))
    monkeypatch.setattr(os, "fsync", real_fsync)
    store.append(_record(2))
    store.finish()
    assert any("results.jsonl: was deleted during the run" in w for w in warnings), warnings
    assert len(lines_of(store.results_path)) == 3


def test_results_deleted_during_a_real_run_are_written_again(example_run):
    run_dir, _, done, deleted = example_run             # both files deleted once the run's first record was in
    assert deleted, done.stderr
    assert len(set(keys_of(lines_of(run_dir / "results.jsonl")))) == 6
    assert json.loads((run_dir / "run.json").read_text())["finished_at"]
    assert "results.jsonl: was deleted during the run" in done.stderr
    assert "run.json: was deleted during the run" in done.stderr


def test_report_skips_a_garbage_line_with_a_warning(example_run, tmp_path):
    run_dir = copy_run(example_run[0], tmp_path)
    results = run_dir / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[:2]) + "}{ garbage\n" + "".join(lines[2:]))
    done = run_cli("report", run_dir.name, "--output-dir", str(run_dir.parent))
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.strip()]
    assert warnings == [f"warning: {results}:3: not a JSON line; skipped"]
    assert "pairs 6, correct 6" in done.stdout


# --- 5. bad inputs: one line, exit 2, the right culprit -------------------------------------------------------

BAD_FILES = {
    "nonutf8.yaml": b"trials: 3\n\xff\xfe\n",
    "unknown.yaml": b"device: cpu\ntrails: 5\n",
    "timing5.yaml": b"timing: 5\n",
    "list.yaml": b"- a\n- b\n",
    "samples0.yaml": b"timing:\n  samples: 0\n",
    "seedtrue.yaml": b"seed: true\n",
}


BAD_INPUTS = [
    (["--samples", "-1"], "error: --samples: must be at least 1, got -1"),
    (["--gpus", "x"], "error: --gpus: must be GPU indices like 0,1, got 'x'"),
    (["--timeout", "-5"], "error: --timeout: must be positive, got -5.0"),
    (["--jobs", "-1"], "error: --jobs: must be 0 (all cores) or more, got -1"),
    (["--trials", "0"], "error: --trials: must be at least 1, got 0"),
    (["--seed", "-1"], "error: --seed: must be between 0 and 2**31 - 1, got -1"),
    (["--target-rel-ci", "2"], "error: --target-rel-ci: must be between 0 and 1, got 2.0"),
    (["--compile-modes", "bogus"], "error: --compile-modes: must be a list of"),
    (["--trails", "5"], "error: unrecognized arguments: --trails 5"),
    (["--config", "{tmp}/nonutf8.yaml"], "nonutf8.yaml: not a UTF-8 text file (byte 10: 0xff)"),
    (["--config", "{tmp}/unknown.yaml"], "unknown.yaml: unknown config key 'trails'"),
    (["--config", "{tmp}/timing5.yaml"], "timing5.yaml: 'timing' must be a mapping, got int"),
    (["--config", "{tmp}/list.yaml"], "list.yaml: config must be a mapping of keys to values, got list"),
    (["--config", "{tmp}/samples0.yaml"], "samples0.yaml: 'timing.samples' must be at least 1"),
    (["--config", "{tmp}/seedtrue.yaml"], "seedtrue.yaml: 'seed' must be an integer or null, got True"),
    (["--problems-dir", "{tmp}/empty/problems"], "empty/problems: no problem files here"),
    (["--solutions-dir", "{tmp}/empty/solutions"], "empty/solutions: no candidate files here"),
    (["--solutions-dir", "{tmp}/nowhere"], "nowhere: solutions directory does not exist"),
    (["--level", "9"], "error: --level: no level '9'; levels here: level1, level2, level3"),
    (["--problem", "*foo*"], "error: --problem '*foo*' matches no problem in problems ("),
    (["--candidate", "zzz"], "error: --candidate 'zzz' matches no candidate of the selected problems"),
    (["--resume", "no-such-run"], "no-such-run: no such run (no run.json)"),
    (["--resume", "../etc"], "error: '../etc' is not a run id"),
    (["--resume", "broken"], "broken/run.json: unreadable"),
    (["--resume", "listjson"], "listjson/run.json: not a run.json (a JSON object), got list"),
    (["--output-dir", "{tmp}/a-file"], "a-file: cannot create a run folder there"),
    (["report", "{tmp}/x"], "is not a run id"),
    (["lint", "--problem", "nomatch*"], "error: --problem 'nomatch*' matches no problem in problems ("),
    (["lint", "--level", "9"], "error: --level: no level '9'; levels here: level1, level2, level3"),
    (["lint", "--timeout", "-5"], "error: --timeout: must be positive, got -5.0"),
    (["lint", "--device", "tpu"], "error: argument --device: invalid choice: 'tpu'"),
    (["calibrate", "--problem", "nomatch*"], "error: --problem 'nomatch*' matches no problem in problems ("),
    (["compare", "onlyone"], "error: the following arguments are required: RUN_B"),
    (["import-kernelbench", "{tmp}"], "error: unrecognized arguments: --output-dir"),       # a one-line parser too
]


def _bad_input_folder(tmp: Path) -> None:
    for name, data in BAD_FILES.items():
        (tmp / name).write_bytes(data)
    for sub in ("empty/problems", "empty/solutions", "results/broken", "results/listjson"):
        (tmp / sub).mkdir(parents=True)
    (tmp / "results/broken/run.json").write_text("{oops")
    (tmp / "results/listjson/run.json").write_text("[]")
    (tmp / "a-file").write_text("")


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory) -> list[subprocess.CompletedProcess]:
    """Every BAD_INPUTS case through the real CLI, each in a folder of its own, two processes at a time: each fails
    on its input within a second or two (most of it importing torch to look at the trees), nothing is timed, and
    one after another they were 15 s."""
    from concurrent.futures import ThreadPoolExecutor
    folders = [tmp_path_factory.mktemp("bad-input") for _ in BAD_INPUTS]

    def run(case: int) -> subprocess.CompletedProcess:
        tmp, (args, _) = folders[case], BAD_INPUTS[case]
        _bad_input_folder(tmp)
        args = [a.replace("{tmp}", str(tmp)) for a in args]
        if "--output-dir" not in args:
            args += ["--output-dir", str(tmp / "results")]
        return run_cli(*args)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(run, range(len(BAD_INPUTS))))


@pytest.mark.parametrize("args, words", BAD_INPUTS)
def test_bad_input_gives_one_line_and_exit_2(bad_input_runs, args, words):
    done = bad_input_runs[BAD_INPUTS.index((args, words))]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert words in lines[0] and lines[0].startswith("error: ")


@pytest.mark.skipif(cuda_available(), reason="needs a machine without a GPU")
def test_gpus_on_a_machine_without_a_gpu_is_an_error_not_a_cpu_run(tmp_path):
    done = run_cli("--gpus", "0,1", "--output-dir", str(tmp_path))
    assert done.returncode == 2 and "--gpus 0,1: no GPU here" in done.stderr
    done = run_cli("lint", "--gpus", "0,1", "--output-dir", str(tmp_path))
    assert done.returncode == 2 and "--gpus 0,1: no GPU here" in done.stderr
    assert not list(tmp_path.iterdir())                                              # no run folder left behind


def test_flag_errors_blame_the_flag_not_the_config_file(tmp_path):
    from harness.core.config import load_config
    from harness.core.errors import UsageError
    cfg = tmp_path / "config.yaml"
    cfg.write_text("trials: 2\n")
    with pytest.raises(UsageError, match=r"^--samples: must be at least 1, got -1$"):
        load_config(cfg, {"timing": {"samples": -1}}, {"timing.samples": "--samples"})
    cfg.write_text("trials: 0\n")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(cfg))}: 'trials' must be at least 1$"):
        load_config(cfg, {"jobs": 2})
    assert load_config(cfg, {"trials": 4}).trials == 4                              # a flag may fix the file
