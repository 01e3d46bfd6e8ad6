"""Shared helpers: run the real CLI in a subprocess over the fixture trees, the way a user does."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# Tests check behaviour, not speed: 6 rounds of 2-sample blocks (24 samples per side), a CI target loose enough
# to stop there on a busy machine (the largest the config takes: at 0.5 a loaded 2-core box went on to 20-40
# rounds), no torch.compile baselines (each costs seconds of compilation per problem), and an interference
# tolerance that a busy box's other processes do not trip (each trip times the pair again; no CPU test is about it).
TARGET_REL_CI = 0.99
TEST_TIMING = ["  block_samples: 2", "  min_rounds: 6", f"  target_rel_ci: {TARGET_REL_CI}", "  max_pair_seconds: 20",
               "  interference_tolerance: 2.0", "  consistency_tolerance: 0.5",
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
def _root_lock(root: Path, name: str):
    """Held by one pytest-xdist worker at a time: what the run's workers make once for all of them."""
    with open(root / f"{name}.lock", "w") as f:
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
        if _loaded(record):
            pytest.skip(f"timing: {record['solution']} was timed on a loaded box (its reference's own blocks "
                        f"{bracket_spread(record):.1f}x apart, over {LOADED_SPREAD}x); a ratio from that run says "
                        "nothing")


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
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False      # `--dist loadfile` hands out files in FILE_SECONDS' order


# `--dist loadfile` hands each pytest-xdist worker the next file when it is almost done with its last, so the file
# that starts last bounds the wall time. Files go out longest first (their seconds on the 2-core CI box, rounded;
# only the order counts), the short ones after them filling the gaps; a file not listed here comes after them all.
# The readers of the shared runs (SHARED_RUNS: test_exports, test_pipeline_cpu, test_dask read tree_run;
# test_exploits reads exploit_run) are placed by their own work, after the longest: by then their run has ended.
# test_exploits comes late for its quiet part too (exploit_timed_run): the other worker is then in short tests.
FILE_SECONDS = {
    "test_hostile_inputs.py": 170, "test_nothing_lost.py": 150, "test_sandbox.py": 90, "test_dask.py": 85,
    "test_pipeline_cpu.py": 80, "test_processes.py": 65, "test_exports.py": 60, "test_dask_cluster.py": 55,
    "test_ci_workflow.py": 50, "test_profiling.py": 45, "test_signing.py": 40, "test_between.py": 36,
    "test_shapes.py": 33, "test_lint.py": 32, "test_ci.py": 31, "test_compilecache.py": 29, "test_api.py": 27,
    "test_html_page.py": 26, "test_memory.py": 22, "test_profile.py": 21, "test_cli_manners.py": 15,
    "test_narrow.py": 13, "test_zygote.py": 12, "test_exploits.py": 10, "test_html.py": 6, "test_ranking.py": 4, "test_interleave.py": 4,
}


def pytest_collection_modifyitems(config, items):
    """Files in FILE_SECONDS' order, longest first; each file's tests keep their order (the sort is stable)."""
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.name, 0))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With KB_TEST_TIMELINE=FILE: one line per test appended there (pytest-xdist worker, wall clock at its start and
    end, the 1-min load average at its end, the CPU seconds it used with its subprocesses, its id), to see where
    each worker spends the suite's wall time and its CPU, and which tests ran beside which."""
    path = os.environ.get("KB_TEST_TIMELINE")
    factory = getattr(item.config, "_tmp_path_factory", None)
    start, cpu = time.time(), _cpu_seconds()
    with _running_a_test(run_root(factory) if factory is not None else None):
        yield
    if path:
        with open(path, "a") as f:
            f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {start:.2f} {time.time():.2f} "
                    f"{os.getloadavg()[0]:.2f} {_cpu_seconds() - cpu:.2f} {item.nodeid}\n")


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that ended and were waited for (a CLI run's, with its
    workers')."""
    import resource
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def proc_read(path: str) -> bytes:
    """A /proc file's bytes, or b"" where it is gone or not readable."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def proc_children(pid: int) -> list[int]:
    """A process's direct children (every thread's children file)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        out += [int(x) for x in proc_read(f"/proc/{pid}/task/{tid}/children").split()]
    return out


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
def tree_run(tmp_path_factory):
    """One real run of the CLI over the fixture tree (one candidate per failure mode; spare workers on, as on GPU
    slots), made once for all pytest-xdist workers: (tmp, config, records by candidate, the CompletedProcess).
    Shared by the tests that read its records (test_pipeline_cpu, test_exports, and test_dask's local side), which
    only read tmp/results' one run folder; a test that runs again writes to an output folder of its own."""
    tmp, done = shared_run(tmp_path_factory, "tree_run")
    assert done.returncode == 0, done.stderr
    return tmp, tmp / "config.yaml", json_records(done.stdout), done


