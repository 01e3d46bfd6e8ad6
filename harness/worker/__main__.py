"""Entry point of every worker process: import torch, read the job from the command pipe (with the variables
that differ per job, such as the candidate's extension folder), confine the roles that run candidate code
(harness.worker.sandbox), run the role, exit hard.

Exiting with os._exit skips candidate atexit handlers and leftover threads: once the role has sent its
messages, nothing the candidate left behind can run or speak."""
import os
import sys

from harness.shared import containment
from harness.shared import messages as m
from harness.worker import sandbox
from harness.worker import common
from harness.worker.common import Conn, describe, tail_traceback


def main(argv: list[str]) -> None:
    # A worker outlives nothing: SIGKILL when the parent dies (checked against the PID the parent passed, in case it
    # died before the prctl); a subreaper, so that what it starts stays in its tree (harness.shared.containment).
    containment.setup_worker()
    containment.apply_memory_cap()      # RLIMIT_DATA; see containment.apply_memory_cap for why not RLIMIT_AS
    # Host allocation failures (MemoryError, torch's "DefaultCPUAllocator: can't allocate memory") are `oom` too;
    # the roles bind common.is_oom when they are imported below.
    common.is_oom = containment.is_memory_error
    # The reference's executor (harness.run.reference_executor) is a candidate worker in every way but its job: the same
    # imports, the same confinement, the same serving code, so that identical code times the same on both sides.
    role = "candidate" if argv[0] == "executor" else argv[0]
    cmd_fd, res_fd = channel_fd(int(argv[1]), os.O_RDONLY, 0), channel_fd(int(argv[2]), os.O_WRONLY, 1)
    conn = Conn(cmd_fd, res_fd)
    common.trace(f"{role} started")
    spare = common.hold_spare_cores()   # a spare imports off the timing cores, while a pair is timed there
    if role != "flusher":               # the flusher holds no torch (harness.worker.flusher)
        import torch  # noqa: F401 - before the job arrives: a spare worker pays for this while it waits
    if role in ("candidate", "build"):
        # and for this (it pulls in setuptools), which install_extension_hooks needs after the job: it reads no
        # variable the job sets at import (TORCH_EXTENSIONS_DIR, MAX_JOBS and TORCH_CUDA_ARCH_LIST are read when an
        # extension is built or loaded), and it touches no GPU
        import torch.utils.cpp_extension  # noqa: F401
    warm_compile = os.environ.pop("KB_COMPILE_WARM", None) == "1"      # (no other role keeps these)
    compile_cache = os.environ.pop("KB_COMPILE_CACHE", None)
    if role == "reference":
        # and the FLOP counter: torch.utils.flop_counter imports triton where it is installed, which had been part of
        # the derive that a candidate's first trial waits for (an H200's level 2: `budget -> flops` 0.50 s, 0.30 s
        # with this); no GPU touched
        from harness.worker import flops  # noqa: F401
        if warm_compile:
            from harness.worker import compilewarm    # the compile stack warmed in a thread while it waits for its job
            compilewarm.begin(os.environ.get("KB_DEVICE", "cpu"), compile_cache)
    common.trace(f"{role} imported")
    job = conn.recv()                   # nothing touches the GPU before this: a spare holds no CUDA context
    common.trace(f"{role} job")
    if spare:
        common.hold_slot_cores()
    os.environ.update({str(k): str(v) for k, v in (job.pop("env", None) or {}).items()})
    os.environ.setdefault("KB_DEVICE", job.get("device", "cpu"))
    if role == "reference":
        common.warm_profiler()          # the candidate role warms it after its confinement
        common.trace(f"{role} warm")
    try:
        if role in sandbox.ROLES:
            # Confined now that the job has said which folders are its own, before anything of the candidate (or
            # CUDA) runs; the first message to the parent says what was applied (`sandbox`).
            _report_with_first_message(conn, sandbox.confine_worker(role, job))
        if role == "build":
            from harness.worker.build import run
        elif role == "reference":
            from harness.worker.reference import run
        elif role == "candidate":
            from harness.worker.candidate import run
        elif role == "ceilings":
            from harness.worker.ceilings import run
        elif role == "lint":
            from harness.worker.lint import run
        elif role == "flusher":
            from harness.worker.flusher import run
        else:
            raise SystemExit(f"unknown worker role {role!r}")
        run(conn, job)
    except BaseException as exc:                       # noqa: BLE001 - anything left is a harness fault
        try:
            conn.reply(m.HarnessError(describe(exc), traceback=tail_traceback(exc)))
        except OSError:
            pass
    finally:
        sandbox.cleanup()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:                          # noqa: BLE001
                pass
        os._exit(0)


def channel_fd(fd: int, flags: int, which: int) -> int:
    """The pipe end the parent passed as `fd` (`which`: 0 the command pipe, 1 the result pipe). Under a launcher
    (containment.WRAPPED_VAR, which carries the two pipes' inodes: ncu, for `run_eval.py profile`) that did not hand
    its inherited descriptors on, or put something else at that number, the same pipe is opened again through the
    launcher's /proc/<pid>/fd/<fd> (the nearest ancestor below the harness holding that pipe there)."""
    wrapped = os.environ.get(containment.WRAPPED_VAR, "")
    if not wrapped:
        return fd
    try:
        inode = int(wrapped.split(":")[which])
    except (IndexError, ValueError):
        return fd
    if _inode(f"/proc/self/fd/{fd}") == inode:
        return fd
    harness = int(os.environ.get(containment.PARENT_VAR, "0") or 0)
    for pid in containment.ancestors(containment.WRAPPER_DEPTH):
        if pid == harness:
            break
        if _inode(f"/proc/{pid}/fd/{fd}") == inode:
            return os.open(f"/proc/{pid}/fd/{fd}", flags | os.O_CLOEXEC)
    return fd                                           # not found: the first read or write says so


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _report_with_first_message(conn: Conn, report: dict) -> None:
    """The sandbox's report rides on the worker's first message (`built`, `outputs`, `failed`, `harness_error`);
    a protection that could not be applied is also said in the log."""
    if report.get("mode") != "off" and (report.get("error") or not report.get("filesystem")):
        print(f"kb-harness: sandbox incomplete: {report.get('error')}", file=sys.stderr, flush=True)
    conn.with_next_reply(sandbox=report)


if __name__ == "__main__":
    main(sys.argv[1:])
