"""README's "Scale-out on Dask" recipe for an external cluster, on this machine and from the command line: a
`dask scheduler` and two `dask worker` processes started as the README says, then `run_eval.py --executor dask
--scheduler ADDRESS`. The statuses are a local run's (LOCAL), a worker SIGKILLed mid-run costs no record, a worker
without the harness gets one clear line, and nothing is left running.

The scheduler runs where `import harness` fails (a stub `harness` package that raises ModuleNotFoundError comes
first on its PYTHONPATH), as on a login node with dask but not the harness: tasks must never need it there.
The workers run in the checkout with this environment, where `pip install -e .` (README's install, .ci/run) makes
the harness importable; a development environment without that install gets PYTHONPATH=<checkout> instead, which
resolves `import harness` to the same files.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import PAIR_TIMEOUT_ARG, REPO, write_config
from test_dask import LOST, results, run_id, verdict

pytest.importorskip("distributed")

DASK = Path(sys.executable).parent / "dask"        # `dask` with this environment active (README)
EXAMPLES = REPO / "examples" / "cpu"
MISSING = "cannot import the harness"


# ---------------------------------------------------------------- a cluster, as README starts one


class Cluster:
    """`dask scheduler` and `dask worker` processes, each in its own session (killed by process group), all
    carrying MARK=<token> and a TMPDIR of their own in their environment, so that anything they or their harness
    workers leave behind can be found in /proc."""

    MARK = "KB_TEST_CLUSTER"

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.token = uuid.uuid4().hex
        self.port = _free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.log = open(tmp / "cluster.log", "w")
        self.tmpdir = tmp / f"tmp-{self.token[:8]}"
        self.tmpdir.mkdir()

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update({"PATH": f"{DASK.parent}{os.pathsep}{env.get('PATH', '')}", "VIRTUAL_ENV": str(Path(sys.prefix)),
                    "PYTHONUNBUFFERED": "1", self.MARK: self.token,
                    "TMPDIR": str(self.tmpdir)})    # harness workers keep only whitelisted variables, TMPDIR among them
        env.update(extra)
        return env

    def scheduler(self) -> None:
        """README: DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0 dask scheduler --host 127.0.0.1 --port P."""
        stub = self.tmp / "no-harness"
        _write_stub(stub)
        self._start(["scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"], self.tmp,
                    self.env(DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION="1.0", PYTHONPATH=str(stub)))

    def worker(self, name: str, cpus: list[int], harness: bool = True) -> None:
        """README: in the checkout, taskset -c CPUS dask worker ADDRESS --nthreads 1 --name N --no-dashboard."""
        extra = {"PYTHONPATH": str(REPO)} if harness and not harness_installed() else {}
        if not harness:
            stub = self.tmp / "no-harness"
            _write_stub(stub)
            extra = {"PYTHONPATH": str(stub)}
        pin = ["taskset", "-c", ",".join(map(str, cpus))] if cpus and shutil.which("taskset") else []
        self._start(["worker", self.address, "--nthreads", "1", "--name", name, "--no-dashboard",
                     "--host", "127.0.0.1"], REPO, self.env(**extra), pin)

    def _start(self, args: list[str], cwd: Path, env: dict[str, str], prefix: list[str] = ()) -> None:
        self.procs.append(subprocess.Popen([*prefix, str(DASK), *args], cwd=cwd, env=env, stdout=self.log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def client(self):
        from distributed import Client
        return Client(self.address, timeout="60s")

    def run_eval(self, *args: str) -> subprocess.Popen:
        """README: python run_eval.py --device cpu --executor dask --scheduler ADDRESS, in the checkout."""
        return subprocess.Popen([sys.executable, "run_eval.py", *args, "--executor", "dask", "--scheduler",
                                 self.address], cwd=REPO, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def stop(self) -> list[str]:
        """Every process group ended (SIGTERM, then SIGKILL); returns what still runs with our mark afterwards,
        after killing it."""
        for proc in self.procs:
            _signal_group(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            _signal_group(proc.pid, signal.SIGKILL)           # anything else left in its group
        self.procs.clear()
        self.log.close()
        deadline = time.monotonic() + 15                      # harness workers die by PDEATHSIG and their guardian
        while (left := marked(self.token, self.tmpdir)) and time.monotonic() < deadline:
            time.sleep(0.3)
        for pid in left:
            _kill(pid)
        return [f"{pid}: {cmdline(pid)}" for pid in left]


def _write_stub(root: Path) -> None:
    """A `harness` that cannot be imported, first on PYTHONPATH: a host where the harness is not installed."""
    (root / "harness").mkdir(parents=True, exist_ok=True)
    (root / "harness" / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'harness\'", name="harness")\n')


def harness_installed() -> bool:
    """Whether this environment imports this checkout's harness from any directory (README's pip install -e .)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "import harness; print(harness.__file__)"], cwd="/",
                          capture_output=True, text=True, env=env, timeout=60)
    return done.returncode == 0 and Path(done.stdout.strip()).resolve() == REPO / "harness" / "__init__.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def marked(token: str, tmpdir: Path) -> list[int]:
    """Live processes whose environment carries the cluster's mark, or its TMPDIR (the harness workers its runs
    started). Not a shared KB_RUN_TAG: a harness parent's guardian kills every process of its run tag when that
    parent dies, which would reach the other dask worker's processes when one is killed."""
    wanted = (f"{Cluster.MARK}={token}\0".encode(), f"TMPDIR={tmpdir}\0".encode())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(w in environ for w in wanted):
            found.append(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.stop()                                           # idempotent: the test's own stop() came first


# ---------------------------------------------------------------- a tiny CPU tree


INCORRECT = '''"""Wrong on purpose: not the reference's values."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * (self.scale + 1.0)
'''

RAISES = '''"""Raises in forward: a runtime_error."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x):
        raise RuntimeError("this candidate raises on purpose")
'''


def cpu_tree(root: Path) -> Path:
    """examples/cpu's three problems with their A/A controls (no builds), plus an incorrect and a raising candidate
    for the first one: three tasks, four statuses to agree on."""
    shutil.copytree(EXAMPLES / "problems", root / "problems")
    for problem in sorted((EXAMPLES / "solutions" / "level1").iterdir()):
        dest = root / "solutions" / "level1" / problem.name
        dest.mkdir(parents=True)
        shutil.copy(problem / "aa_same_ops.py", dest / "aa_same_ops.py")
    first = root / "solutions" / "level1" / "001_relu_scale"
    (first / "incorrect.py").write_text(INCORRECT)
    (first / "raises.py").write_text(RAISES)
    return root


def config_for(tmp: Path) -> Path:
    # two problems run at once on this machine's cores: the test is about records, not the interference check
    return write_config(tmp, cpu_tree(tmp / "tree"), timing={"interference_tolerance": 2.0})


def statuses(tmp: Path, stderr: str) -> dict[tuple[str, str], str]:
    records = results(tmp, run_id(stderr))
    keys = [(r["problem"], r["solution"]) for r in records]
    assert len(keys) == len(set(keys)), keys
    return {(r["problem"], r["solution"]): verdict(r) for r in records}


# ---------------------------------------------------------------- the tests


# What a local run of cpu_tree gives, pair by pair (test_dask compares the two executors on runs of its own; a local
# run here cost a third of this module's time)
LOCAL = {("level1/001_relu_scale", "level1/001_relu_scale/aa_same_ops"): "ok",
         ("level1/001_relu_scale", "level1/001_relu_scale/incorrect"): "incorrect",
         ("level1/001_relu_scale", "level1/001_relu_scale/raises"): "runtime_error",
         ("level1/002_row_softmax", "level1/002_row_softmax/aa_same_ops"): "ok",
         ("level1/003_linear_bias", "level1/003_linear_bias/aa_same_ops"): "ok"}


def test_readme_cluster_gives_the_local_statuses_and_survives_a_killed_worker(tmp_path, cluster):
    config = config_for(tmp_path)
    common = ["--config", str(config), "--device", "cpu", "--timeout", PAIR_TIMEOUT_ARG]
    want = LOCAL
    t1 = time.monotonic()

    cores = sorted(os.sched_getaffinity(0))
    half = max(1, len(cores) // 2)
    cluster.scheduler()
    cluster.worker("cpu0", cores[:half])
    cluster.worker("cpu1", cores[half:] or cores)
    with cluster.client() as client:
        client.wait_for_workers(2, timeout=90)
        run = cluster.run_eval(*common)
        victim = kill_a_busy_worker(client, run)
        out, err = run.communicate(timeout=300)
    t2 = time.monotonic()
    left = cluster.stop()
    print(f"cluster run {t2 - t1:.1f} s, worker killed: {victim}")
    assert run.returncode == 0, err
    assert victim is not None, f"no task was seen running on a worker\n{err}"
    assert "deserializ" not in err and MISSING not in err, err
    got = statuses(tmp_path, err)
    assert got == want, (got, want, err)
    # dask's default retries: every problem the killed worker held (running, or queued on it) ran again, in another
    # process (this was test_dask's test_killed_worker_loses_no_record[3])
    rid = run_id(err)
    held = {r["problem"] for r in results(tmp_path, rid) if any(k.endswith(r["problem"].replace("/", "__"))
                                                                for k in victim[2])}
    tasks = json.loads((tmp_path / "results" / rid / "run.json").read_text())["dask"]["tasks"]
    assert held and all(tasks[p]["pid"] != victim[1] for p in held), (victim, tasks)
    assert not left, f"left running after the cluster stopped: {left}"
    log = (tmp_path / "cluster.log").read_text()
    assert "No module named 'harness'" not in log, log[-3000:]     # the scheduler never tried to import it


def kill_a_busy_worker(client, run: subprocess.Popen) -> tuple[str, int, list[str]] | None:
    """SIGKILL the dask worker process of the first task seen running, 2 s into it (its reference and candidate
    workers are up): (worker, its pid, the keys it held). The worker's nanny restarts it; the scheduler runs the
    task again."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        busy = sorted(w for w, keys in client.processing().items() if any(str(k).startswith("kb-") for k in keys))
        if busy:
            time.sleep(2.0)
            pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
            held = [str(k) for k in client.processing([busy[0]]).get(busy[0], [])]
            os.kill(pid, signal.SIGKILL)
            return busy[0], pid, held
        time.sleep(0.2)
    return None


def test_a_worker_without_the_harness_gets_one_clear_line(tmp_path, cluster):
    config = config_for(tmp_path)
    cluster.scheduler()
    cluster.worker("bare", [], harness=False)
    with cluster.client() as client:
        client.wait_for_workers(1, timeout=90)
        run = cluster.run_eval("--config", str(config), "--device", "cpu", "--problem", "001_relu_scale",
                               "--candidate", "aa_same_ops")
        out, err = run.communicate(timeout=300)
    left = cluster.stop()
    assert run.returncode == 0, err
    [record] = results(tmp_path, run_id(err))
    assert record["status"] == "crashed" and MISSING in record["error"], record
    assert "No module named 'harness'" in record["error"] and "pip install -e ." in record["error"], record
    assert LOST not in record["error"] and "Traceback" not in record["error"], record
    said = [line for line in err.splitlines() if MISSING in line]
    assert len(said) == 1 and said[0].startswith("dask worker host"), err
    assert "Traceback" not in err and "deserializ" not in err, err
    assert not left, f"left running after the cluster stopped: {left}"
