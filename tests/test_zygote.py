"""Workers forked from the zygote (harness.run.zygote, harness.worker.zygote) are started workers in every way the
harness and containment rely on: this process's child, in a session of their own, their own tag where
/proc/<pid>/environ shows it, their role on the command line, their output in their log. A worker that cannot
become this process's child ends on its own; a dead zygote costs the next worker only its own import."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, proc_read as _read

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux-only")


def _env(tmp_path, **extra):
    from harness.run import workerproc as procs
    return procs.worker_env({"KB_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path),
                             "KB_SANDBOX": "off", **extra})


def _zygotes():
    from harness.run.workerproc import _spawner
    return _spawner.zygotes


def test_a_forked_worker_is_a_started_worker(tmp_path):
    from harness.run import workerproc as procs
    from harness.run.zygote import ForkedProcess
    from harness.shared import containment
    worker = procs.Worker("build", _env(tmp_path), tmp_path / "worker.log")
    try:
        assert isinstance(worker.proc, ForkedProcess), "the worker was not forked from the zygote"
        pid = worker.proc.pid
        assert containment.stat(pid)[1] == os.getpid()                      # re-parented to us
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid             # its own session and group
        assert containment.environ_tag(pid) == worker.tag                   # what sweep() and the guardian look for
        argv = _read(f"/proc/{pid}/cmdline").split(b"\0")
        assert argv[1:4] == [b"-m", b"harness.worker", b"build"]
        assert worker.alive()
        zygote = next(z for z in _zygotes().live.values())
        assert containment.environ_tag(zygote.proc.pid) == zygote.tag != worker.tag
        os.kill(pid, signal.SIGUSR1)                                        # Python's default: the process ends
        assert worker.proc.wait(10) == -signal.SIGUSR1
        assert not worker.alive()
    finally:
        worker.kill()
        worker.close()


def test_a_forked_worker_holds_the_descriptors_popen_would_give(tmp_path):
    """stdin /dev/null, stdout and stderr the log's pipe, the two channel pipes at the numbers its command line
    names, and nothing of the zygote's (its request socket)."""
    from harness.run import workerproc as procs
    worker = procs.Worker("build", _env(tmp_path), tmp_path / "worker.log")
    try:
        pid = worker.proc.pid
        fd_dir = f"/proc/{pid}/fd"
        links = {}
        for fd in os.listdir(fd_dir):
            try:
                links[int(fd)] = os.readlink(f"{fd_dir}/{fd}")
            except FileNotFoundError:           # a file the worker had open for a moment (its imports)
                pass
        assert links[0] == os.devnull
        log_pipe = os.fstat(worker.sink.fd).st_ino
        assert os.stat(f"{fd_dir}/1").st_ino == os.stat(f"{fd_dir}/2").st_ino == log_pipe
        argv = _read(f"/proc/{pid}/cmdline").split(b"\0")
        cmd_fd, res_fd = int(argv[4]), int(argv[5])
        assert os.stat(f"{fd_dir}/{res_fd}").st_ino == os.fstat(worker.reader.fd).st_ino
        assert os.stat(f"{fd_dir}/{cmd_fd}").st_ino == os.fstat(worker.cmd_w).st_ino
        assert not [link for link in links.values() if link.startswith("socket:")], links
    finally:
        worker.kill()
        worker.close()


def test_a_worker_that_cannot_become_our_child_ends(tmp_path):
    """The parent named in its environment is not the process it was re-parented to (the harness died before it
    could adopt it, say): the worker waits a moment, then exits with 3 instead of running the job."""
    from harness.run.zygote import Zygote
    from harness.run import workerproc as procs
    from harness.shared import containment
    containment.setup_parent()
    env = {**_env(tmp_path), containment.TAG_VAR: containment.new_tag(), containment.PARENT_VAR: "1"}
    zygote = Zygote(env, str(procs.REPO_ROOT))
    fds = [os.pipe()[0], os.pipe()[1], procs.new_arena(), os.open(os.devnull, os.O_WRONLY)]
    try:
        forked = zygote.spawn("build", env, str(procs.REPO_ROOT), fds)
        started = time.monotonic()
        assert forked.wait(30) == 3
        assert time.monotonic() - started < 15
    finally:
        for fd in fds:
            os.close(fd)
        zygote.close()
    assert zygote.proc.returncode is not None


