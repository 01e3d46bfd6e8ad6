"""Shared helpers: run the real CLI in a subprocess over the fixture trees, the way a user does."""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# Tests check behaviour, not speed: 6 rounds of 2-sample blocks (24 samples per side), a CI target loose enough
# to stop there on a busy machine, no torch.compile baselines (each costs seconds of compilation per problem).
TEST_TIMING = ["  block_samples: 2", "  min_rounds: 6", "  target_rel_ci: 0.5", "  max_pair_seconds: 20",
               "  interference_tolerance: 0.25", "  consistency_tolerance: 0.5",
               "  compile_modes: []"]
SAMPLES_PER_ROUND = 4        # each side: a forward and a backward block of 2 samples per round
SAMPLES_PER_SIDE = 6 * SAMPLES_PER_ROUND     # when the CI target stops it at min_rounds


def _pair_timeout() -> int:
    """Every CPU fixture run's pair timeout (`--timeout`, config `timeout`), from this one place: 60 s on a quiet
    box, scaled by the box's measured load per core when it is busier (a 2-core box at load 8 gives 240 s), at most
    600 s; KB_TEST_PAIR_TIMEOUT sets it outright. The pairs of the fixture trees take a few seconds each on a quiet
    box; only `hang` waits the timeout out, so a busy box's slowness is never read as a fault."""
    fixed = os.environ.get("KB_TEST_PAIR_TIMEOUT")
    if fixed:
        return int(float(fixed))
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return int(min(600, 60 * max(1.0, load)))


PAIR_TIMEOUT = _pair_timeout()
PAIR_TIMEOUT_ARG = str(PAIR_TIMEOUT)


# One cache_dir for the whole test run (set by the session fixture below), shared by pytest-xdist's workers: a C++
# candidate compiled by one test (~10 s each on a 2-core box) is found built by the next. A build's key hashes its
# source and the toolchain, so a test finds only the build its own candidate would have made; a test about the cache,
# the build worker or what lies in cache_dir (keys, build logs) passes cache_dir= a folder of its own.
SHARED_CACHE: Path | None = None


def run_root(tmp_path_factory) -> Path:
    """The folder the whole test run shares: pytest's base temp, or under pytest-xdist the one above the workers'
    own (pytest-N/popen-gwK)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def run_lock(tmp_path_factory, name: str):
    """Held by one pytest-xdist worker at a time: what the run's workers make once for all of them."""
    with open(run_root(tmp_path_factory) / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session", autouse=True)
def shared_cache(tmp_path_factory) -> Path:
    global SHARED_CACHE
    SHARED_CACHE = run_root(tmp_path_factory) / "shared-cache"
    SHARED_CACHE.mkdir(exist_ok=True)
    return SHARED_CACHE


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (README's test command): two workers where there is no GPU (the tests wait on their subprocesses
    much of the time, so two at once fill the CI box's two cores); none, one process, where there is a GPU: its
    tests time it and must not share it."""
    return 0 if cuda_available() or (os.cpu_count() or 1) < 2 else 2


def write_config(tmp: Path, tree: Path, timing: dict[str, object] | None = None, **extra) -> Path:
    """A config for the CPU tests; `timing` overrides keys of TEST_TIMING, `extra` adds top-level keys. cache_dir
    is the session's shared one unless `extra` gives one. Spare workers are on, as on GPU slots: the next pair's
    workers import torch while this pair runs (a quarter of a run's time on two cores); a run on the CPU path's
    default (off) is test_nothing_lost's, over examples/cpu."""
    timing_lines = {line.split(":")[0].strip(): line for line in ["  warmup: 2", *TEST_TIMING]}
    timing_lines.update({k: f"  {k}: {v}" for k, v in (timing or {}).items()})
    top = {"problems_dir": tree / "problems", "solutions_dir": tree / "solutions", "output_dir": tmp / "results",
           "cache_dir": SHARED_CACHE or tmp / "cache", "device": "cpu", "trials": 3, "timeout": PAIR_TIMEOUT,
           "spare_workers": "on", **extra}
    lines = [f"{k}: {v}" for k, v in top.items()] + ["timing:", *timing_lines.values()]   # each key once: the
    path = tmp / "config.yaml"                                                              # config refuses two
    path.write_text("\n".join(lines) + "\n")
    return path


def default_sigint() -> None:
    """A Popen preexec_fn: Ctrl-C's default in the child. A suite started in the background of a script (`cmd &`)
    runs with SIGINT ignored, and a Python child would inherit that and never see the Ctrl-C a test sends it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def communicate_or_explain(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """proc.communicate(timeout), and where it times out, the process table and the run's own Python stacks (it must
    run with PYTHONFAULTHANDLER=1: SIGABRT makes it print every thread's traceback) printed before the timeout is
    raised, so that a run that hangs in CI says where."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        table = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,wchan:20,etimes,args", "--forest"],
                               capture_output=True, text=True).stdout
        print(f"processes when {proc.pid} timed out:\n{table[-8000:]}")
        os.kill(proc.pid, signal.SIGABRT)
        _, err = proc.communicate(timeout=20)
        print(f"its stderr, with its stacks:\n{(err or '')[-8000:]}")
        raise


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, str(REPO / "run_eval.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)
    _keep(args, done)
    return done


def _keep(args: tuple[str, ...], done: subprocess.CompletedProcess) -> None:
    """With TEST_RUNS_OUT set (scripts/gpu_check.sh on the device), append each CLI run's output there, named by
    the test that ran it: the records of a failed device test come back for reading."""
    folder = os.environ.get("TEST_RUNS_OUT")
    if not folder:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "unknown").split(" ")[0].rsplit("::", 1)[-1]
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in test)[:80]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.txt"), "a", encoding="utf-8") as f:
        f.write(f"$ run_eval.py {' '.join(args)}\nrc {done.returncode}\n{done.stdout}\n--- stderr\n{done.stderr}\n")


