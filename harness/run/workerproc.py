"""Worker processes as the parent sees them: launched with a whitelisted environment and two private pipes,
read with deadlines, killed with every process they started (harness.shared.containment: process group, process tree,
tagged and re-parented descendants), their output drained into a log of bounded size."""
from __future__ import annotations

import atexit
import collections
import fcntl
import itertools
import os
import queue
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Iterable

from harness.core.untrusted import WriteError
from harness.shared import containment, cpugroup
from harness.shared import messages as m
from harness.shared.channel import (ChannelClosed, ChannelProtocolError, ChannelTimeout, LineReader, encode, write_all)
from harness.run.zygote import ForkedProcess, Zygotes

REPO_ROOT = Path(__file__).resolve().parents[2]

# Variables a worker inherits; everything else in the parent's environment stays behind.
ENV_WHITELIST = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                 "CC", "CXX", "NVCC", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                 "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME",
                 "KB_SANDBOX",      # harness.worker.sandbox's mode (auto, off, require), read by the worker it confines
                 "KB_TRACE")        # 1: workers log the stages of their jobs (harness.worker.common.trace)


# The same heap behaviour in every worker, whatever its history. glibc's mmap threshold is otherwise dynamic: it
# rises only once a process has freed a large mmapped block, so two processes running identical code could
# differ in whether each call's output pages are fresh (a page fault per 4 KiB, enough to put an A/A pair on the CPU
# far from 1.0) or reused from the heap. Fixed at glibc's ceiling (32 MiB), with no trimming of the heap below 256 MiB.
# And the heap on transparent huge pages where the kernel allows them (`madvise` or `always`; glibc >= 2.35, older
# ones ignore it): after the CPU path's cache flush, a sample's inputs on 4 KiB pages likely cost a page walk each,
# and how much varied from process to process, enough to read one side of A/A process pairs faster every time
# (docs/measurements.md).
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456:glibc.malloc.hugetlb=1"
# The CPU path's pair workers: no allocation of its own mmap (above the 32 MiB ceiling each call's output was fresh
# pages, a page fault per 4 KiB, which a candidate that kept one buffer across calls skipped: 1.7-1.9x on a 64 MiB
# output), and no trimming: every allocation comes from a heap that keeps what was freed, so each call's output
# reuses warm memory on both sides, as a caching allocator does on the GPU (docs/measurements.md).
CPU_PAIR_MALLOC_TUNABLES = ("glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776:"
                            "glibc.malloc.hugetlb=1")

# A worker's log keeps its first LOG_HEAD_BYTES and, once it passes LOG_CAP_BYTES, only its last
# LOG_CAP_BYTES / 2 beyond those (a line in between says how much was dropped): a candidate printing 100 MB
# leaves a log of at most LOG_CAP_BYTES.
LOG_CAP_BYTES = 8 << 20
LOG_HEAD_BYTES = 64 << 10
DEFAULT_MEMORY_FRACTION = 0.8       # worker_memory_gb unset: each worker may use 0.8 x this machine's RAM

_memory_gb: float | None = None


def set_worker_memory_gb(gb: float | None) -> None:
    """The config's worker_memory_gb (None: DEFAULT_MEMORY_FRACTION of MemTotal; 0: no cap), for every worker
    started from now on. Called once per run (pipeline, lint)."""
    global _memory_gb
    _memory_gb = gb


def memory_cap_bytes() -> int:
    if _memory_gb is None:
        total = containment.mem_total_bytes()
        return int(total * DEFAULT_MEMORY_FRACTION) if total else 0
    return max(0, int(_memory_gb * 1e9))


ARENA_VAR = "KB_ARENA_FD"         # harness.worker.arena: the worker's memfd for staged inputs (the CPU path)


