"""Containment: no process a worker starts outlives it, and nothing outlives the parent.

Linux only (/proc, prctl); every piece degrades to a no-op elsewhere. Four layers:

* Each worker carries a marker in its environment, KB_WORKER_TAG=<run tag>.<worker tag>, which every descendant
  inherits (the run tag is KB_RUN_TAG from the parent's environment when set, else random), and the parent's PID
  (KB_PARENT_PID). A worker sets PR_SET_PDEATHSIG=SIGKILL first thing and then checks that its parent is still
  that PID (the parent may have died before the prctl); it is also a child subreaper (PR_SET_CHILD_SUBREAPER), so a
  descendant that double-forks is re-parented to the worker and stays in its process tree.
* The parent is a child subreaper too: whatever escapes a worker that died first lands on the parent.
* `sweep()` (Worker.kill) ends a worker's processes: its process group, its process tree (walked through
  /proc/<pid>/task/<tid>/children), every process carrying its tag (/proc/<pid>/environ), and untagged strays
  re-parented to the parent (direct children in another session than the parent's, started after the worker,
  not started by the parent itself); frozen with SIGSTOP first, then SIGKILL, repeated until a scan finds none;
  zombies re-parented to the parent are reaped.
* A guardian process (`python -m harness.shared.containment guard RUN_TAG PID`, its own session) holds a pipe from the
  parent; when the parent dies, even by SIGKILL, the pipe closes and the guardian kills every process carrying the
  run's tag, then exits.

What still escapes: a descendant that clears its environment, leaves the worker's tree (the worker dropped its
subreaper flag or died) and whose parent is then SIGKILLed before it sweeps; and anything that changes user.

`signal_tree()` (Worker.pause/resume) is the cheap walk: killpg, then the tree through the children files and the
strays already attributed to the worker; no full /proc scan, a few file reads for a worker without children.
"""
from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TAG_VAR = "KB_WORKER_TAG"
PARENT_VAR = "KB_PARENT_PID"
WRAPPED_VAR = "KB_PARENT_WRAPPED"   # set: a launcher (ncu, for `run_eval.py profile`) stands between the two; its
                                    # value: the inodes of the worker's two pipes ("CMD:RES", harness.worker)
WRAPPER_DEPTH = 16                  # how many ancestors up the parent may be found then
RUN_TAG_VAR = "KB_RUN_TAG"

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

RUN_TAG = re.sub(r"[^A-Za-z0-9_-]", "", os.environ.get(RUN_TAG_VAR, ""))[:40] or secrets.token_hex(6)

_libc = None


def _lib():
    """This process's C library (ctypes), loaded once."""
    global _libc
    import ctypes
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def prctl(option: int, value: int) -> bool:
    try:
        import ctypes
        return _lib().prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                            ctypes.c_ulong(0)) == 0
    except (OSError, AttributeError):
        return False


def new_tag() -> str:
    return f"{RUN_TAG}.{secrets.token_hex(6)}"


# ---------------------------------------------------------------- reading /proc

def _read(path: str, limit: int = 4096) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def stat_fields(pid: int) -> list[bytes]:
    """/proc/<pid>/stat after the command name: proc(5)'s field N is at index N - 3 ([] when the process is gone)."""
    data = _read(f"/proc/{pid}/stat")
    return data[data.rfind(b")") + 2:].split() if data else []


def stat(pid: int) -> tuple[str, int, int, int, int] | None:
    """(state, ppid, pgid, sid, starttime in clock ticks since boot), or None when the process is gone."""
    fields = stat_fields(pid)
    if not fields:
        return None
    try:
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def environ_tag(pid: int) -> str | None:
    """The KB_WORKER_TAG a process was started with (None: none, or not readable)."""
    data = _read(f"/proc/{pid}/environ", 1 << 20)
    if not data:
        return None
    key = TAG_VAR.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode(errors="replace")
    return None


HAVE_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def children(pid: int) -> list[int]:
    """Direct children of a process (every thread's children file)."""
    if not HAVE_CHILDREN_FILES:
        return [p for p, st in _all_stats().items() if st[1] == pid]
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/children", 1 << 16)
        if data:
            out.extend(int(x) for x in data.split())
    return out


def _all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _all_stats() -> dict[int, tuple[str, int, int, int, int]]:
    out = {}
    for pid in _all_pids():
        st = stat(pid)
        if st is not None:
            out[pid] = st
    return out


def tree(roots: list[int], skip: set[int] = frozenset()) -> list[int]:
    """The roots and every descendant, breadth first."""
    seen: set[int] = set()
    order: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen or pid in skip:
            continue
        seen.add(pid)
        order.append(pid)
        todo.extend(children(pid))
    return order


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- the parent's side

