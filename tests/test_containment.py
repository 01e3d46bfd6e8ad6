"""harness.shared.containment with real short-lived processes: the process tree as /proc shows it, a sweep that ends
every process of one worker (its group, its tree, the tagged escapees) and nothing else, pause and resume of a
worker's tree, the guardian that ends a run's processes when the parent dies, a worker that dies with its parent
and keeps double-forked descendants in its tree, the memory cap, and what counts as out of memory."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO
from harness.shared import containment

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment is Linux-only")


def start(script: str, tag: str | None = None, new_session: bool = True, **env: str) -> subprocess.Popen:
    """A python process running `script` (stdout a pipe), with the harness importable, tagged like a worker."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    full.pop(containment.TAG_VAR, None)
    if tag is not None:
        full[containment.TAG_VAR] = tag
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=full, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=new_session)


def alive(pid: int) -> bool:
    st = containment.stat(pid)
    return st is not None and st[0] not in "ZX"


def wait_dead(pid: int, seconds: float = 10.0) -> bool:
    """True once `pid` is gone or a zombie (reaped here when it is this process's child)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def wait_for(predicate, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()


def kill(pid: int | None) -> None:
    """A process a test started that may have outlived what should have ended it (a failed test leaves nothing)."""
    if pid is not None and alive(pid):
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid, 2)


def end(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


# A worker-like root: a child in its group, a child in a group of its own (still in its tree), and a grandchild
# that left its tree and its session (sh exits at once, its background sleep is re-parented) but keeps the tag.
ROOT = """
    import os, subprocess, sys, time
    child = subprocess.Popen(["sleep", "60"])
    regrouped = subprocess.Popen(["sleep", "60"], preexec_fn=os.setpgrp)
    sh = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!"], start_new_session=True, stdout=subprocess.PIPE,
                          text=True)
    escaped = int(sh.stdout.readline())
    sh.wait()
    while not open(f"/proc/{escaped}/cmdline", "rb").read().startswith(b"sleep"):
        time.sleep(0.01)        # the background sleep exec'd: in exec its environ reads empty (a loaded box's race)
    print(child.pid, regrouped.pid, escaped, flush=True)
    time.sleep(60)
