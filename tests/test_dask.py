"""executor: dask, for real on the CPU: a LocalCluster the harness starts, and an external `dask scheduler` with two
`dask worker` processes, one of which is SIGKILLed while it evaluates a problem."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from fnmatch import fnmatch
from pathlib import Path

import pytest

from conftest import FIXTURES, PAIR_TIMEOUT_ARG, REPO, run_cli, verdict, write_config

pytest.importorskip("distributed")

LOST = "dask worker lost while evaluating this problem"
# one candidate per verdict: ok, incorrect, compile_error, runtime_error, crashed (SIGSEGV), skipped, load_error
SUBSET = "[cirs]*"      # compile_error correct_cpp cuda_only incorrect raises segfault syntax_error (+ identity)


def run_id(stderr: str) -> str:
    line = next(l for l in stderr.splitlines() if l.startswith("run "))
    return line.split()[1].rstrip(":")


def results(tmp: Path, rid: str) -> list[dict]:
    return [json.loads(line) for line in (tmp / "results" / rid / "results.jsonl").read_text().splitlines()]


def test_flags_are_checked():
    from harness.cli import _overrides, _run_parser
    from harness.core.config import load_config
    from harness.core.errors import HarnessError

    def cfg(*argv):
        return load_config(None, _overrides(_run_parser().parse_args(list(argv))))

    assert cfg().executor == "local" and cfg().scheduler is None
    assert cfg("--executor", "dask", "--scheduler", "tcp://10.0.0.5:8786").scheduler == "tcp://10.0.0.5:8786"
    with pytest.raises(HarnessError, match="--scheduler: goes with executor dask"):
        cfg("--scheduler", "tcp://h:8786")
    with pytest.raises(HarnessError, match="must be a dask scheduler address"):
        cfg("--executor", "dask", "--scheduler", "not an address")


def test_local_run_does_not_import_dask():
    code = ("import sys, harness.cli, harness.run.pipeline, harness.run.schedule; "
            "print(any(m.split('.')[0] in ('dask', 'distributed') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def _three_problems(tree: Path) -> Path:
    """The dask fixture's one problem and its candidates, three times over (scale_a, scale_b, scale_c): three tasks,
    so that one can be running on the worker that is killed while the others wait."""
    src = FIXTURES / "dask"
    for name in ("001_scale_a", "002_scale_b", "003_scale_c"):
        (tree / "problems" / "level1").mkdir(parents=True, exist_ok=True)
        shutil.copy(src / "problems" / "level1" / "001_scale.py", tree / "problems" / "level1" / f"{name}.py")
        shutil.copytree(src / "solutions" / "level1" / "001_scale", tree / "solutions" / "level1" / name)
    return tree


def test_dask_gives_the_local_verdicts(tmp_path, fixture_tree, tree_run):
    """The same pairs, the same statuses, each pair once; the dask run finds the local run's builds cached. The local
    run is conftest's tree_run (the whole fixture tree; only hang waits out its timeout, and SUBSET leaves it
    out), read for SUBSET's candidates."""
    local_tmp, _, _, local = tree_run
    config = write_config(tmp_path, fixture_tree)
    t0 = time.monotonic()
    dask = run_cli("--config", str(config), "--timeout", PAIR_TIMEOUT_ARG, "--candidate", SUBSET, "--executor", "dask")
    print(f"dask run {time.monotonic() - t0:.1f} s")
    assert dask.returncode == 0, dask.stderr
    by_executor = {}
    for name, tmp, done in (("local", local_tmp, local), ("dask", tmp_path, dask)):
        records = [r for r in results(tmp, run_id(done.stderr)) if fnmatch(r["solution"].rsplit("/", 1)[-1], SUBSET)]
        keys = [(r["problem"], r["solution"]) for r in records]
        assert len(keys) == len(set(keys)) == 8, keys
        by_executor[name] = {r["solution"].rsplit("/", 1)[-1]: verdict(r) for r in records}
    assert by_executor["dask"] == by_executor["local"]
    assert {"ok", "incorrect", "compile_error", "runtime_error", "crashed", "skipped", "load_error"} <= \
        set(by_executor["dask"].values())
    meta = json.loads((tmp_path / "results" / run_id(dask.stderr) / "run.json").read_text())
    assert meta["config"]["executor"] == "dask" and meta["dask"]["scheduler"] == "LocalCluster"
    assert meta["builds_compiled"] == 0                 # the parent's cache was warm; the tasks reused it
    start = meta["dask"]["cluster_start"]               # started beside the builds, its workers warmed (no error)
    assert start["early"] and start["seconds"] > 0 and start["warm_seconds"] > 0 and "warm_error" not in start, start


def _dask(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "dask"), *args]


