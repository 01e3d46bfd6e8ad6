"""The zygote: one process that imports torch once and forks every worker from there, so that a worker starts in
milliseconds instead of the 1.4-3 CPU-seconds of its own `import torch` (harness.run.zygote is the parent's side).

It runs `python -m harness.worker.zygote`, started by the parent with the environment every worker of its key
shares at exec (harness.run.zygote.startup_key: what the loader, the allocator and Python read at startup), its
own KB_WORKER_TAG and KB_PARENT_PID. It imports torch and the worker's own modules (with --compile-stack=cpu|cuda, a
run with torch.compile baselines, also the compile stack: harness.worker.compilewarm.preload), touches no GPU,
starts no thread and holds no secret. Before it says it is ready it checks that its workers would share no writable
memory (no shared writable mapping), that it runs one thread, and that they could use CUDA (a forked child asks
torch); otherwise `ready` is false and the
parent starts its workers on their own. Then it serves requests on one SOCK_SEQPACKET socket from the parent, one
at a time:

    request: JSON {"role", "env", "cwd"} with four descriptors (SCM_RIGHTS): the command pipe's read end, the
             result pipe's write end, the arena, and the log pipe's write end
    reply:   JSON {"pid": N} once the worker is ready, or {"error": "..."}

A worker is forked twice (zygote -> A -> W, A exits at once), so that W is re-parented to the parent, the nearest
subreaper above it: the parent waits for it, signals it and sweeps its tree as it does a worker it started itself.
Before W says it is ready it has its own session, its descriptors, working folder and environment (os.environ, and
its tag written into the environment block /proc/<pid>/environ shows: containment.retag), fresh caches and a fresh
numpy seed. It then waits until its parent is the harness, and runs harness.worker.__main__.main, which sets
PR_SET_PDEATHSIG and checks the parent as any worker does. The zygote replies only once A is reaped and W ready,
so the pid it gives is the parent's child already."""
from __future__ import annotations

import json
import os
import socket
import sys
import time

from harness.shared import containment
from harness.worker.arena import ARENA_VAR

SOCKET_FD_VAR = "KB_ZYGOTE_FD"
COMPILE_STACK_ARG = "--compile-stack"       # harness.run.zygote.COMPILE_STACK_ARG (=cpu|cuda)
PR_SET_DUMPABLE = 4
READY_TIMEOUT_S = 5.0


def main() -> None:
    containment.setup_worker()              # dies with the parent; a subreaper it must not be: unset below
    containment.prctl(containment.PR_SET_CHILD_SUBREAPER, 0)
    # Not dumpable: without CAP_SYS_PTRACE (which a confined candidate does not hold) no process may trace it or
    # open its /proc/<pid>/mem, so a candidate cannot write into the workers to come, its reference's included.
    containment.prctl(PR_SET_DUMPABLE, 0)
    sock = socket.socket(fileno=int(os.environ.pop(SOCKET_FD_VAR)))
    import torch  # noqa: F401 - what every role but the flusher imports before its job
    import harness.worker.__main__  # noqa: F401 - the worker's own modules
    stack = next((arg.split("=", 1)[1] for arg in sys.argv if arg.startswith(COMPILE_STACK_ARG + "=")), None)
    if stack:
        # A run with torch.compile baselines: what every reference would otherwise import in its warm-up, as far as
        # it starts no thread (harness.run.zygote.preloads); the cache folder is set in the worker, by its job.
        from harness.worker import compilewarm
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)     # imports and hashes only (each worker has its own env)
        # Inductor imports torch.utils.cpp_extension, which asks torch.cuda.is_available(): answered from NVML here,
        # not by initializing CUDA (which every fork would inherit as unusable); each worker's env is its own.
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        compilewarm.preload(stack)
    # Not torch.utils.cpp_extension: at import it asks torch.cuda.is_available(), which initializes the CUDA driver
    # and marks every later fork as unable to use CUDA; the candidate and build roles import it after the fork.
    sys.stdout.flush()
    sys.stderr.flush()
    fault = _fork_fault()
    sock.send(json.dumps({"ready": True} if fault is None else {"ready": False, "error": fault}).encode())
    if fault is not None:
        return
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
        except OSError:
            return
        if not data:                        # the parent closed its end
            return
        try:
            reply = spawn(json.loads(data), fds, sock)
        except Exception as exc:            # noqa: BLE001 - said to the parent, which starts that worker itself
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in fds:
                os.close(fd)
        try:
            sock.send(json.dumps(reply).encode())
        except OSError:
            return


