"""Nothing lost, nothing left behind: no worker or descendant outlives its run (even a SIGKILLed one), pause/resume
reach escaped descendants, memory caps end in `oom` records, logs stay bounded, Ctrl-C does not wait for builds,
lint shows progress."""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from conftest import proc_children as _children, proc_read as _read
from conftest import (FIXTURES, communicate_or_explain, default_sigint, json_records, PAIR_TIMEOUT_ARG, REPO, run_dirs,
                      skip_timing_if_box_loaded, verdict, write_config)

ORPHANS = FIXTURES / "orphans"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process containment is Linux-only")


# ---------------------------------------------------------------- looking at /proc

def _state(pid: int) -> str | None:
    data = _read(f"/proc/{pid}/stat")
    return data[data.rfind(b")") + 2:].split()[0].decode() if data else None


def _utime(pid: int) -> int:
    data = _read(f"/proc/{pid}/stat")
    return int(data[data.rfind(b")") + 2:].split()[11])


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")


def _pipe_bytes(pid: int, fd: int) -> int:
    """Bytes waiting in a pipe another process reads from (FIONREAD on its /proc fd link)."""
    try:
        ours = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(ours, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0
    finally:
        os.close(ours)


def _ours(run_tag: str) -> list[tuple[int, str]]:
    """Live processes of a run: its KB_WORKER_TAG in the environment, or (the double-forked grandchild that
    cleared its environment) in the command line."""
    needle = f"{run_tag}.".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        env = _read(f"/proc/{pid}/environ")
        cmd = _read(f"/proc/{pid}/cmdline")
        if (b"KB_WORKER_TAG=" + needle in env or b"kb-orphan-marker=" + needle in cmd) and _alive(pid):
            found.append((pid, cmd.replace(b"\0", b" ").decode(errors="replace")[:200]))
    return found


def _wait_none_left(run_tag: str, pids: list[int], seconds: float) -> list:
    deadline = time.monotonic() + seconds
    while True:
        left = _ours(run_tag) + [(p, "pid file") for p in pids if _alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _pidfiles(folder: Path, pattern: str = "kb-orphan-*.pid") -> dict[str, int]:
    return {p.name: int(p.read_text()) for p in folder.glob(pattern) if p.read_text().strip()}


def _start(tmp: Path, run_tag: str, *args: str, extra_env: dict[str, str] | None = None,
           **config) -> tuple[subprocess.Popen, Path]:
    pids = tmp / "pids"
    pids.mkdir(exist_ok=True)
    cfg = write_config(tmp, ORPHANS, cache_dir=tmp / "cache", **config)    # builds must run: a cache of its own
    # KB_SANDBOX=off: the process tree must hold where no sandbox can be applied, and the escapees write their pid
    # files to $TMPDIR, which a confined worker cannot (test_sandbox covers setsid grandchildren under confinement)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KB_RUN_TAG": run_tag, "TMPDIR": str(pids), "KB_SANDBOX": "off",
           "PYTHONFAULTHANDLER": "1", **(extra_env or {})}
    proc = subprocess.Popen([sys.executable, str(REPO / "run_eval.py"), "--config", str(cfg), *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)
    return proc, pids


def _tag() -> str:
    return f"kbtest{secrets.token_hex(4)}"


# ---------------------------------------------------------------- a whole run: no orphans, bounded logs

@pytest.fixture(scope="module")
def orphan_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("orphans")
    tag = _tag()
    proc, pids = _start(tmp, tag, "--json", "--problem", "*001*", "--timeout", PAIR_TIMEOUT_ARG, jobs=2)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    return tmp, tag, pids, json_records(out)


def test_run_leaves_no_descendant_behind(orphan_run):
    tmp, tag, pids, records = orphan_run
    assert {r: verdict(records[r]) for r in records} == {"setsid_sleeper": "ok", "double_fork": "ok",
                                                          "chatty": "ok"}
    escaped = _pidfiles(pids)
    # each escape ran twice: at import in the build worker and in the candidate worker
    assert {name.rsplit("-", 1)[0] for name in escaped} == {
        "kb-orphan-setsid-build", "kb-orphan-setsid-candidate", "kb-orphan-double-build", "kb-orphan-double-candidate"}
    left = _wait_none_left(tag, list(escaped.values()), 0.0)       # at once: the run itself cleaned up
    assert not left, f"left behind: {left}"


def test_logs_are_capped(orphan_run):
    from harness.run.workerproc import LOG_CAP_BYTES
    tmp, _, _, _ = orphan_run
    (run_dir,) = run_dirs(tmp)
    log = run_dir / "logs" / "level1__001_linear_relu__chatty.log"
    # (a log may open with the worker's own warnings, e.g. torch's "No CUDA runtime is found" in a build worker on
    # a GPU machine, where the build hides the GPU)
    build_logs = [p for p in (tmp / "cache" / "builds").glob("*/build.log") if b"kb-chatty" in p.read_bytes()[:4096]]
    assert len(build_logs) == 1
    for path in (log, build_logs[0]):
        data = path.read_bytes()
        assert len(data) <= LOG_CAP_BYTES + 4096, (path, len(data))       # 100 MiB were written
        assert b"kb-chatty-last-line" in data                               # the tail is kept ...
        assert b"kb-chatty-output" in data[:4096]                           # ... and the head
        assert b"bytes of output dropped here" in data


# ---------------------------------------------------------------- the parent SIGKILLed at the worst moment

@pytest.mark.parametrize("moment", ["candidate worker just started", "candidate's setsid grandchild running"])
def test_killed_parent_leaves_nothing(tmp_path, moment):
    """The candidate spins at import in its worker (after starting a setsid grandchild): a worker that missed its
    parent's death would spin forever. Spare workers off (the CPU path's default): the candidate worker starts when
    its job is sent, so its job waits in its pipe while it starts (a spare would have started beside the reference
    and be reading its pipe by then). That first moment is a worker that imports torch after its own exec
    (KB_ZYGOTE=0): one forked from the zygote reads its job within milliseconds (test_zygote covers its start)."""
    tag = _tag()
    exec_path = {"KB_ZYGOTE": "0"} if moment.startswith("candidate worker") else {}
    proc, pids = _start(tmp_path, tag, "--problem", "*004*", "--timeout", PAIR_TIMEOUT_ARG, spare_workers="off",
                        extra_env=exec_path)
    deadline = time.monotonic() + 300
    hit = None
    while hit is None and time.monotonic() < deadline and proc.poll() is None:
        if moment.startswith("candidate worker"):
            # the worst moment: its job is in its command pipe, and it is still starting (not yet reading it)
            for child in _children(proc.pid):
                argv = _read(f"/proc/{child}/cmdline").split(b"\0")
                if argv[2:4] == [b"harness.worker", b"candidate"] and _pipe_bytes(child, int(argv[4])) > 0:
                    hit = child
                    break
            else:
                time.sleep(0.0005)
        else:
            found = [p for name, p in _pidfiles(pids).items() if "-candidate-" in name]
            hit = found[0] if found else None
            time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)                  # the parent only, not its group
    proc.wait()
    assert hit is not None, "never reached the moment"
    left = _wait_none_left(tag, list(_pidfiles(pids).values()) + [hit], 10.0)
    assert not left, f"left behind after the parent died: {left}"


# ---------------------------------------------------------------- heap

def _thp_mode() -> str | None:
    """The kernel's transparent-huge-page mode ("always", "madvise") where glibc (>= 2.35) can ask for them; None
    where it cannot (no THP, mode "never", another libc or an older glibc)."""
    import platform
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        return None
    libc, version = platform.libc_ver()
    old = libc != "glibc" or tuple(int(x) for x in version.split(".")[:2]) < (2, 35)
    return None if mode == "never" or old else mode


@pytest.mark.skipif(_thp_mode() is None, reason="needs transparent huge pages (madvise) and glibc >= 2.35")
def test_a_workers_heap_sits_on_huge_pages():
    """Both sides' heaps on 2 MiB pages (glibc.malloc.hugetlb=1): on 4 KiB pages a CPU sample's time after the
    cache flush varied from process to process (README, CPU path)."""
    from harness.run import workerproc as procs
    code = ("b = bytearray(16 << 20)\n"
            "print([l.split()[1] for l in open('/proc/self/smaps_rollup') if l.startswith('AnonHugePages')][0])")
    run = lambda env: int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                         timeout=60, check=True).stdout)
    env = procs.worker_env({})
    assert run(env) >= 8 << 10, "a worker's 16 MiB heap block is not on huge pages"
    if _thp_mode() == "madvise":                       # (with THP `always` every heap is on them anyway)
        env.pop("GLIBC_TUNABLES")
        assert run(env) < 8 << 10, "the heap was on huge pages without the tunable: the test shows nothing here"