@pytest.fixture(scope="session")
def exploit_run(tmp_path_factory) -> dict[str, dict]:
    """One real run of the CLI over the exploits tree (test_exploits reads its records), made once per test run."""
    _, done = shared_run(tmp_path_factory, "exploit_run")
    assert done.returncode == 0, done.stderr
    return json_records(done.stdout)


# The shared runs: fixture name -> the tree it runs. Each is one CLI run that several tests read, started in the
# background as soon as collection shows a selected test needs it (pytest_collection_finish), so that it runs beside
# the tests that come first instead of holding up the first test that reads it: most of its time is waiting (`hang`
# waits out PAIR_TIMEOUT; a pair's workers start and stop), not work for the two cores. Its fixture waits for it.
SHARED_RUNS = {"tree_run": FIXTURES / "tree", "exploit_run": FIXTURES / "exploits"}
_started: list[tuple[Path, subprocess.Popen]] = []

# The exploits whose timing test_exploits checks (that they gain nothing, that a forged report is not read, that
# patching torch does not slow the reference), with the control they compare against. Timed beside the rest of a
# test run, their pairs read what the load did: the reference's own bracket blocks 3.7-9.6x apart, so the checks
# skipped (skip_timing_if_loaded). They are left out of exploit_run and timed in a run of their own while the box is
# quiet (exploit_timed_run).
EXPLOITS_TIMED = ("precompute_at_inputs", "tamper_timer", "patch_sampler", "arena_watcher", "precompute_in_torch",
                  "thread_when_timed", "forge_sample_times", "scale_reports", "patch_reference", "control_plain",
                  "extra_threads", "autoreap_helper", "reuse_buffer", "dilute_cores", "kernel_after_stop")
# GPU-only exploits in the same tree, which exploit_run (the CPU path) leaves out: tests/test_gpu.py runs them
EXPLOITS_GPU_ONLY = ("cover_window",)
SHARED_RUN_LEAVES_OUT = {"exploit_run": EXPLOITS_TIMED + EXPLOITS_GPU_ONLY}


def subtree(tree: Path, dest: Path, keep) -> Path:
    """A copy of a fixture tree at dest with the candidates whose name (the file's stem) `keep` accepts; every
    problem is kept. The candidates' ids are the same as in the tree."""
    shutil.copytree(tree / "problems", dest / "problems")
    for path in sorted((tree / "solutions").rglob("*.py")):
        if keep(path.stem):
            target = dest / "solutions" / path.relative_to(tree / "solutions")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return dest