def spawn(request: dict, fds: list[int], sock: socket.socket) -> dict:
    if len(fds) != 4:
        return {"error": f"{len(fds)} descriptors, not 4"}
    ready_r, ready_w = os.pipe()
    first = os.fork()
    if first == 0:                          # A: fork W and go, so that W's parent becomes the harness
        try:
            os.close(ready_r)
            if os.fork() == 0:
                _become_worker(request, fds, sock, ready_w)     # never returns
            os._exit(0)
        except BaseException:               # noqa: BLE001
            os._exit(1)
    os.close(ready_w)
    try:
        _, status = os.waitpid(first, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            return {"error": "the intermediate process failed"}
        answer = _read_line(ready_r, READY_TIMEOUT_S)
    finally:
        os.close(ready_r)
    if not answer.startswith(b"ready "):
        return {"error": answer.decode(errors="replace").strip() or "the worker ended before it was ready"}
    return {"pid": int(answer.split()[1])}


def _fork_fault() -> str | None:
    """Why workers forked from here would not be what a worker started on its own is, or None: memory they would
    share writably (a shared writable mapping: a channel between a candidate and its reference), or CUDA they could
    not use (something imported here initialized it; a child forked now asks torch)."""
    with open("/proc/self/maps") as maps:
        shared = [line.split(None, 5)[-1].strip() for line in maps if line.split()[1][1::2] == "ws"]
    if shared:
        return f"a shared writable mapping would be in every worker: {shared[0]}"
    threads = sorted(os.listdir("/proc/self/task"), key=int)
    if len(threads) > 1:        # a lock one of them held would stay held in every worker
        import threading
        python = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        names = ", ".join(_thread_name(tid) for tid in threads[1:])
        return (f"{len(threads)} threads were running at the fork (besides the main one: {names}; Python's: "
                f"{', '.join(python) or 'none'})")
    pid = os.fork()
    if pid == 0:
        try:
            import torch
            os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
        except BaseException:               # noqa: BLE001
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else ("CUDA was initialized before the fork" if code == 1 else f"probe exit {code}")


def _thread_name(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as comm:
            return comm.read().strip() or tid
    except OSError:
        return tid


def _read_line(fd: int, timeout: float) -> bytes:
    import select
    deadline = time.monotonic() + timeout
    out = b""
    while not out.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return out
        chunk = os.read(fd, 256)
        if not chunk:
            return out
        out += chunk
    return out


def _become_worker(request: dict, fds: list[int], sock: socket.socket, ready_w: int) -> None:
    """W: set up as the parent's Popen would have, say so, wait to be the parent's child, run the role."""
    try:
        cmd_fd, res_fd, arena_fd, log_fd = fds
        sock.close()
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.chdir(request["cwd"])
        env = {str(k): str(v) for k, v in request["env"].items()}
        os.environ.clear()
        os.environ.update(env)
        os.environ[ARENA_VAR] = str(arena_fd)     # its number here, not the parent's
        if not containment.retag(env.get(containment.TAG_VAR, "")):
            raise RuntimeError("could not write the worker's tag into its environment block")
        _retitle([sys.executable, "-m", "harness.worker", request["role"], str(cmd_fd), str(res_fd)])
        _fresh_caches()
        containment.prctl(PR_SET_DUMPABLE, 1)     # as a worker started on its own is (the parent reads its /proc)
        parent = int(env.get(containment.PARENT_VAR, "0") or 0)
        os.write(ready_w, f"ready {os.getpid()}\n".encode())
        os.close(ready_w)
    except BaseException as exc:            # noqa: BLE001 - the zygote tells the parent
        try:
            os.write(ready_w, f"{type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(1)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while os.getppid() != parent:           # A has exited; the kernel hands W to the nearest subreaper
        if time.monotonic() > deadline:
            os._exit(3)
        time.sleep(0.0005)
    sys.argv = ["harness.worker", request["role"], str(cmd_fd), str(res_fd)]
    from harness.worker.__main__ import main as worker_main
    worker_main(sys.argv[1:])               # ends with os._exit
    os._exit(0)


def _retitle(argv: list[str]) -> None:
    """The command line /proc/<pid>/cmdline (ps, top) shows: a worker's, as if it had been started on its own, in
    the zygote's argument area (started with room to spare: harness.run.zygote.ARGV_ROOM); left as it is where it
    does not fit."""
    import ctypes
    try:
        fields = containment.stat_fields(os.getpid())
        start, end = int(fields[45]), int(fields[46])     # fields 48 and 49 of proc(5): arg_start, arg_end
    except (ValueError, IndexError):
        return
    text = b"\0".join(a.encode() for a in argv) + b"\0"
    if len(text) <= end - start:
        ctypes.memmove(start, text + b"\0" * (end - start - len(text)), end - start)


def _fresh_caches() -> None:
    """What a process caches at startup or first use that must be the worker's own, not the zygote's: the temporary
    folder (the sandbox gives TMPDIR), the import system's directory listings, numpy's global seed."""
    import importlib
    import tempfile
    tempfile.tempdir = None
    importlib.invalidate_caches()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


if __name__ == "__main__":
    main()