class Registry:
    """Processes the parent started itself (workers, the guardian): never strays, never reaped here."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.own: set[int] = set()

    def add(self, pid: int) -> None:
        with self.lock:
            self.own.add(pid)

    def discard(self, pid: int) -> None:
        with self.lock:
            self.own.discard(pid)

    def snapshot(self) -> set[int]:
        with self.lock:
            return set(self.own)


registry = Registry()
# Held while the parent starts a process and registers it, and while it looks for strays: a worker being started
# (a direct child in its own session, not yet registered) must never look like a stray to another thread's sweep.
spawn_lock = threading.Lock()
_setup_lock = threading.Lock()
_guardian: subprocess.Popen | None = None
_guardian_pipe: int | None = None
_parent_ready = False


def setup_parent() -> None:
    """Once per process, before the first worker: become a subreaper and start the guardian."""
    global _guardian, _guardian_pipe, _parent_ready
    with _setup_lock:
        if _parent_ready:
            return
        _parent_ready = True
        if not sys.platform.startswith("linux"):
            return
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        read_end, write_end = os.pipe()
        try:
            with spawn_lock:
                _guardian = subprocess.Popen(
                    [sys.executable, "-m", "harness.shared.containment", "guard", RUN_TAG, str(os.getpid())],
                    stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                    cwd=str(Path(__file__).resolve().parents[2]),
                    env={k: v for k, v in os.environ.items() if k not in (TAG_VAR, RUN_TAG_VAR)})
                registry.add(_guardian.pid)
        except OSError:
            os.close(write_end)
            return
        finally:
            os.close(read_end)
        _guardian_pipe = write_end                     # closes when this process ends, however it ends


def _strays(since: int, my_sid: int, own: set[int]) -> list[int]:
    """Direct children of this process that it did not start: descendants of dead workers re-parented to it (a
    subreaper). Untagged ones count only when started after `since` and outside this process's session (the
    parent's own subprocess.run children share its session)."""
    me = os.getpid()
    out = []
    for pid in children(me):
        if pid in own:
            continue
        st = stat(pid)
        if st is None or st[3] == my_sid or st[4] < since:
            continue
        out.append(pid)
    return out


def stop_tree(root: int) -> set[int]:
    """SIGSTOP every descendant of `root` (not `root`), each one the moment its parent's list of children is read,
    and every child of a process read only after that process was stopped; walked again until a walk finds no one
    new. A process that forks a successor and exits, over and over, is caught within a few microseconds of its list
    being read, not after a walk of the whole tree (the fork chain that outran tree() then a signal to each; an
    exiting one's children go to `root`, a subreaper, read again by the next walk). Returns the pids stopped."""
    stopped: set[int] = set()
    while True:
        new, seen, todo = False, set(), [root]
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            kids = children(pid)
            for kid in kids:
                if kid not in stopped:
                    _signal(kid, signal.SIGSTOP)
                    stopped.add(kid)
                    new = True
            todo.extend(kids)
        if not new:
            return stopped


def signal_tree(root: int, pgid: int, tag: str, sig: int, known: set[int]) -> set[int]:
    """Send `sig` to everything of one worker: its group, its tree, and strays of the parent carrying its tag (and
    their trees). `known` holds the strays already found to be this worker's (their environment is read once);
    returns the pids signalled one by one."""
    _signal_group(pgid, sig)
    if sig == signal.SIGSTOP:
        signalled = stop_tree(root)
    else:
        signalled = set(tree([root])[1:])
        for pid in signalled:
            _signal(pid, sig)
    own = registry.snapshot()
    for pid in children(os.getpid()):
        if pid in own or pid == root:
            continue
        if pid not in known:
            if environ_tag(pid) == tag:
                known.add(pid)
            else:
                continue
        for member in tree([pid]):
            _signal(member, sig)
            signalled.add(member)
    return signalled


def end_descendants(root: int, pgid: int) -> int:
    """Kill every process of the live worker `root` but the worker itself; returns how many were signalled. Its
    process group `pgid` is stopped first, all at once (killpg: a fork in flight is stopped too), then its tree
    (stop_tree: a chain of forks in groups of their own too), then all of them are killed, and the worker is
    continued. While it lives its descendants cannot leave its tree (harness.worker.treelock), which they can once
    it is gone, re-parented to this process: so a worker's processes are ended here, before it is told to exit.
    A member of its group outside its tree (an unconfined worker's) stays stopped until the sweep that follows."""
    _signal_group(pgid, signal.SIGSTOP)
    try:
        found = stop_tree(root)
        for pid in found:
            _signal(pid, signal.SIGKILL)
        return len(found)
    finally:
        _signal(root, signal.SIGCONT)