def _start_shared_run(root: Path, name: str) -> None:
    """Start the shared run `name` under root/name, unless another pytest-xdist worker did: its stdout and stderr go
    to files there, and `rc` appears (written whole) once it has ended."""
    folder = root / name
    with _root_lock(root, name):
        if folder.exists():
            return
        folder.mkdir()
        (root / "shared-cache").mkdir(exist_ok=True)            # the session's (shared_cache below)
        tree, left_out = SHARED_RUNS[name], SHARED_RUN_LEAVES_OUT.get(name, ())
        if left_out:
            tree = subtree(tree, folder / "tree", lambda stem: stem not in left_out)
        config = write_config(folder, tree, cache_dir=root / "shared-cache")
        # every pair takes seconds; hang waits out the pair timeout (PAIR_TIMEOUT)
        args = [sys.executable, str(REPO / "run_eval.py"), "--config", str(config), "--json", "--timeout",
                PAIR_TIMEOUT_ARG]
        (folder / "args.json").write_text(json.dumps(args))
        with open(folder / "stdout", "w") as out, open(folder / "stderr", "w") as err:
            proc = subprocess.Popen(args, cwd=REPO, stdout=out, stderr=err, preexec_fn=default_sigint,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
    _started.append((folder, proc))

    def reap() -> None:
        code = proc.wait()
        (folder / "rc.part").write_text(str(code))
        os.replace(folder / "rc.part", folder / "rc")
    threading.Thread(target=reap, name=f"kb-test-{name}", daemon=True).start()


def shared_run(tmp_path_factory, name: str, timeout: float = 1800) -> tuple[Path, subprocess.CompletedProcess]:
    """The shared run `name` (SHARED_RUNS), started now if collection did not start it, once it has ended: its
    folder and its CompletedProcess."""
    root = run_root(tmp_path_factory)
    folder = root / name
    _start_shared_run(root, name)
    _wait_ended(folder, name, timeout)
    done = subprocess.CompletedProcess(json.loads((folder / "args.json").read_text()),
                                       int((folder / "rc").read_text()), (folder / "stdout").read_text(),
                                       (folder / "stderr").read_text())
    _keep(tuple(done.args[2:]), done)
    return folder, done


def _wait_ended(folder: Path, name: str, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while not (folder / "rc").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the shared run {name} did not end within {timeout:g} s (its output: {folder})")
        time.sleep(0.2)


# A quiet box for the timed checks. Every test holds the shared side of a lock across pytest-xdist's workers while it
# runs (pytest_runtest_protocol); quiet_box() takes its exclusive side, once the shared runs have ended: the other
# worker finishes the test it is in and starts no other until the quiet part is over. A gate in front of the lock
# (taken exclusively by quiet_box, passed through by every test) keeps a stream of short tests from holding it off.
_share: list = []                   # this process's open file on the lock while one of its tests holds its share


def _flock(path: Path, how: int):
    f = open(path, "a")
    fcntl.flock(f, how)
    return f


@contextmanager
def _running_a_test(root: Path | None):
    if root is None:
        yield
        return
    _take_share(root)
    try:
        yield
    finally:
        _drop_share()


def _take_share(root: Path) -> None:
    gate = _flock(root / "quiet.gate", fcntl.LOCK_SH)      # waits while a quiet part runs or waits to
    try:
        _share.append(_flock(root / "quiet.lock", fcntl.LOCK_SH))
    finally:
        gate.close()


def _drop_share() -> None:
    while _share:
        _share.pop().close()


@contextmanager
def quiet_box(root: Path, timeout: float = 1800):
    """Nothing else of this test run uses the box inside it: the shared runs have ended, the other pytest-xdist
    worker's test has ended and it starts no other until this is left. The caller's own test gives up its share
    meanwhile (it waits on nothing else here)."""
    for name in SHARED_RUNS:
        if (root / name).exists():
            _wait_ended(root / name, name, timeout)
    with _share_given_up(root):
        gate = _flock(root / "quiet.gate", fcntl.LOCK_EX)
        try:
            with _flock(root / "quiet.lock", fcntl.LOCK_EX):
                yield
        finally:
            gate.close()


@contextmanager
def _share_given_up(root: Path):
    """While this test waits for another worker that may be in quiet_box, it holds no share of the lock."""
    held = bool(_share)
    _drop_share()
    try:
        yield
    finally:
        if held:
            _take_share(root)


QUIET_ATTEMPTS = 3      # a timed pair whose reference's blocks still read a loaded box is timed again, this often


@pytest.fixture(scope="session")
def exploit_timed_run(tmp_path_factory) -> dict[str, dict]:
    """The records of EXPLOITS_TIMED, timed while the box is quiet (quiet_box), made once per test run. A pair that
    still read a loaded box (LOADED_SPREAD: something outside this test run, or a stray slow block) is timed again,
    up to QUIET_ATTEMPTS runs in all; each candidate keeps its first record whose reference's blocks were not
    loaded (else its last, and its timed checks skip, saying so). Which record is kept depends on the reference's
    own blocks alone, never on what the checks read."""
    root = run_root(tmp_path_factory)
    folder = root / "exploit_timed"
    with _share_given_up(root), _root_lock(root, "exploit_timed"):
        if (folder / "records.json").exists():
            return json.loads((folder / "records.json").read_text())
        records: dict[str, dict] = {}
        with quiet_box(root):
            for attempt in range(QUIET_ATTEMPTS):
                todo = [name for name in EXPLOITS_TIMED if name not in records or _loaded(records[name])]
                if not todo:
                    break
                tmp = folder / f"attempt{attempt}"
                tree = subtree(FIXTURES / "exploits", tmp / "tree", lambda stem: stem in todo)
                config = write_config(tmp, tree, cache_dir=root / "shared-cache")
                done = run_cli("--config", str(config), "--json", "--timeout", PAIR_TIMEOUT_ARG)
                assert done.returncode == 0, done.stderr
                found = json_records(done.stdout)
                assert set(found) == set(todo), sorted(found)
                records.update(found)
        (folder / "records.json").write_text(json.dumps(records))
    return records


def _loaded(record: dict) -> bool:
    spread = bracket_spread(record)
    return spread is not None and spread > LOADED_SPREAD


def pytest_collection_finish(session):
    """Start the shared runs the selected tests need (SHARED_RUNS), once per test run whichever worker comes first."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or session.config.option.collectonly:
        return
    needed = {name for item in session.items for name in SHARED_RUNS if name in getattr(item, "fixturenames", ())}
    for name in sorted(needed):
        _start_shared_run(run_root(factory), name)


def pytest_sessionfinish(session, exitstatus):
    """A shared run this process started ends before it does: waited for (another worker's test may still read
    it), or stopped when the test run was interrupted."""
    for folder, proc in _started:
        if exitstatus == pytest.ExitCode.INTERRUPTED and proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            proc.kill()