def new_arena() -> int:
    """A worker's arena: an empty memfd whose size may grow but never shrink, and whose seals are final, so that
    the candidate cannot cut it under the stager (a write past a file's end is SIGBUS) or seal it against writes."""
    import fcntl
    fd = os.memfd_create("kb-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    return fd


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_WHITELIST if k in os.environ}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["KB_MEMORY_CAP_BYTES"] = str(memory_cap_bytes())    # applied by the worker (containment.apply_memory_cap)
    env["GLIBC_TUNABLES"] = MALLOC_TUNABLES
    # numpy's OpenBLAS (imported with torch) starts a thread per core at import, each with a buffer of its own: on
    # a 16-core machine that alone overran a 1 GB worker_memory_gb before any job arrived, and the sandbox binds
    # only the threads that exist when it is applied and those they start, so a pool started at `import torch`
    # would be threads candidate code could later run in. Slots pass the pair's cpu_threads instead.
    env["OPENBLAS_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def worker_argv(role: str, cmd_fd: int, res_fd: int) -> list[str]:
    """A worker's command line: `python -m harness.worker ROLE CMD_FD RES_FD` (the two pipe ends it inherits)."""
    return [sys.executable, "-m", "harness.worker", role, str(cmd_fd), str(res_fd)]


class _Spawner:
    """Every worker is started from one thread that lives as long as the process: PR_SET_PDEATHSIG fires when the
    *thread* that forked a process ends, so a worker (or a zygote) started from a build-pool or slot thread would be
    killed when that thread finishes. A worker is forked from a zygote (harness.run.zygote) where one serves its
    environment, else started with Popen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.zygotes = Zygotes()

    def start(self, role: str, env: dict[str, str], fds: list[int],
              wrapper: list[str] | None) -> subprocess.Popen | ForkedProcess:
        """`fds`: the command pipe's read end, the result pipe's write end, the arena, the log pipe's write end."""
        return self._on_thread(self._start, role, env, fds, wrapper).result()

    def prestart(self, env: dict[str, str]) -> None:
        """The zygote for workers of this environment, started now; not waited for."""
        self._on_thread(self.zygotes.prestart, env, REPO_ROOT)

    def _on_thread(self, fn: Callable[..., Any], *args: Any) -> Future:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="kb-spawner", daemon=True)
                self.thread.start()
        future: Future = Future()
        if threading.current_thread() is self.thread:
            _settle(future, fn, args)
        else:
            self.jobs.put((future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            _settle(*self.jobs.get())

    def _start(self, role: str, env: dict[str, str], fds: list[int],
               wrapper: list[str] | None) -> subprocess.Popen | ForkedProcess:
        forked = None if wrapper else self.zygotes.spawn(role, env, REPO_ROOT, fds)
        if forked is not None:
            return forked
        cmd_r, res_w, arena_fd, out_w = fds
        with containment.spawn_lock:                    # registered before any sweep can see it
            proc = subprocess.Popen(
                [*(wrapper or []), *worker_argv(role, cmd_r, res_w)], pass_fds=(cmd_r, res_w, arena_fd),
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, env=env, cwd=str(REPO_ROOT),
                start_new_session=True)
            containment.registry.add(proc.pid)
        return proc


def _settle(future: Future, fn: Callable[..., Any], args: tuple) -> None:
    try:
        future.set_result(fn(*args))
    except BaseException as exc:                        # noqa: BLE001 - handed to the caller
        future.set_exception(exc)


_spawner = _Spawner()
_live: "weakref.WeakSet[Worker]" = weakref.WeakSet()    # started and not yet closed (kill_all)
atexit.register(_spawner.zygotes.shutdown)  # a run that ends leaves no zygote behind (SIGKILL: PDEATHSIG, the guardian)


_unlogged: list[WriteError] = []    # logs that could not be written, since unlogged() was last asked


def unlogged() -> list[WriteError]:
    """The worker logs that could not be written (a full disk, a file size limit) since the last call: for the run
    to say, once each."""
    found = _unlogged[:]
    del _unlogged[:len(found)]
    return found


class LogSink:
    """One worker's stdout and stderr: a pipe the parent drains (the log pump thread, or flush()) into a file of
    bounded size. A pipe, not the file itself, because a child writing to fd 1/2 from C could not be capped."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd
        self.lock = threading.Lock()
        os.set_blocking(fd, False)
        try:
            fcntl.fcntl(fd, 1031, 1 << 20)              # F_SETPIPE_SZ: fewer wake-ups for a chatty worker
        except OSError:
            pass
        self.out = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.size = os.fstat(self.out).st_size
        self.marker_len = 0
        self.dropped = 0
        self.write_error: WriteError | None = None  # the log could not be written (a full disk, a file size
                                                    # limit): the pipe is still drained, what it held dropped

    def pump(self, budget: int = 8 << 20) -> bool:
        """Move what the pipe holds into the file (at most `budget` bytes); False once the pipe is closed."""
        with self.lock:
            while self.fd is not None and budget > 0:
                try:
                    data = os.read(self.fd, 1 << 20)
                except BlockingIOError:
                    return True
                except OSError:
                    data = b""
                if not data:
                    return False
                budget -= len(data)
                self._write(data)
            return self.fd is not None

    def _write(self, data: bytes) -> None:
        if self.write_error is not None:
            return
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.out, view)
                view = view[n:]
            self.size += len(data)
            if self.size > LOG_CAP_BYTES:
                self._compact()
        except OSError as exc:                          # a worker that cannot be logged still runs (log_tail says)
            self.write_error = WriteError(self.path, exc)
            _unlogged.append(self.write_error)

    def _compact(self) -> None:
        head_len = min(LOG_HEAD_BYTES, self.size)
        tail_len = LOG_CAP_BYTES // 2
        head = os.pread(self.out, head_len, 0)
        tail = os.pread(self.out, tail_len, self.size - tail_len)
        self.dropped += (self.size - tail_len) - (head_len + self.marker_len)
        marker = (f"\n[kb-harness: {self.dropped} bytes of output dropped here; a log keeps its first "
                  f"{LOG_HEAD_BYTES >> 10} KiB and last {tail_len >> 20} MiB]\n").encode()
        os.ftruncate(self.out, 0)
        data = memoryview(head + marker + tail)
        while data:
            n = os.write(self.out, data)
            data = data[n:]
        self.size = head_len + len(marker) + len(tail)
        self.marker_len = len(marker)

    def flush(self) -> None:
        """Whatever the worker wrote so far, into the file now (before reading its tail)."""
        self.pump(budget=LOG_CAP_BYTES)

    def finish(self) -> None:
        """The worker and its descendants are gone: drain the rest, stop watching, close the file."""
        self.pump(budget=4 * LOG_CAP_BYTES)
        _pump.remove(self)

    def close_fds(self) -> None:
        with self.lock:
            for fd in (self.fd, self.out):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self.fd = self.out = None


class _LogPump:
    """One thread draining every worker's output pipe into its log (epoll over all of them)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: collections.deque = collections.deque()
        self.selector: selectors.BaseSelector | None = None
        self.wake_r = self.wake_w = -1
        self.thread: threading.Thread | None = None

    def _send(self, op: str, sink: LogSink) -> None:
        with self.lock:
            if self.thread is None:
                self.selector = selectors.DefaultSelector()
                self.wake_r, self.wake_w = os.pipe()
                os.set_blocking(self.wake_r, False)
                os.set_blocking(self.wake_w, False)
                self.selector.register(self.wake_r, selectors.EVENT_READ, None)
                self.thread = threading.Thread(target=self._run, name="kb-log-pump", daemon=True)
                self.thread.start()
            self.pending.append((op, sink))
        try:
            os.write(self.wake_w, b"x")
        except BlockingIOError:
            pass

    def add(self, sink: LogSink) -> None:
        self._send("add", sink)

    def remove(self, sink: LogSink) -> None:
        if self.thread is None:
            sink.close_fds()
        else:
            self._send("remove", sink)

    def _run(self) -> None:
        assert self.selector is not None
        while True:
            for key, _ in self.selector.select():
                if key.data is None:
                    self._commands()
                elif not key.data.pump():
                    self._drop(key.data, close=False)

    def _commands(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            with self.lock:
                if not self.pending:
                    return
                op, sink = self.pending.popleft()
            if op == "add":
                if sink.fd is not None:
                    self.selector.register(sink.fd, selectors.EVENT_READ, sink)
            else:
                self._drop(sink, close=True)

    def _drop(self, sink: LogSink, close: bool) -> None:
        """Stop watching a sink's pipe (at EOF, or when its worker is closed); its fds close on `remove`."""
        try:
            self.selector.unregister(sink.fd)
        except (KeyError, ValueError, TypeError):
            pass
        if close:
            sink.close_fds()


_pump = _LogPump()


class WorkerExit(Exception):
    """The worker ended (or was ended) without the message the parent waited for."""

    def __init__(self, kind: str, returncode: int | None, detail: str):
        super().__init__(detail)
        self.kind = kind                    # "exited" | "timeout" | "protocol" | "oom" (an exit judged out of memory)
        self.returncode = returncode
        self.detail = detail


class Worker:
    """One worker process. Every process it starts belongs to it (harness.shared.containment): pause() and resume() stop
    and continue all of them, kill() and close() end all of them."""

    awake_s = 0.0                           # seconds it was not stopped, until it was last stopped (awake_seconds)
    _woke_at: float | None = None           # since when it runs; None while stopped
    wakes = 0                               # times it was woken (cores.PerSample: stopped in between or not)
    cpu_group: cpugroup.Group | None = None   # its processes' cgroup, which counts their CPU (harness.run.cores)

    def __init__(self, role: str, env: dict[str, str], log_path: Path, wrapper: list[str] | None = None):
        """`wrapper`: a launcher's command line the worker's own goes after (ncu, for `run_eval.py profile`); the
        launcher is then the process started here, the worker its child (containment.WRAPPED_VAR)."""
        containment.setup_parent()
        self.role = role
        self.wrapped = bool(wrapper)
        self.tag = containment.new_tag()
        env = {**env, containment.TAG_VAR: self.tag, containment.PARENT_VAR: str(os.getpid())}
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        if wrapper:                         # the worker finds its pipes by these if the launcher kept them back
            env[containment.WRAPPED_VAR] = f"{os.fstat(cmd_r).st_ino}:{os.fstat(res_w).st_ino}"
        out_r, out_w = os.pipe()
        self.arena_fd = new_arena()
        env[ARENA_VAR] = str(self.arena_fd)
        self.log_path = log_path
        self.started = time.monotonic()
        self.oom_kills_at_start = containment.oom_kills()
        self.killed = False                 # the harness ended it (kill(), timeout): its exit is no fault
        self._strays: set[int] = set()      # escaped descendants attributed to this worker (pause/resume cache)
        self._stopped: set[int] = set()
        self._woken: set[int] = set()       # what wake() continued: freeze() stops the same
        self._woke_at = time.monotonic()    # it runs from its start
        try:
            self.sink = LogSink(log_path, out_r)
        except BaseException:
            for fd in (cmd_r, cmd_w, res_r, res_w, out_r, out_w, self.arena_fd):
                os.close(fd)
            raise
        try:
            self.proc = _spawner.start(role, env, [cmd_r, res_w, self.arena_fd, out_w], wrapper)
        except BaseException:
            self.sink.close_fds()
            for fd in (cmd_r, cmd_w, res_r, res_w, out_w, self.arena_fd):
                os.close(fd)
            raise
        for fd in (cmd_r, res_w, out_w):
            os.close(fd)
        self.cpu_group = cpugroup.join(self.tag, self.proc.pid)     # before its job: all it starts is born there
        st = containment.stat(self.proc.pid)
        self.since = st[4] if st else 0    # its start time (clock ticks since boot): descendants start later
        _pump.add(self.sink)
        self.cmd_w = cmd_w
        self.reader = LineReader(res_r)
        self.token = secrets.token_hex(16)
        _live.add(self)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def arena_path(self) -> str:
        """Where the reference worker opens this worker's arena to stage its inputs (the parent's descriptor)."""
        return f"/proc/{os.getpid()}/fd/{self.arena_fd}"

    def move_log(self, path: Path) -> None:
        """Give a spare worker its job's log name (the open file follows the rename)."""
        target, n = path, 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.stem}.{n}{path.suffix}")
        try:
            os.replace(self.log_path, target)
            self.log_path = target
            self.sink.path = target
        except OSError:
            pass

    def send(self, message: dict[str, Any]) -> None:
        try:
            write_all(self.cmd_w, encode({"token": self.token, **message}))
        except (BrokenPipeError, OSError):
            pass                                        # the worker is gone; recv() will say how

    def recv(self, deadline: float) -> dict[str, Any]:
        """The next message carrying our token. Raises WorkerExit on death, timeout or garbage."""
        try:
            message = self.reader.read(deadline)
        except ChannelTimeout:
            self.kill()
            raise WorkerExit("timeout", None, "no answer before the timeout") from None
        except ChannelClosed:
            code = self.wait(5.0)
            raise WorkerExit(*self.death(code)) from None
        except ChannelProtocolError as exc:
            self.kill()
            raise WorkerExit("protocol", None, f"sent {exc} on the result channel") from None
        if message.pop("token", None) != self.token:
            self.kill()
            raise WorkerExit("protocol", None, "sent a message without the harness's token (a forged record?)")
        return message

    def death(self, code: int | None) -> tuple[str, int | None, str]:
        """(kind, code, detail) for a worker that ended on its own. Out of memory when (1) it died of a SIGKILL the
        harness did not send and the kernel's OOM-kill count (/proc/vmstat oom_kill, host-wide) rose while it
        lived, or (2) the end of its log names an allocation failure (MemoryError, std::bad_alloc, "can't allocate
        memory", "out of memory"): what a process under the RLIMIT_DATA cap dies of when it cannot handle it."""
        text = describe_exit(code)
        if code is None or self.killed:
            return "exited", code, text
        before, now = self.oom_kills_at_start, containment.oom_kills()
        if code == -signal.SIGKILL and before is not None and now is not None and now > before:
            return "oom", code, f"out of memory: {text} (the kernel's OOM killer ran while it lived)"
        if containment.log_says_oom(self.log_tail(3000)):
            return "oom", code, f"out of memory: {text} after an allocation failure (see its log)"
        return "exited", code, text

    def wait(self, timeout: float) -> int | None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None:
            containment.registry.discard(self.proc.pid)
        return code

    def pause(self) -> None:
        """Stop every process of this worker with SIGSTOP (while the other side is timed): its process group, its
        process tree and any escaped descendant already attributed to it. No /proc scan: a few file reads when it
        has no children."""
        if self.proc.returncode is not None:
            return
        self._stopped = containment.signal_tree(self.proc.pid, self.proc.pid, self.tag, signal.SIGSTOP,
                                                self._strays)
        self._asleep()

    def resume(self) -> None:
        """SIGCONT to everything pause() stopped and everything of this worker found now."""
        if self.proc.returncode is not None:
            return
        self._awake()
        found = containment.signal_tree(self.proc.pid, self.proc.pid, self.tag, signal.SIGCONT, self._strays)
        for pid in self._stopped - found:
            try:
                os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        self._stopped = set()

    def wake(self) -> None:
        """SIGCONT to what pause() stopped, and nothing else: no /proc scan (a stopped process starts nothing), so
        that waking a side inside a timed bracket costs a few system calls on both sides."""
        self._woken = self._stopped
        self._awake()
        self._signal_known(self._woken, signal.SIGCONT)
        self._stopped = set()

    def freeze(self) -> None:
        """SIGSTOP to everything wake() woke (its process group, the processes of its tree outside the group, the
        escaped descendants already known) and nothing else: a few system calls, so that the parent's clock around
        a staged call can end after the stop (work left running past the reply is then inside the clock); pause()
        then stops whatever else belongs to it."""
        self._signal_known(self._woken | self._strays, signal.SIGSTOP)
        self._asleep()

    def awake_seconds(self) -> float:
        """Seconds it was not stopped so far (the cores it used: harness.run.cores)."""
        return self.awake_s + (time.monotonic() - self._woke_at if self._woke_at is not None else 0.0)

    def _awake(self) -> None:
        if self._woke_at is None:
            self._woke_at = time.monotonic()
            self.wakes += 1

    def _asleep(self) -> None:
        if self._woke_at is not None:
            self.awake_s += time.monotonic() - self._woke_at
            self._woke_at = None

    def _signal_known(self, pids: set[int], sig: int) -> None:
        if self.proc.returncode is not None:
            return
        for pid in pids | {-self.proc.pid}:                 # -pid: its process group
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self) -> None:
        """SIGKILL to every process of this worker (containment.sweep: group, tree, tagged, strays), reap it."""
        self.killed = True
        root = self.proc.pid if self.proc.returncode is None else None   # a reaped pid may be someone else's
        containment.sweep(root, self.proc.pid, self.tag, self.since)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.returncode is not None:
            containment.registry.discard(self.proc.pid)

    def close(self, wait_s: float = 10.0) -> int | None:
        """Tell the worker to stop, give it `wait_s` (a launcher such as ncu writes its report after the worker
        ends), then make sure every process of it is gone. It is resumed first: a worker left stopped (pause, as the
        CPU path's candidate after its trials) could not read the exit request, and waited out `wait_s` to be
        killed. Its descendants are killed before it is told: while it lives they are in its tree (a launcher's
        worker aside: the worker is then the launcher's descendant)."""
        if not self.wrapped and self.alive():
            containment.end_descendants(self.proc.pid, self.proc.pid)
        self.resume()
        self.send(m.wire(m.ExitRequest()))
        code = self.wait(wait_s)
        self.kill()
        if self.cpu_group is not None:
            self.cpu_group.remove()
        for fd in (self.cmd_w, self.reader.fd, self.arena_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.sink.finish()
        _live.discard(self)
        return code

    def log_tail(self, limit: int = 2000) -> str:
        """The end of the worker's log; where the log could not be written, a last line saying so."""
        self.sink.flush()
        failed = self.sink.write_error
        note = f"\n[kb-harness: {failed}; this worker's output after that was dropped]" if failed else ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                return f.read().decode(errors="replace") + note
        except OSError:
            return note.lstrip()


def prestart(env: dict[str, str]) -> None:
    """Start importing, in the background, what workers of this environment import (their zygote), so that the
    first of them starts without waiting the whole import; nothing where workers are not forked."""
    containment.setup_parent()          # a subreaper first: the zygote's workers are re-parented to this process
    _spawner.prestart(env)


def kill_all() -> None:
    """Kill every worker this process started and has not closed, with all their processes (an interrupted run:
    its slot threads then find their workers gone at once)."""
    for worker in list(_live):
        worker.kill()


def same_role_again(role: str) -> tuple[str, ...]:
    """SpareWorkers' default foresight: after a job of `role`, another of that role may come."""
    return (role,)


class SpareWorkers:
    """Workers started before they are needed, one per role. A new worker spends its first seconds importing
    torch (no GPU work yet); a spare does that while the job before it runs, so the next job starts at once.
    Every job still gets a process of its own that no earlier job has touched. `quiet`: the spares import on
    cores no timed thread uses (KB_SPARE_CPUS, harness.worker.common.hold_spare_cores) and go on while a side is
    timed; otherwise they are stopped then (pause), and a pair whose untimed parts are shorter than an import
    waits for the rest of it at its reference's start (seconds of a problem's setup).

    `upcoming(role)`: after a job of `role` is handed out, the roles whose next job is sure to come (the caller's
    foresight, e.g. harness.run.schedule.Outlook); a spare is started for each that has none. The default
    (same_role_again) starts one of the same role after every take, whether or not another job comes."""

    _serial = itertools.count()

    def __init__(self, env: dict[str, str], log_dir: Path, tag: str, enabled: bool,
                 upcoming: Callable[[str], Iterable[str]] = same_role_again):
        self.env, self.log_dir, self.tag, self.enabled = env, log_dir, tag, enabled
        self.quiet = bool(env.get("KB_SPARE_CPUS"))
        self.upcoming = upcoming
        self.spares: dict[str, Worker] = {}
        self._paused: set[Worker] = set()

    def take(self, role: str, log_path: Path) -> Worker:
        worker = self.spares.pop(role, None)
        if worker in self._paused:                      # a pair's timing ended without release()
            self._paused.discard(worker)
            worker.resume()
        if worker is not None and worker.alive():
            worker.move_log(log_path)
        else:
            if worker is not None:
                self._discard(worker)
            worker = Worker(role, self.env, log_path)
        self.prime(self.upcoming(role))
        return worker

    def prime(self, roles: Iterable[str]) -> None:
        """A spare started now for each of `roles` that has none (where spares are on): after a take, the roles
        `upcoming` foresees; at a slot's start, its first problem's, which then import (and a reference warms the
        compile stack) while the slot measures its GPU's ceilings."""
        if not self.enabled:
            return
        for role in roles:
            if role not in self.spares:
                spare_log = self.log_dir / f"spare-{self.tag}-{role}-{next(self._serial)}.log"
                self.spares[role] = Worker(role, self.env, spare_log)

    def pause(self) -> None:
        """SIGSTOP the spares while a side is timed: a spare importing torch would compete with the timed process
        for the host (on a machine of few cores it slowed the reference's blocks during a pair so much that an
        honest pair read `interference`). They go on importing when the timing stops (resume). Called at every switch
        of the timed side: only a spare started since the last call is signalled. Quiet spares go on."""
        if self.quiet:
            return
        for worker in self.spares.values():
            if worker not in self._paused:
                worker.pause()
                self._paused.add(worker)

    def resume(self) -> None:
        for worker in self._paused:
            worker.resume()
        self._paused.clear()

    def close(self) -> None:
        for worker in self.spares.values():
            self._discard(worker)
        self.spares.clear()
        self._paused.clear()

    @staticmethod
    def _discard(worker: Worker) -> None:
        worker.kill()                                   # a spare never got a job: nothing to wait for
        worker.close()
        try:
            if worker.log_path.stat().st_size == 0:
                worker.log_path.unlink()
        except OSError:
            pass


def describe_exit(code: int | None) -> str:
    if code is None:
        return "worker did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker killed by {name}"
    return f"worker exited with code {code} before reporting"
