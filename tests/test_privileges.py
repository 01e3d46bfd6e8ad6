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
status = open("/proc/self/status").read()
eff = int(status.split("CapEff:")[1].split()[0], 16)
bnd = int(status.split("CapBnd:")[1].split()[0], 16)
dropped = sum(1 << c for c in (19, 21, 23, 24))
print(len(refused), eff & dropped, bnd & dropped)
"""
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["3", "0", "0"]
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