def test_killed_worker_loses_no_record(tmp_path):
    """SIGKILL a dask worker while it evaluates a problem: with no retries (allowed-failures 0) its pairs are
    `crashed` with the dask message. Never a missing record. With retries (dask's default, 3) the problem runs again
    in another process: test_dask_cluster's README cluster run kills a busy worker the same way and checks that."""
    allowed_failures = 0
    from distributed import Client

    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1",
           "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": str(allowed_failures),
           "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0"}      # as README recommends: one task per thread
    sched_file = tmp_path / "scheduler.json"
    procs = []
    log = open(tmp_path / "dask.log", "w")
    try:
        procs.append(subprocess.Popen(_dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                            "--scheduler-file", str(sched_file)),
                                      cwd=tmp_path, env=env, stdout=log, stderr=log, start_new_session=True))
        deadline = time.monotonic() + 60
        address = None
        while address is None and time.monotonic() < deadline:
            try:        # dask writes the file in place: on a loaded box it can be read empty or half written
                address = json.loads(sched_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)
        assert address, f"the scheduler wrote no address to {sched_file} in 60 s"
        for _ in range(2):
            procs.append(subprocess.Popen(_dask("worker", address, "--nthreads", "1", "--no-dashboard",
                                                "--host", "127.0.0.1"),
                                          cwd=tmp_path, env=env, stdout=log, stderr=log, start_new_session=True))
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=90)
            # two problems run at once on this machine's cores: the test is about records, not about the
            # interference check, which the other problem's processes trip on a 2-core machine
            config = write_config(tmp_path, _three_problems(tmp_path / "tree"), timing={"interference_tolerance": 2.0})
            # the pair timeout is conftest's (a fixed 20 s timed out a reference on a box running two test runs)
            run = subprocess.Popen([sys.executable, str(REPO / "run_eval.py"), "--config", str(config), "--timeout",
                                    PAIR_TIMEOUT_ARG, "--executor", "dask", "--scheduler", address], cwd=REPO, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            victim = None
            deadline = time.monotonic() + 120
            while victim is None and time.monotonic() < deadline and run.poll() is None:
                busy = {w: keys for w, keys in client.processing().items() if any(str(k).startswith("kb-") for k in keys)}
                if busy:
                    time.sleep(2.0)                       # mid-task: its reference and candidate workers are up
                    worker = sorted(busy)[0]
                    pid = client.run(os.getpid, workers=[worker])[worker]
                    held = [str(k) for k in client.processing([worker]).get(worker, [])]
                    os.kill(pid, signal.SIGKILL)
                    victim = (worker, pid, held)
                else:
                    time.sleep(0.2)
            out, err = run.communicate(timeout=240)
        assert victim is not None, err
        assert run.returncode == 0, err
        rid = run_id(err)
        records = results(tmp_path, rid)
        keys = [(r["problem"], r["solution"]) for r in records]
        assert len(keys) == len(set(keys)) == 6, keys
        for record in records:
            assert verdict(record) == "ok" or (record["status"] == "crashed" and LOST in record["error"]), record
        # dask counts a death against every task the worker held (running, or queued on it), not only the running one
        held = {r["problem"] for r in records if any(k.endswith(r["problem"].replace("/", "__")) for k in victim[2])}
        assert held, victim
        tasks = json.loads((tmp_path / "results" / rid / "run.json").read_text())["dask"]["tasks"]
        for record in records:
            if record["problem"] not in held:
                assert verdict(record) == "ok", record
        crashed = {r["problem"] for r in records if r["status"] == "crashed"}
        assert crashed and crashed <= held
        for record in records:
            if record["status"] == "crashed":
                assert "KilledWorker" in record["error"] and "error" in tasks[record["problem"]], record
    finally:
        # SIGTERM to each process group, as test_dask_cluster's Cluster.stop: a nanny alone, asked to close, gave
        # its worker process 8 s before it killed it (most of this test's teardown)
        for proc in reversed(procs):
            _signal_group(proc.pid, signal.SIGTERM)
        for proc in reversed(procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            _signal_group(proc.pid, signal.SIGKILL)           # anything else left in its group
        log.close()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def test_a_dask_worker_keeps_its_spares_between_tasks_of_a_run(tmp_path, monkeypatch):
    """A task is one problem: spares made new per task would never be ready for its first pair. The spare started
    during one task serves the next task of the same run; a task of another run closes it, and so does a slot left
    without a task for KEEP_SPARES_S (an external cluster outlives the run)."""
    from harness.run.executors import dask_host as dx
    from harness.run.workerproc import SpareWorkers, worker_env
    from harness.run.schedule import Slot

    monkeypatch.setattr(dx, "KEEP_SPARES_S", 3.0)
    slot = Slot("cpu", None)

    def make():
        return SpareWorkers(worker_env(slot.env()), tmp_path, "cpu", True)

    first = dx._take_spares("run-a", slot, make)
    job = first.take("reference", tmp_path / "job-1.log")        # a task's reference; a spare starts beside it
    spare = first.spares["reference"]
    dx._keep_spares("run-a", slot, first)
    job.kill()
    job.close()

    second = dx._take_spares("run-a", slot, make)                 # the run's next task on this slot
    assert second is first and spare.alive()
    assert second.take("reference", tmp_path / "job-2.log") is spare
    other = second.spares["reference"]
    dx._keep_spares("run-a", slot, second)
    spare.kill()
    spare.close()

    third = dx._take_spares("run-b", slot, make)                  # another run: run-a's spares are closed
    assert third is not second
    deadline = time.monotonic() + 10
    while other.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not other.alive()

    third.take("reference", tmp_path / "job-3.log").kill()
    idle = third.spares["reference"]
    dx._keep_spares("run-b", slot, third)                          # no task comes: closed after KEEP_SPARES_S
    deadline = time.monotonic() + 15
    while idle.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not idle.alive() and ("run-b", "cpu") not in dx._KEPT