def test_a_dead_zygote_costs_only_the_next_workers_import(tmp_path, capfd):
    from harness.run import workerproc as procs
    from harness.run.zygote import ForkedProcess
    first = procs.Worker("build", _env(tmp_path), tmp_path / "a.log")
    first.kill()
    first.close()
    for zygote in list(_zygotes().live.values()):
        os.kill(zygote.proc.pid, signal.SIGKILL)
        zygote.proc.wait(10)
    second = procs.Worker("build", _env(tmp_path), tmp_path / "b.log")
    try:
        assert not isinstance(second.proc, ForkedProcess)                  # started on its own, and alive
        assert second.alive()
        assert "could not be forked from the zygote" in capfd.readouterr().err
    finally:
        second.kill()
        second.close()
    third = procs.Worker("build", _env(tmp_path), tmp_path / "c.log")
    try:
        assert isinstance(third.proc, ForkedProcess)                       # a new zygote serves the next one
    finally:
        third.kill()
        third.close()


def test_workers_share_a_zygote_only_where_their_startup_agrees():
    from harness.run.zygote import startup_key
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/repo", "GLIBC_TUNABLES": "x"}
    later = {**base, "CUDA_VISIBLE_DEVICES": "1", "KB_CPUS": "2,3", "OMP_NUM_THREADS": "4", "KB_WORKER_TAG": "t.1"}
    assert startup_key(later) == startup_key(base)
    for name, value in (("LD_LIBRARY_PATH", "/opt/lib"), ("LD_PRELOAD", "x.so"), ("OPENBLAS_NUM_THREADS", "4"),
                        ("PYTHONPATH", "/elsewhere"), ("CUDA_HOME", "/usr/local/cuda")):
        assert startup_key({**base, name: value}) != startup_key(base), name


def test_every_build_is_forked_from_one_zygote(tmp_path):
    """A build worker's environment names its own extension folder (and the build's jobs and architectures), read
    only when it builds: builds of different candidates share a zygote, rather than each waiting for one of its
    own to import torch (which the one thread that starts workers did one after another)."""
    from harness.run.build import Toolchain, build_worker_env
    from harness.run.zygote import startup_key
    toolchain = Toolchain(device_kind="cuda", torch="t", cuda="12", arch="9.0", python="3.11")
    first, second = (build_worker_env(tmp_path / name, toolchain) for name in ("a", "b"))
    assert first["TORCH_EXTENSIONS_DIR"] != second["TORCH_EXTENSIONS_DIR"]
    assert startup_key(first) == startup_key(second)
    assert startup_key({**first, "MAX_JOBS": "8", "TORCH_CUDA_ARCH_LIST": "8.0"}) == startup_key(first)


def test_a_prestarted_zygote_serves_the_next_worker(tmp_path):
    """workerproc.prestart starts the zygote of an environment before any worker of it is asked for (the local
    executor's, beside the builds); the first worker is then forked from that one."""
    from harness.run import workerproc as procs
    zygotes = _zygotes()
    zygotes.close()
    env = _env(tmp_path, LANG="C")
    procs.prestart(env)
    deadline = time.monotonic() + 10
    while not zygotes.live and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(zygotes.live) == 1
    prestarted = next(iter(zygotes.live.values()))
    worker = procs.Worker("build", env, tmp_path / "worker.log")
    try:
        assert list(zygotes.live.values()) == [prestarted]
        assert worker.proc.pid != prestarted.proc.pid and worker.alive()
    finally:
        worker.kill()
        worker.close()