# ---------------------------------------------------------------- pause / resume

@pytest.mark.timing
def test_pause_of_a_worker_without_children_takes_under_a_millisecond(tmp_path):
    from harness.run import workerproc as procs
    env = procs.worker_env({"KB_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path), "KB_SANDBOX": "off"})
    worker = procs.Worker("build", env, tmp_path / "worker.log")
    try:
        time.sleep(0.5)
        costs = []
        for _ in range(200):                           # no children yet: the cheap path
            t0 = time.perf_counter()
            worker.pause()
            costs.append(time.perf_counter() - t0)
            worker.resume()
        skip_timing_if_box_loaded()
        assert statistics.median(costs) < 1e-3, f"pause() took {statistics.median(costs) * 1e6:.0f} us"
    finally:
        worker.kill()
        worker.close()


def test_pause_and_resume_reach_a_setsid_grandchild(tmp_path):
    from harness.run import workerproc as procs
    env = procs.worker_env({"KB_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path), "KB_SANDBOX": "off"})
    worker = procs.Worker("build", env, tmp_path / "worker.log")
    try:
        time.sleep(0.5)
        worker.send({"candidate_path": str(ORPHANS / "spin_child.py"),
                     "problem_path": str(ORPHANS / "problems" / "level1" / "001_linear_relu.py"),
                     "device_kind": "cpu", "seed": 0})
        pidfile = tmp_path / "kb-spin-child.pid"
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = int(pidfile.read_text())
        assert os.getsid(grandchild) != os.getsid(worker.proc.pid)   # out of the worker's session and group
        time.sleep(0.3)
        worker.pause()
        time.sleep(0.1)
        assert _state(worker.proc.pid) == "T" and _state(grandchild) == "T"
        before = _utime(grandchild), _utime(worker.proc.pid)
        time.sleep(0.5)
        assert (_utime(grandchild), _utime(worker.proc.pid)) == before     # no CPU time while paused
        worker.resume()
        time.sleep(0.5)
        assert _state(worker.proc.pid) in ("R", "S") and _state(grandchild) in ("R", "S")
        assert _utime(grandchild) > before[0]
        worker.pause()
        t0 = time.perf_counter()
        worker.kill()                                  # a paused worker and its grandchild die too
        assert time.perf_counter() - t0 < 5
        assert not _alive(grandchild) and not worker.alive()
    finally:
        worker.kill()
        worker.close()


def test_untagged_escapee_of_a_worker_is_killed(tmp_path):
    """A descendant that cleared its environment and escaped the worker's tree lands on the parent (a subreaper);
    closing the worker kills it."""
    from harness.run import workerproc as procs
    env = procs.worker_env({"KB_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path), "KB_SANDBOX": "off"})
    worker = procs.Worker("build", env, tmp_path / "worker.log")
    try:
        worker.send({"candidate_path": str(ORPHANS / "escape_untagged.py"),
                     "problem_path": str(ORPHANS / "problems" / "level1" / "001_linear_relu.py"),
                     "device_kind": "cpu", "seed": 0})
        assert worker.recv(time.monotonic() + 60)["kind"] == "built"
        pidfile = tmp_path / "kb-escapee.pid"      # the grandchild may write it and exec after the worker's reply
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
                pidfile.exists() and b"kb-escapee-marker" in _read(f"/proc/{pidfile.read_text() or 0}/cmdline")):
            time.sleep(0.02)
        escapee = int(pidfile.read_text())
        assert b"KB_WORKER_TAG" not in _read(f"/proc/{escapee}/environ") and _alive(escapee)
    finally:
        worker.close()
    deadline = time.monotonic() + 2
    while _alive(escapee) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(escapee)


# ---------------------------------------------------------------- memory

def test_a_reference_out_of_memory_is_the_harness_limit_not_the_candidates_oom(tmp_path):
    """The reference's own forward does not fit the memory cap: no candidate ran, so the pair is `skipped` with
    harness_oom (issue 29: the candidate is never blamed for the harness's memory), naming what it tried."""
    proc, _ = _start(tmp_path, _tag(), "--json", "--problem", "*003*", worker_memory_gb=1)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    record = json_records(out)["plain"]
    assert record["status"] == "skipped" and "harness_oom" in record["flags"], record["error"]
    assert "reference forward" in record["error"] and "allocate" in record["error"]
    assert "SIGKILL" not in record["error"]


def test_lint_out_of_memory_is_oom_and_shows_progress(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("worker_memory_gb: 1\n")
    done = subprocess.run([sys.executable, str(REPO / "run_eval.py"), "lint", "--config", str(config),
                           "--problems-dir", str(ORPHANS / "problems"), "--problem", "*00[13]*", "--device", "cpu",
                           "--output-dir", str(tmp_path), "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    results = {json.loads(l)["problem"].split("/")[1]: json.loads(l) for l in done.stdout.splitlines()}
    big = results["003_big_output"]
    assert big["verdict"] == "oom", big
    assert big["reasons"][0].startswith("oom: out of memory during forward") and "SIGKILL" not in big["reasons"][0]
    assert results["001_linear_relu"]["verdict"] == "ok"                  # a 1 GB cap leaves room for torch
    assert "lint" in done.stderr and "2/2" in done.stderr      # the progress bar (its ETA is gone once it is done)


@pytest.mark.parametrize("last_words, death, seen", [
    ("terminate called after throwing an instance of 'std::bad_alloc'", "os.abort()", "SIGABRT"),
    # numpy's OpenBLAS under a memory cap, seen on a 16-core machine with worker_memory_gb: 1
    ("OpenBLAS error: Memory allocation still failed after 10 retries, giving up.", "os._exit(1)", "code 1"),
])
def test_death_after_an_allocation_failure_is_oom(tmp_path, last_words, death, seen):
    """A worker that dies of a failed allocation it could not handle (a C++ abort, a native library's exit) is
    `oom`."""
    from harness.run import workerproc as procs
    script = tmp_path / "bad_alloc.py"
    script.write_text(f"import os, sys\nprint({last_words!r})\nsys.stdout.flush()\n{death}\n")
    worker = procs.Worker("build", procs.worker_env({"KB_DEVICE": "cpu"}), tmp_path / "worker.log")
    try:
        worker.send({"candidate_path": str(script), "problem_path": str(script), "device_kind": "cpu", "seed": 0})
        with pytest.raises(procs.WorkerExit) as exc:
            worker.recv(time.monotonic() + 60)
        assert exc.value.kind == "oom" and seen in exc.value.detail, exc.value.detail
    finally:
        worker.close()


# ---------------------------------------------------------------- Ctrl-C during the build

def test_ctrl_c_during_builds_ends_at_once(tmp_path):
    tag = _tag()
    proc, _ = _start(tmp_path, tag, "--problem", "*002*", jobs=2)
    deadline = time.monotonic() + 120
    builds: list[int] = []
    while time.monotonic() < deadline and len(builds) < 2:
        builds = [c for c in _children(proc.pid) if b"harness.worker\0build" in _read(f"/proc/{c}/cmdline")]
        time.sleep(0.05)
    assert len(builds) == 2, "two build workers never ran"
    time.sleep(3)                                      # both inside their 60 s import
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        communicate_or_explain(proc, 30)
    finally:
        proc.kill()
    elapsed = time.monotonic() - t0
    assert proc.returncode == 130
    assert elapsed < 5, f"Ctrl-C took {elapsed:.1f} s"
    left = _wait_none_left(tag, builds, 2.0)
    assert not left, f"left behind: {left}"
    assert not list((tmp_path / "cache" / "builds").glob("*/build.json"))   # nothing recorded as built


def test_a_worker_left_stopped_reads_its_exit_and_ends_at_once(tmp_path):
    """A worker left paused (the CPU path's candidate after its trials) is resumed by close(), so it reads the exit
    request and ends by itself, instead of waiting out close()'s 10 s to be killed."""
    from harness.run import workerproc as procs
    env = procs.worker_env({"KB_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path), "KB_SANDBOX": "off"})
    worker = procs.Worker("build", env, tmp_path / "worker.log")
    time.sleep(0.5)                                     # stopped while it imports torch, before its job
    worker.pause()
    started = time.monotonic()
    code = worker.close(wait_s=30)
    assert code == 0, f"exit code {code}: killed, not ended by its exit request"
    assert time.monotonic() - started < 25