def sweep(root: int | None, pgid: int, tag: str, since: int, timeout: float = 5.0) -> int:
    """Kill every process of one worker (see the module docstring); returns how many processes it signalled. `root` is the
    worker's pid while it is not reaped (None after: the number may be reused); it is killed, not reaped (its
    Popen does that). The group is signalled by killpg only while the root holds its number."""
    me, my_sid = os.getpid(), os.getsid(0)
    deadline = time.monotonic() + timeout
    killed: dict[int, int] = {}                     # pid -> start time of each process signalled so far
    while True:
        with spawn_lock:
            own = registry.snapshot() - {root}
            strays = _strays(since, my_sid, own)
        skip = {me} | own
        members = set(tree([root], skip)) if root is not None else set()
        stats = _all_stats()
        for pid, st in stats.items():                  # tagged anywhere, or left in the worker's group
            if pid in members or pid in skip or st[4] < since or st[0] in "ZX":
                continue
            if st[2] == pgid or environ_tag(pid) == tag:
                members.add(pid)
        members.update(strays)
        members = set(tree(list(members), skip))
        alive = [p for p in members if (stats.get(p) or stat(p) or ("Z",))[0] not in "ZX"]
        for pid in alive:                             # freeze first: nothing forks while we kill
            _signal(pid, signal.SIGSTOP)
        for pid in tree(alive, skip):                  # including anything forked before the freeze
            _signal(pid, signal.SIGKILL)
            st = stats.get(pid) or stat(pid)
            if st is not None:
                killed.setdefault(pid, st[4])
        if root is not None:
            _signal_group(pgid, signal.SIGKILL)
        reap_strays(since, {root})
        # done when nothing is found alive and everything killed is dead: a process still exiting may no longer
        # be found (its environment, and so its tag, is gone before it becomes a zombie)
        dying = [pid for pid, started in killed.items() if _not_dead(pid, started)]
        if (not alive and not dying) or time.monotonic() > deadline:
            return len(killed)
        time.sleep(0.002)


def _not_dead(pid: int, started: int) -> bool:
    """The process `pid` that started at `started` is neither gone nor a zombie (a reused number is not it)."""
    st = stat(pid)
    return st is not None and st[0] not in "ZX" and st[4] == started


def reap_strays(since: int, keep: set[int] = frozenset()) -> None:
    """Wait for zombies re-parented to this process, started after `since` and outside its session; never for the
    processes it started itself (their Popen waits)."""
    me, my_sid = os.getpid(), os.getsid(0)
    with spawn_lock:
        own = registry.snapshot() | set(keep)
        for pid in children(me):
            if pid in own:
                continue
            st = stat(pid)
            if st is not None and st[0] in "ZX" and st[3] != my_sid and st[4] >= since:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass


def oom_kills() -> int | None:
    """The kernel's count of OOM kills (/proc/vmstat oom_kill, host-wide), or None where it is not available."""
    data = _read("/proc/vmstat", 1 << 16) or b""
    m = re.search(rb"^oom_kill (\d+)", data, re.M)
    return int(m.group(1)) if m else None


# What a failed host or device allocation says, in Python, C++, torch, CUDA and native libraries ("OpenBLAS error:
# Memory allocation still failed after 10 retries", glibc's "cannot allocate memory", "failed to allocate ...").
MEMORY_WORDS = re.compile(r"out of memory|(can't|cannot|could not|couldn't|unable to|failed to) allocate"
                          r"|not enough memory|alloc\w*( still)? failed|std::bad_alloc|memoryerror", re.I)