"""


@pytest.fixture()
def worker_tree():
    """(root Popen, [child, regrouped, escaped], tag)."""
    tag = containment.new_tag()
    root = start(ROOT, tag)
    pids = [int(x) for x in root.stdout.readline().split()]
    assert len(pids) == 3, "the root did not start its children"
    yield root, pids, tag
    for pid in pids:
        kill(pid)
    end(root)


def test_stat_children_tree_and_tag_read_from_proc(worker_tree):
    root, (child, regrouped, escaped), tag = worker_tree
    state, ppid, pgid, sid, started = containment.stat(child)
    assert ppid == root.pid and pgid == sid == root.pid and state in "RS"
    assert containment.stat(regrouped)[2] == regrouped            # its own group, still the root's child
    assert containment.stat(escaped)[3] == containment.stat(escaped)[2] != root.pid     # another session
    assert sorted(containment.children(root.pid)) == sorted([child, regrouped])
    assert set(containment.tree([root.pid])) == {root.pid, child, regrouped}     # the escapee left the tree
    assert containment.tree([root.pid])[0] == root.pid
    assert containment.environ_tag(escaped) == tag == containment.environ_tag(child)
    assert containment.environ_tag(os.getpid()) != tag
    assert started >= containment.stat(root.pid)[4]
    end(root)
    assert containment.stat(root.pid) is None and containment.environ_tag(root.pid) is None


def test_sweep_ends_every_process_of_the_worker_and_nothing_else(worker_tree):
    root, pids, tag = worker_tree
    since = containment.stat(root.pid)[4]
    bystander = subprocess.Popen(["sleep", "60"])              # the parent's own child, in its session
    other = start("import time; time.sleep(60)", f"{containment.RUN_TAG}.someoneelse")   # another worker
    containment.registry.add(other.pid)
    try:
        killed = containment.sweep(root.pid, root.pid, tag, since)
        assert killed >= 4
        for pid in [root.pid, *pids]:
            assert wait_dead(pid, 5), f"{pid} ({containment.environ_tag(pid)}) outlived the sweep"
        assert alive(bystander.pid) and alive(other.pid)
    finally:
        containment.registry.discard(other.pid)
        end(bystander, other)


def test_pause_and_resume_reach_the_whole_tree(worker_tree):
    root, (child, regrouped, _), tag = worker_tree
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        signalled = containment.signal_tree(root.pid, root.pid, tag, signal.SIGSTOP, set())
        assert {child, regrouped} <= signalled
        for pid in (root.pid, child, regrouped):
            assert wait_for(lambda: containment.stat(pid)[0] == "T"), f"{pid} not stopped"
        assert containment.stat(bystander.pid)[0] != "T"
        containment.signal_tree(root.pid, root.pid, tag, signal.SIGCONT, set())
        for pid in (root.pid, child, regrouped):
            assert wait_for(lambda: containment.stat(pid)[0] != "T"), f"{pid} not resumed"
    finally:
        end(bystander)


def test_the_guardian_ends_the_runs_processes_when_the_parent_goes():
    """The guardian holds a pipe from the parent; once it closes (the parent died, however), every process carrying
    the run's tag is killed, wherever it is; another run's processes and untagged ones are not."""
    run = f"kbtest{os.getpid()}x{time.monotonic_ns() % 10**6}"
    guardian = subprocess.Popen([sys.executable, "-m", "harness.shared.containment", "guard", run, str(os.getpid())],
                                stdin=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                start_new_session=True)
    ours = [start("import time; time.sleep(60)", f"{run}.w{i}") for i in range(2)]
    others = [start("import time; time.sleep(60)", f"{run}x.w0"), start("import time; time.sleep(60)")]
    try:
        assert wait_for(lambda: all(containment.environ_tag(p.pid) for p in ours))
        time.sleep(0.3)
        assert all(alive(p.pid) for p in ours + others)          # nothing happens while the parent lives
        guardian.stdin.close()
        for proc in ours:
            assert wait_dead(proc.pid), "a tagged process outlived the parent"
        assert guardian.wait(30) == 0
        assert all(alive(p.pid) for p in others)
    finally:
        end(*ours, *others)
        if guardian.poll() is None:
            guardian.kill()
        guardian.wait(10)


def test_a_worker_dies_with_its_parent():
    """setup_worker: PDEATHSIG, so a worker whose parent is SIGKILLed goes too; a worker whose parent is already
    not the one that started it exits at once (3)."""
    worker = """
        import time
        from harness.shared.containment import setup_worker
        setup_worker()
        print("ready", flush=True)
        time.sleep(60)
    """
    middle = start(f"""
        import os, subprocess, sys
        env = {{**os.environ, "KB_PARENT_PID": str(os.getpid())}}
        child = subprocess.Popen([sys.executable, "-c", {textwrap.dedent(worker)!r}], env=env)
        print(child.pid, flush=True)
        child.wait()
    """)
    pid = None
    try:
        pid = int(middle.stdout.readline())
        assert middle.stdout.readline().strip() == "ready"
        assert alive(pid)
        middle.kill()
        middle.wait(10)
        assert wait_dead(pid), "the worker outlived its parent"
    finally:
        end(middle)
        kill(pid)
    orphan = start(worker, KB_PARENT_PID="1")                  # its parent is this process, not pid 1
    try:
        assert orphan.wait(30) == 3 and orphan.stdout.read() == ""
    finally:
        end(orphan)


def test_a_worker_keeps_double_forked_descendants_in_its_tree():
    """setup_worker makes the worker a child subreaper: a grandchild whose parent exits is re-parented to the worker
    (so pause, resume and the sweep find it by the tree), not to init."""
    tag = containment.new_tag()
    worker = start("""
        import subprocess, time
        from harness.shared.containment import setup_worker
        setup_worker()
        sh = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True)
        print(int(sh.stdout.readline()), flush=True)
        sh.wait()
        time.sleep(60)
    """, tag, KB_PARENT_PID=str(os.getpid()))
    grandchild = None
    try:
        grandchild = int(worker.stdout.readline())
        assert wait_for(lambda: grandchild in containment.children(worker.pid)), \
            f"re-parented to {containment.stat(grandchild)}"
        containment.sweep(worker.pid, worker.pid, tag, containment.stat(worker.pid)[4])
        assert wait_dead(grandchild)
    finally:
        end(worker)
        kill(grandchild)


LOCKED = """
    import ctypes, os, signal, time
    from harness.shared.containment import setup_worker
    from harness.worker import treelock
    setup_worker()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl(38, 1, 0, 0, 0)                                   # no_new_privs, as the sandbox sets it first
    print(treelock.lock(), flush=True)
    print(libc.prctl(36, 0, 0, 0, 0), ctypes.get_errno(), flush=True)      # PR_SET_CHILD_SUBREAPER, 0
    nr = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
    pid = libc.syscall(ctypes.c_long(nr), ctypes.c_ulong(0x8000 | signal.SIGCHLD), 0, 0, 0, 0)    # CLONE_PARENT
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    print(pid, ctypes.get_errno(), flush=True)
    # a chain of forks that never ends: each generation leaves the worker's group (setsid), forks the next and exits
    if os.fork() == 0:
        while True:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            time.sleep(0.001)
    time.sleep(60)
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="no tree lock for this architecture")
def test_a_locked_worker_keeps_every_descendant_in_its_tree_and_ends_them():
    """harness.worker.treelock: a worker cannot stop adopting its descendants' orphans (PR_SET_CHILD_SUBREAPER, 0) or
    make a child the parent's (clone with CLONE_PARENT): both refused with EPERM. So a chain of forks in which each
    generation leaves the worker's group, forks the next and exits (too fast for tree() then a signal to each: it
    outran that) stays in the worker's tree, where stop_tree catches it and end_descendants ends it while the
    worker lives; the worker itself is left alone."""
    tag = containment.new_tag()
    worker = start(LOCKED, tag, KB_PARENT_PID=str(os.getpid()))
    try:
        assert worker.stdout.readline().strip() == "None"
        assert worker.stdout.readline().split() == ["-1", "1"]
        assert worker.stdout.readline().split() == ["-1", "1"]
        assert wait_for(lambda: len(containment.tree([worker.pid])) > 1), "the chain did not start"
        time.sleep(0.3)                                           # generations come and go, re-parented to the worker
        mine = set(containment.children(os.getpid()))
        assert containment.end_descendants(worker.pid, worker.pid) >= 1
        session = lambda: [p for p, st in containment._all_stats().items()                    # noqa: E731
                           if st[3] != os.getsid(0) and st[1] not in (0, 1) and p != worker.pid
                           and st[0] not in "ZX" and containment.environ_tag(p) == tag]
        # a SIGKILL lands when the killed process next runs: on a loaded box one was still there the moment after
        # (CI, 2026-11-29); one that got away keeps forking and is still there 0.2 s later, below
        assert wait_for(lambda: not session(), 2.0), session()
        assert alive(worker.pid) and containment.stat(worker.pid)[0] != "T"
        time.sleep(0.2)
        assert not session()
        assert set(containment.children(os.getpid())) <= mine | {worker.pid}     # nothing landed on this process
    finally:
        containment.end_descendants(worker.pid, worker.pid)
        end(worker)