def json_records(stdout: str) -> dict[str, dict]:
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {r["solution"].rsplit("/", 1)[-1]: r for r in records}


def verdict(record: dict) -> str:
    """The status, with an `invalid` that only timing noise caused (flags a busy shared machine can raise: the host
    clock saw load; harness.core.flags' `retry` ones) read as the `ok` it would be on a quiet host."""
    from harness.run.schedule import RETRIED_FLAGS
    if record["status"] == "invalid" and set(record["flags"]) <= set(RETRIED_FLAGS) and record["correctness"] and \
            record["correctness"]["trials_passed"] == record["correctness"]["trials"]:
        return "ok"
    return record["status"]


# Timing under load. A test that asserts on measured times is marked `timing` and checks them only where they mean
# something: on a loaded box (another test run beside this one, or anything else on its two cores) one side of a
# pair can be slowed and not the other, and a ratio from one run reads far from what the code does (an honest
# candidate's speedup read 4.2x [2.5, 5.8] on a box at load 7.5, its reference's own blocks 11x apart). Such a test
# asserts what it can without times, then skips the timed part, saying why. For a pair, the reference's own bracket
# blocks (before and after the candidate ran, the same inputs each time) say whether its box was loaded; elsewhere
# the load per core now, beyond what this test run itself adds.
LOADED_SPREAD = 2.0          # the slowest of a reference's bracket blocks over its fastest: a quiet box stays well under
LOADED_PER_CORE = 2.5        # 1-min load average per core; this test run alone reaches it while its shared runs build


def bracket_spread(record: dict) -> float | None:
    """How far apart the reference's bracket blocks of a pair were: slowest over fastest (None without them)."""
    found = ((record.get("timing") or {}).get("interference") or {})
    blocks = [b for b in (found.get("before_ms") or []) + (found.get("after_ms") or []) if b and b > 0]
    return max(blocks) / min(blocks) if blocks else None


def skip_timing_if_loaded(*records: dict) -> None:
    """Skip the rest of a `timing` test when any of these pairs was timed on a loaded box (LOADED_SPREAD)."""
    for record in records:
        spread = bracket_spread(record)
        if spread is not None and spread > LOADED_SPREAD:
            pytest.skip(f"timing: {record['solution']} was timed on a loaded box (its reference's own blocks "
                        f"{spread:.1f}x apart, over {LOADED_SPREAD}x); a ratio from that run says nothing")


def skip_timing_if_box_loaded() -> None:
    """Skip the rest of a `timing` test while the box is loaded (LOADED_PER_CORE)."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    if load > LOADED_PER_CORE:
        pytest.skip(f"timing: the box is loaded ({load:.1f} per core over the last minute, over {LOADED_PER_CORE}); "
                    "a time measured now says nothing")


def run_dirs(tmp: Path) -> list[Path]:
    return sorted(p for p in (tmp / "results").iterdir() if p.is_dir())


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:                                   # noqa: BLE001
        return False


@pytest.fixture(scope="session")
def fixture_tree() -> Path:
    return FIXTURES / "tree"


@pytest.fixture(scope="session")
def tree_run(tmp_path_factory, fixture_tree):
    """One real run of the CLI over the fixture tree (one candidate per failure mode; spare workers on, as on GPU
    slots), made once for all pytest-xdist workers: (tmp, config, records by candidate, the CompletedProcess).
    Shared by the tests that read its records (test_pipeline_cpu, test_exports, and test_dask's local side), which
    only read tmp/results' one run folder; a test that runs again writes to an output folder of its own."""
    tmp = run_root(tmp_path_factory) / "tree-run"
    kept = tmp / "done.json"
    with run_lock(tmp_path_factory, "tree-run"):
        if not kept.exists():
            tmp.mkdir(exist_ok=True)
            config = write_config(tmp, fixture_tree, spare_workers="on")
            # hang waits out the pair timeout (PAIR_TIMEOUT); every other pair of the tree takes seconds
            done = run_cli("--config", str(config), "--json", "--timeout", PAIR_TIMEOUT_ARG)
            kept.write_text(json.dumps([done.args, done.returncode, done.stdout, done.stderr]))
    done = subprocess.CompletedProcess(*json.loads(kept.read_text()))
    assert done.returncode == 0, done.stderr
    return tmp, tmp / "config.yaml", json_records(done.stdout), done
