"""Workers forked from a zygote (harness.worker.zygote, which imports torch once) instead of each importing torch
after its own exec: a worker starts in milliseconds, not the 1.4-3 CPU-seconds of `import torch`.

What a worker gets is what harness.run.workerproc would have given it with subprocess.Popen: its own session, the
four descriptors, the working folder, the whole environment (os.environ, and its tag where /proc/<pid>/environ
shows it, so containment finds it and its descendants as before), and this process as its parent (the worker is
forked twice and re-parented here, this process being a subreaper), so that ForkedProcess waits for it as Popen would.

A zygote serves workers whose environment agrees with its own on everything read at startup (startup_key): the
loader's and the allocator's variables, Python's, numpy's OpenBLAS thread count, CUDA_HOME, PATH. Only the variables
read after the fork may differ (STARTED_LATER: the harness's KB_*, CUDA_VISIBLE_DEVICES, the thread counts torch
sets again in the worker, TMPDIR, a build's extension folder, jobs and architectures); another key gets a zygote of
its own (MAX_LIVE at once). A zygote can be started ahead of its first worker (Zygotes.prestart: the local executor's
pairs' zygote, beside the builds). A run with torch.compile baselines forks its pair workers from a zygote that also
imported the compile stack, all of it on the CPU and what starts no CUDA thread on a GPU host (preloads); where one
of those is not ready, the next imports torch alone. No zygote (the worker is started with Popen) under a launcher
(ncu), off Linux, where this process is not a subreaper, with KB_ZYGOTE=0, and after a zygote of that key failed
MAX_FAILURES times; each failure says why on stderr. The zygotes end when this process does (Zygotes.shutdown at
exit; PR_SET_PDEATHSIG and the guardian where it is killed)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness.shared import containment

ENABLE_VAR = "KB_ZYGOTE"
SOCKET_FD_VAR = "KB_ZYGOTE_FD"                  # harness.worker.zygote: its end of the request socket
STARTED_LATER = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "TMPDIR",                      # tempfile's cached folder is cleared in the worker
                 # read when an extension is built or loaded (torch.utils.cpp_extension, imported after the fork):
                 # a build worker's folder is its own, and as part of the key it made every build wait for a
                 # zygote of its own, started one after another (32 CUDA builds: 173 s against 90 exec'd)
                 "TORCH_EXTENSIONS_DIR", "MAX_JOBS", "TORCH_CUDA_ARCH_LIST")
MAX_LIVE = 4                                    # zygotes kept at once; the least recently used goes first
FIRST_TIMEOUT_S = 120.0                         # the zygote's imports, on a loaded machine
SPAWN_TIMEOUT_S = 20.0
MAX_FAILURES = 2
SHUTDOWN_WAIT_S = 5.0
ARGV_ROOM = "-" * 64        # the zygote's last argument: room for its workers' command lines (ps shows their roles)
COMPILE_STACK_VAR = "KB_COMPILE_WARM"   # "1" (a run with torch.compile baselines: harness.run.schedule
COMPILE_STACK_ARG = "--compile-stack"   # .compile_warm_env): its zygote imports the compile stack too (=cpu|cuda:
                                        # preloads), part of the key


class ZygoteError(Exception):
    pass


class ForkedProcess:
    """A worker the zygote forked, now this process's child: the part of subprocess.Popen's interface the harness
    uses (pid, returncode, poll, wait)."""

    def __init__(self, pid: int, args: list[str]):
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:       # reaped elsewhere: its code is lost (Popen says 0 then too)
                    self.returncode = 0
                else:
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return self.returncode


def startup_key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """What a worker's environment must share with its zygote's: every variable but those read after the fork, and
    whether its zygote imports the compile stack."""
    return tuple(sorted((k, v) for k, v in env.items()
                        if (not k.startswith("KB_") or k == COMPILE_STACK_VAR) and k not in STARTED_LATER))


def preloads(env: dict[str, str]) -> str | None:
    """What the zygote of env's workers imports of the compile stack beside torch (a run with compile baselines), as
    harness.worker.compilewarm.preload's `device`: "cpu" (its imports and torch_key) on the CPU; "cuda" on a GPU
    host, torch._dynamo's and AOTAutograd's imports only, most of the stack's import time: importing
    torch._inductor.compile_fx there loads Triton's NVIDIA backend, which leaves a CUDA driver thread running, and a
    zygote with a second thread is not ready (its workers would start on their own, each paying the import;
    docs/measurements.md). None: torch alone."""
    if env.get(COMPILE_STACK_VAR) != "1":
        return None
    return "cpu" if env.get("KB_DEVICE", "cpu") == "cpu" else "cuda"


class Zygote:
    """One zygote process (harness.worker.zygote), started with `env` less the harness's KB_* variables, and the
    socket to it."""

    def __init__(self, env: dict[str, str], cwd: str, preload: bool = True):
        self.tag = containment.new_tag()
        self.preload = preloads(env) if preload else None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        zenv = {k: v for k, v in env.items() if not k.startswith("KB_")}
        zenv.update({containment.TAG_VAR: self.tag, containment.PARENT_VAR: str(os.getpid()),
                     SOCKET_FD_VAR: str(theirs.fileno()), "PYTHONPATH": env.get("PYTHONPATH", "")})
        try:
            with containment.spawn_lock:
                preload = [f"{COMPILE_STACK_ARG}={self.preload}"] if self.preload else []
                self.proc = subprocess.Popen([sys.executable, "-m", "harness.worker.zygote", *preload, ARGV_ROOM],
                                             pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=zenv, cwd=cwd,
                                             start_new_session=True)
                containment.registry.add(self.proc.pid)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        st = containment.stat(self.proc.pid)
        self.since = st[4] if st else 0     # its start time: what close() may sweep started later
        self.sock = ours
        self.ready = False

    def spawn(self, role: str, env: dict[str, str], cwd: str, fds: list[int]) -> ForkedProcess:
        """A worker of `role`, registered with containment before anything can take it for a stray. The first
        waits for the zygote's imports, without holding containment's spawn lock (sweeps take it)."""
        request = json.dumps({"role": role, "env": env, "cwd": cwd}).encode()
        try:
            if not self.ready:
                self.sock.settimeout(FIRST_TIMEOUT_S)
                hello = json.loads(self.sock.recv(1 << 16) or b"{}")
                if hello.get("ready") is not True:
                    raise ZygoteError(hello.get("error") or "the zygote ended before it was ready")
                self.ready = True
            self.sock.settimeout(SPAWN_TIMEOUT_S)
            with containment.spawn_lock:
                socket.send_fds(self.sock, [request], fds)
                data = self.sock.recv(1 << 16)
                reply = json.loads(data) if data else {"error": "the zygote ended"}
                if "pid" in reply:
                    containment.registry.add(int(reply["pid"]))
        except (OSError, ValueError) as exc:
            raise ZygoteError(f"{type(exc).__name__}: {exc}") from None
        if "pid" not in reply:
            raise ZygoteError(str(reply.get("error")))
        return ForkedProcess(int(reply["pid"]), ["harness.worker", role])

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            containment.sweep(self.proc.pid if self.proc.returncode is None else None, self.proc.pid, self.tag,
                              self.since, timeout=2.0)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            containment.registry.discard(self.proc.pid)


class Zygotes:
    """This process's zygotes, one per startup key. spawn() is called from the one thread that starts workers
    (harness.run.workerproc's spawner: a zygote dies with the thread that started it, PR_SET_PDEATHSIG); close() and
    shutdown() may come from any thread."""

    def __init__(self) -> None:
        self.live: dict[tuple, Zygote] = {}
        self.failures: dict[tuple, int] = {}
        self.lock = threading.Lock()        # spawn() against close() and shutdown() from another thread
        self.shut = False
        self.preload = True                 # False once a zygote that imported the compile stack was not ready

    def enabled(self) -> bool:
        return (sys.platform.startswith("linux") and os.environ.get(ENABLE_VAR, "1") != "0"
                and hasattr(socket, "send_fds") and containment.is_subreaper())

    def prestart(self, env: dict[str, str], cwd: Path) -> None:
        """Start the zygote of env's key now (where there is none and none failed), so that it imports while the
        run does other work; the first spawn() of that key waits for what is left."""
        if not self.enabled():
            return
        with self.lock:
            key = startup_key(env)
            if self.shut or key in self.live or self.failures.get(key, 0) >= MAX_FAILURES:
                return
            try:
                self.live[key] = self._new(env, cwd)
            except OSError as exc:
                self.failures[key] = self.failures.get(key, 0) + 1
                print(f"kb-harness: a zygote could not be started ({exc}); workers start on their own",
                      file=sys.stderr, flush=True)

    def spawn(self, role: str, env: dict[str, str], cwd: Path, fds: list[int]) -> ForkedProcess | None:
        """A worker forked from the zygote of env's key, or None: start it with Popen (said on stderr)."""
        if not self.enabled():
            return None
        with self.lock:
            return None if self.shut else self._spawn(role, env, cwd, fds)

    def _spawn(self, role: str, env: dict[str, str], cwd: Path, fds: list[int]) -> ForkedProcess | None:
        key = startup_key(env)
        if self.failures.get(key, 0) >= MAX_FAILURES:
            return None
        zygote = self.live.pop(key, None)
        try:
            if zygote is None:
                zygote = self._new(env, cwd)
            self.live[key] = zygote                     # the most recently used last
            return zygote.spawn(role, env, str(cwd), fds)
        except (ZygoteError, OSError) as exc:
            if zygote is not None and zygote.preload:   # its next zygote imports torch alone: not counted
                self.preload = False
            else:
                self.failures[key] = self.failures.get(key, 0) + 1
            self.live.pop(key, None)
            if zygote is not None:
                zygote.close()
            print(f"kb-harness: a worker could not be forked from the zygote ({exc}); it starts on its own",
                  file=sys.stderr, flush=True)
            return None

    def _new(self, env: dict[str, str], cwd: Path) -> Zygote:
        """A zygote for env's key, the least recently used ones ended first where MAX_LIVE are alive."""
        while len(self.live) >= MAX_LIVE:
            self.live.pop(next(iter(self.live))).close()
        return Zygote(env, str(cwd), self.preload)

    def close(self) -> None:
        """End every zygote; the next worker starts a new one."""
        with self.lock:
            self._close_all()

    def shutdown(self) -> None:
        """At exit: start no other zygote or worker (a worker still asked for starts on its own) and end every
        zygote, unless a spawn holds them past SHUTDOWN_WAIT_S (then PR_SET_PDEATHSIG ends them with this process)."""
        self.shut = True
        if self.lock.acquire(timeout=SHUTDOWN_WAIT_S):
            try:
                self._close_all()
            finally:
                self.lock.release()

    def _close_all(self) -> None:
        for zygote in self.live.values():
            zygote.close()
        self.live.clear()