def test_the_memory_cap_makes_a_large_allocation_fail_in_the_worker():
    script = """
        from harness.shared.containment import apply_memory_cap
        cap = apply_memory_cap()
        try:
            block = bytearray(128 << 20)
            print(cap, "allocated", flush=True)
        except MemoryError:
            print(cap, "MemoryError", flush=True)
    """
    capped = start(script, KB_MEMORY_CAP_BYTES=str(64 << 20))
    free = start(script, KB_MEMORY_CAP_BYTES="0")
    try:
        assert capped.stdout.read().split() == [str(64 << 20), "MemoryError"]
        assert free.stdout.read().split() == ["0", "allocated"]
    finally:
        end(capped, free)


def test_what_counts_as_out_of_memory():
    try:
        try:
            raise MemoryError()
        except MemoryError as inner:
            raise RuntimeError("the model could not be built") from inner
    except RuntimeError as exc:
        chained = exc
    assert containment.is_memory_error(chained)                     # found down the cause chain
    assert containment.is_memory_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert containment.is_memory_error(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried ..."))
    assert containment.is_memory_error(type("OutOfMemoryError", (RuntimeError,), {})("x"))   # torch's, by name
    assert not containment.is_memory_error(ValueError("shape mismatch"))
    assert not containment.is_memory_error(None)
    assert containment.log_says_oom("OpenBLAS error: Memory allocation still failed after 10 retries")
    assert containment.log_says_oom("terminate called after throwing an instance of 'std::bad_alloc'")
    assert not containment.log_says_oom("Segmentation fault (core dumped)")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_tree_lock_filter_jumps_only_forward_within_itself(machine):
    """harness.worker.treelock's program for each architecture: every jump lands on an instruction of the program
    (a seccomp filter the kernel would refuse otherwise, and only the x86_64 one is loaded here), and it ends in
    its three answers: ENOSYS, EPERM, allow."""
    from harness.worker import treelock
    insns = treelock.program(machine)
    for i, (op, jt, jf, _) in enumerate(insns):
        if op & 0x07 == 0x05:                                   # BPF_JMP
            assert i + 1 + max(jt, jf) < len(insns), (i, jt, jf)
    assert [op for op, *_ in insns[-3:]] == [0x06, 0x06, 0x06]
    assert treelock.program("sparc") is None