def test_a_gpu_runs_zygote_imports_the_compile_stack_short_of_inductor_and_forks(tmp_path):
    """On a GPU host the zygote of a run with compile baselines imports Dynamo and AOTAutograd but not
    torch._inductor.compile_fx (whose Triton backend starts a CUDA driver thread there, which no fork may carry);
    such a zygote is ready and forks its workers."""
    from harness.run import workerproc as procs
    from harness.run import zygote as zy
    from harness.run.zygote import ForkedProcess
    code = ("import sys; from harness.worker import compilewarm; compilewarm.preload('cuda'); "
            "print('torch._dynamo' in sys.modules, 'torch._functorch.aot_autograd' in sys.modules, "
            "'torch._inductor.compile_fx' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.stdout.split() == ["True", "True", "False"], done.stderr[-2000:]
    env = _env(tmp_path, KB_COMPILE_WARM="1", KB_DEVICE="cuda:0")     # no GPU here: a build worker touches none
    zygotes = _zygotes()
    worker = procs.Worker("build", env, tmp_path / "worker.log")
    try:
        assert isinstance(worker.proc, ForkedProcess), (tmp_path / "worker.log").read_text()[-2000:]
        assert zygotes.live[zy.startup_key(env)].preload == "cuda" and zygotes.preload
    finally:
        worker.kill()
        worker.close()


def test_a_zygote_that_cannot_import_the_compile_stack_gives_way_to_one_that_does_not(tmp_path, monkeypatch):
    """A run with compile baselines forks its pair workers from a zygote that also imported the compile stack; where
    that zygote is not ready (e.g. an import initialized CUDA), that worker starts on its own and the next zygote
    of the key imports torch alone, without counting as a failure of the key."""
    from harness.run import workerproc as procs
    from harness.run import zygote as zy
    from harness.run.zygote import ForkedProcess
    zygotes = _zygotes()
    zygotes.close()
    real = zy.Zygote.spawn

    def spawn(self, *args):
        if self.preload:
            raise zy.ZygoteError("CUDA was initialized before the fork")
        return real(self, *args)

    monkeypatch.setattr(zy.Zygote, "spawn", spawn)
    monkeypatch.setattr(zygotes, "preload", True)
    env = _env(tmp_path, KB_COMPILE_WARM="1")
    assert zy.preloads(env) == "cpu" and zy.preloads({**env, "KB_DEVICE": "cuda:0"}) == "cuda"
    assert zy.preloads(_env(tmp_path)) is None
    workers = []
    try:
        for name in ("first", "second"):
            workers.append(procs.Worker("build", env, tmp_path / f"{name}.log"))
        assert not isinstance(workers[0].proc, ForkedProcess) and isinstance(workers[1].proc, ForkedProcess)
        assert not zygotes.preload and not zygotes.failures.get(zy.startup_key(env))
        assert [z.preload for z in zygotes.live.values()] == [None]
    finally:
        for worker in workers:
            worker.kill()
            worker.close()
        zygotes.close()


def test_kb_zygote_0_starts_every_worker_on_its_own(tmp_path, monkeypatch):
    from harness.run import workerproc as procs
    from harness.run.zygote import ForkedProcess
    monkeypatch.setenv("KB_ZYGOTE", "0")
    worker = procs.Worker("build", _env(tmp_path), tmp_path / "worker.log")
    try:
        assert not isinstance(worker.proc, ForkedProcess)
    finally:
        worker.kill()
        worker.close()


def test_a_zygote_that_would_share_writable_memory_with_its_workers_is_not_ready():
    """A shared writable mapping in the zygote would be one in every worker: a channel from a candidate to its
    reference. The zygote checks for one (and for a second thread, whose locks would stay held in every worker, and
    for CUDA initialized before the fork) before it says it is ready."""
    import subprocess
    code = ("import mmap, sys\n"
            "from harness.worker.zygote import _fork_fault\n"
            "clean = _fork_fault()\n"
            "shared = mmap.mmap(-1, 4096)\n"        # anonymous and MAP_SHARED, writable
            "print(repr(clean)); print(_fork_fault())\n"
            "shared.close()\n"
            "import threading\n"
            "stop = threading.Event(); t = threading.Thread(target=stop.wait, name='left-running'); t.start()\n"
            "print(_fork_fault()); stop.set(); t.join()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, check=True).stdout.splitlines()
    assert out[0] == "None"
    assert out[1].startswith("a shared writable mapping would be in every worker")
    assert out[2].startswith("2 threads were running at the fork") and "left-running" in out[2], out


def test_zygotes_are_kept_for_the_latest_startup_environments_only(tmp_path, monkeypatch):
    """A long-lived process (an agent loop on harness.api, a test session) whose workers come in many startup
    environments keeps MAX_LIVE zygotes, the most recently used; the others are ended."""
    from harness.run import workerproc as procs
    from harness.run import zygote as zy
    from harness.shared import containment
    monkeypatch.setattr(zy, "MAX_LIVE", 2)
    zygotes = _zygotes()
    zygotes.close()
    seen = []
    for lang in ("C", "C.UTF-8", "POSIX"):
        worker = procs.Worker("build", _env(tmp_path, LANG=lang), tmp_path / f"{lang}.log")
        worker.kill()
        worker.close()
        seen.append(zygotes.live[zy.startup_key(_env(tmp_path, LANG=lang))])
    assert len(zygotes.live) == 2 and seen[0] not in zygotes.live.values()
    assert seen[0].proc.returncode is not None and containment.stat(seen[0].proc.pid) is None
    assert all(z.proc.poll() is None for z in seen[1:])


def test_shutdown_while_workers_are_being_started(tmp_path):
    """The exit handler ends the zygotes while the spawner thread may be starting a worker (Ctrl-C or SIGTERM
    unwinding a run): no error, and a worker asked for afterwards starts on its own (None here)."""
    import threading
    from harness.run import workerproc as procs
    from harness.run.zygote import Zygotes
    from harness.shared import containment
    containment.setup_parent()
    zygotes, started, errors = Zygotes(), [], []

    def start_some() -> None:
        try:
            for _ in range(20):
                env = {**_env(tmp_path), containment.TAG_VAR: containment.new_tag(),
                       containment.PARENT_VAR: str(os.getpid())}
                cmd_r, cmd_w = os.pipe()
                res_r, res_w = os.pipe()
                fds = [cmd_r, res_w, procs.new_arena(), os.open(os.devnull, os.O_WRONLY)]
                forked = zygotes.spawn("build", env, procs.REPO_ROOT, fds)
                for fd in fds + [cmd_w, res_r]:
                    os.close(fd)                        # the worker reads the end of its command pipe and exits
                if forked is not None:
                    started.append(forked)
        except BaseException as exc:                    # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=start_some)
    thread.start()
    while not started and thread.is_alive():
        time.sleep(0.01)
    zygotes.shutdown()
    thread.join(60)
    assert not errors, errors
    assert started and len(started) < 20
    assert not zygotes.live
    assert zygotes.spawn("build", _env(tmp_path), procs.REPO_ROOT, []) is None
    for forked in started:
        assert forked.wait(30) is not None


@pytest.mark.skipif(os.geteuid() != 0 or not __import__("shutil").which("setpriv"),
                    reason="needs root and setpriv to run a harness and a reader without capabilities")
def test_a_candidate_cannot_reach_into_the_zygote(tmp_path):
    """A candidate holds no CAP_SYS_PTRACE (harness.worker.sandbox drops it): it must not trace the zygote or open
    its /proc/<pid> files (mem among them), which would let it write into every worker forked later, its
    reference's included. A harness and a reader of the same user, neither holding a capability: the zygote is
    closed to the reader, a worker is open to it as one started on its own is (what the parent reads of it)."""
    import subprocess
    code = ("import pathlib, subprocess, sys\n"
            "from harness.run import workerproc as procs\n"
            "env = procs.worker_env({'KB_DEVICE': 'cpu', 'CUDA_VISIBLE_DEVICES': '', 'KB_SANDBOX': 'off'})\n"
            "worker = procs.Worker('build', env, pathlib.Path(sys.argv[1]))\n"
            "zygote = next(iter(procs._spawner.zygotes.live.values()))\n"
            "read = lambda pid: subprocess.run(['head', '-c', '1', f'/proc/{pid}/environ'],\n"
            "                                  capture_output=True).returncode\n"
            "print(type(worker.proc).__name__, read(zygote.proc.pid), read(worker.proc.pid))\n"
            "worker.kill(); worker.close()\n")
    out = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-c", code,
                          str(tmp_path / "worker.log")], capture_output=True, text=True, timeout=120,
                         cwd=REPO)
    assert out.stdout.split() == ["ForkedProcess", "1", "0"], (out.stdout, out.stderr[-2000:])
