"""A candidate worker cannot raise its scheduling priority (harness.worker.sandbox.drop_privileges), and the parent
names a worker whose priority was raised all the same (harness.run.scheduling)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.run import scheduling

LINUX = sys.platform.startswith("linux")


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


@pytest.mark.skipif(not LINUX, reason="prctl, capset and /proc are Linux's")
def test_after_the_drop_no_priority_can_be_raised_here_or_on_another_process():
    """Every capability is gone from the worker's sets (as root it held them all): no priority raised here or on
    another process, and the machine's clock cannot be slewed (a red team's candidate held CAP_SYS_TIME and slowed
    CLOCK_MONOTONIC, the parent's clock, while its calls ran: `ok` at 1.11-1.21x)."""
    target = _sleeper()
    try:
        code = f"""
import os, sys
from harness.worker.sandbox import drop_privileges
report = drop_privileges()
assert report["error"] is None and report["rlimit_rtprio"] == 0 and report["rlimit_nice"] == 0, report
refused = []
for attempt in (lambda: os.nice(-5), lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1)),
                lambda: os.setpriority(os.PRIO_PROCESS, {target.pid}, -5)):
    try:
        attempt()
    except PermissionError:
        refused.append(True)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class Timex(ctypes.Structure):                  # struct timex (linux/timex.h), its first fields and room for the rest
    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("rest", ctypes.c_long * 40)]
probe = Timex()
libc.adjtimex(ctypes.byref(probe))             # modes 0: a read, allowed to anyone
again = Timex(modes=0x0004, maxerror=probe.maxerror)    # ADJ_MAXERROR to its own value: changes nothing if allowed
clock = libc.adjtimex(ctypes.byref(again)) == -1 and ctypes.get_errno() == 1     # EPERM: no CAP_SYS_TIME
status = open("/proc/self/status").read()
eff, prm, bnd = (int(status.split(k + ":")[1].split()[0], 16) for k in ("CapEff", "CapPrm", "CapBnd"))
print(len(refused), eff, prm, bnd, clock, len(report["dropped"]))
"""
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
        assert done.stdout.split() == ["3", "0", "0", "0", "True", str(last + 1)], done.stdout
        assert scheduling.raised(target.pid, scheduling.lowest_nice(target.pid)) is None
    finally:
        target.kill()
        target.wait()


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="raising another process's priority needs root")
def test_a_raised_nice_value_is_named():
    target = _sleeper()
    try:
        baseline = scheduling.lowest_nice(target.pid)
        assert scheduling.raised(target.pid, baseline) is None
        os.setpriority(os.PRIO_PROCESS, target.pid, baseline - 3)
        assert f"nice {baseline - 3}, below the {baseline}" in scheduling.raised(target.pid, baseline)
        os.setpriority(os.PRIO_PROCESS, target.pid, baseline + 5)      # lowering its own priority: not named
        assert scheduling.raised(target.pid, baseline) is None
    finally:
        target.kill()
        target.wait()


@pytest.mark.skipif(not LINUX, reason="/proc is Linux's")
def test_a_lowered_priority_of_the_reference_executor_is_named():
    """Any process of the same user may lower another's priority (a higher nice value, SCHED_IDLE): done to the
    reference's executor, it would make the candidate read faster, so the parent names it there: any thread of it
    below what its threads had when it was started."""
    target = _sleeper()
    try:
        baseline = scheduling.settings(target.pid)
        assert target.pid in baseline and scheduling.lowered(target.pid, baseline) is None
        nice = baseline[target.pid][0]
        os.setpriority(os.PRIO_PROCESS, target.pid, nice + 4)
        assert f"nice {nice + 4}, above the {nice}" in scheduling.lowered(target.pid, baseline)
        os.setpriority(os.PRIO_PROCESS, target.pid, nice)
        assert scheduling.lowered(target.pid, baseline) is None
        os.sched_setscheduler(target.pid, os.SCHED_IDLE, os.sched_param(0))
        assert "SCHED_IDLE" in scheduling.lowered(target.pid, baseline)
        assert scheduling.lowered(target.pid, {}) is None         # no baseline, nothing to judge against
        other = {tid + 10 ** 7: setting for tid, setting in baseline.items()}     # a thread started since: judged
        assert "SCHED_IDLE" in scheduling.lowered(target.pid, other)            # against the worker's threads
    finally:
        target.kill()
        target.wait()


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="a real-time policy needs root")
def test_a_realtime_policy_is_named():
    target = _sleeper()
    try:
        try:
            os.sched_setscheduler(target.pid, os.SCHED_FIFO, os.sched_param(1))
        except PermissionError:                 # a container without real-time bandwidth refuses even root
            pytest.skip("this machine refuses SCHED_FIFO to root")
        assert "SCHED_FIFO" in scheduling.raised(target.pid, scheduling.lowest_nice(target.pid))
    finally:
        target.kill()
        target.wait()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not LINUX, reason="process states are read from /proc")
def test_a_helper_outside_the_process_group_is_stopped_with_the_call():
    """The cheat: a candidate starts a helper in a session of its own (outside its process group) that finishes the
    output after the reply, while the parent still has to scan /proc for it. The parent's stop at the end of a
    staged call (Worker.freeze) stops everything its wake continued, the helper included, before the clock ends."""
    import subprocess as sp
    from harness.run.workerproc import Worker
    worker = Worker.__new__(Worker)
    worker.proc = sp.Popen(["sleep", "30"], start_new_session=True)      # the worker: its own group
    helper = sp.Popen(["sleep", "30"], start_new_session=True)           # escaped from that group
    try:
        worker._stopped, worker._strays, worker._woken = {helper.pid}, set(), set()
        for pid in (worker.proc.pid, helper.pid):
            os.kill(pid, 19)                                             # as pause() left them (SIGSTOP)
        worker.wake()
        assert {_state(worker.proc.pid), _state(helper.pid)} <= {"S", "R", "D"}     # running (D: paging in)
        worker.freeze()
        for _ in range(100):
            if _state(worker.proc.pid) == _state(helper.pid) == "T":
                break
            import time
            time.sleep(0.01)
        assert _state(worker.proc.pid) == "T" and _state(helper.pid) == "T"
    finally:
        for proc in (worker.proc, helper):
            proc.kill()
            proc.wait()