def is_memory_error(exc: BaseException | None) -> bool:
    """An out-of-memory error, host or device, here or anywhere down the exception's cause/context chain."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError) or type(exc).__name__ in ("OutOfMemoryError", "MemoryError"):
            return True
        if MEMORY_WORDS.search(str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def log_says_oom(text: str) -> bool:
    return MEMORY_WORDS.search(text) is not None


# ---------------------------------------------------------------- the worker's side

def setup_worker() -> None:
    """First thing in a worker: die with the parent (PDEATHSIG, then check it is still the parent that started
    us), and keep every descendant in our tree (subreaper). Falls back to a polling thread without prctl."""
    expected = int(os.environ.get(PARENT_VAR, "0") or 0)
    armed = prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    chain = ancestors(WRAPPER_DEPTH if os.environ.get(WRAPPED_VAR) else 1)
    if expected and expected not in chain:              # the parent died before the prctl
        print(f"kb-harness: the harness (pid {expected}) is not among this worker's ancestors {chain}: exiting",
              file=sys.stderr, flush=True)
        os._exit(3)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    if armed:
        return
    parent = os.getppid() if os.environ.get(WRAPPED_VAR) else expected or os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="kb-parent-watch", daemon=True).start()


def retag(tag: str) -> bool:
    """Rewrite this process's KB_WORKER_TAG where /proc/<pid>/environ reads it: the environment block the process
    was started with (between the env_start and env_end of /proc/self/stat), in place. For a worker forked without
    exec (harness.worker.zygote), whose block is its zygote's: `tag` must be as long as the value it replaces.
    os.environ is set apart (what a process it starts inherits). True when /proc/self/environ now says `tag`."""
    try:
        import ctypes
        fields = stat_fields(os.getpid())
        start, end = int(fields[47]), int(fields[48])     # fields 50 and 51 of proc(5): env_start, env_end
        block = b"\0" + ctypes.string_at(start, end - start)
        key = b"\0" + TAG_VAR.encode() + b"="
        at = block.find(key)
        if at < 0:
            return False
        at += len(key) - 1                               # the value's offset in the block itself
        stop = block.find(b"\0", at + 1) - 1
        new = tag.encode()
        if stop - at != len(new):
            return False
        ctypes.memmove(start + at, new, len(new))
    except (OSError, ValueError, IndexError):
        return False
    return environ_tag(os.getpid()) == tag


def is_subreaper() -> bool:
    """Whether this process adopts its descendants' orphans (PR_SET_CHILD_SUBREAPER, as setup_parent sets it)."""
    try:
        import ctypes
        value = ctypes.c_int(0)
        return _lib().prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0 and value.value == 1
    except (OSError, AttributeError):
        return False


def ancestors(depth: int) -> list[int]:
    """This process's parent, its parent's parent, ... (`depth` of them at most; fewer where /proc does not say).
    Under a launcher (WRAPPED_VAR: ncu starts the worker) the harness is the parent's parent, and PDEATHSIG fires
    when the launcher ends."""
    found, pid = [], os.getppid()
    while pid > 0:
        found.append(pid)
        if len(found) >= depth:
            break
        st = stat(pid)
        pid = st[1] if st else 0
    return found


def apply_memory_cap() -> int:
    """The memory cap from KB_MEMORY_CAP_BYTES (0 or unset: none), as RLIMIT_DATA (soft and hard).

    Why RLIMIT_DATA, on CPU and GPU workers alike: RLIMIT_AS counts address space, and the CUDA driver reserves
    terabytes of it (PROT_NONE) at initialization, so RLIMIT_AS breaks every CUDA process; it would also count
    shared libraries and unused malloc arena reservations (~0.6 GB of virtual memory after `import torch`).
    RLIMIT_DATA (Linux >= 4.7) counts private writable mappings only: heap, anonymous mmap (torch's CPU
    allocator), thread stacks; not PROT_NONE reservations, not device or shared mappings (CUDA pinned memory,
    /dev/nvidia*). Exceeding it makes the allocation fail (MemoryError, torch's "DefaultCPUAllocator: can't
    allocate memory"), which the worker reports as `oom`, instead of a kernel OOM kill. The cap is per process:
    children (nvcc, ninja) each get it too."""
    try:
        cap = int(os.environ.get("KB_MEMORY_CAP_BYTES", "0") or 0)
    except ValueError:
        return 0
    if cap <= 0:
        return 0
    try:
        import resource
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    except (ImportError, ValueError, OSError):
        return 0
    return cap


def mem_total_bytes() -> int | None:
    data = _read("/proc/meminfo", 1 << 14) or b""
    m = re.search(rb"^MemTotal:\s+(\d+) kB", data, re.M)
    return int(m.group(1)) * 1024 if m else None


# ---------------------------------------------------------------- the guardian

def guard(run_tag: str, parent: int) -> None:
    """Block until the parent's pipe closes (the parent ended, however), then kill every process carrying the run's
    tag until none is left for a while (at most 30 s), remove the parent's worker cgroups (harness.shared.cpugroup),
    and exit."""
    prefix = f"{run_tag}."
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    me = os.getpid()
    deadline = time.monotonic() + 30
    quiet = 0
    while quiet < 5 and time.monotonic() < deadline:
        found = []
        for pid in _all_pids():
            if pid == me:
                continue
            tag = environ_tag(pid)
            if tag is not None and tag.startswith(prefix):
                st = stat(pid)
                if st is not None and st[0] not in "ZX":
                    found.append(pid)
        for pid in found:
            _signal(pid, signal.SIGSTOP)
        for pid in tree(found, {me}):
            _signal(pid, signal.SIGKILL)
        quiet = quiet + 1 if not found else 0
        time.sleep(0.1)
    from harness.shared import cpugroup
    cpugroup.remove_all(parent)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "guard":
        guard(sys.argv[2], int(sys.argv[3]))
