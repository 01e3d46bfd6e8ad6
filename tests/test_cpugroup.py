"""A worker's cgroup counts the CPU of every process that was ever in it (harness.shared.cpugroup), helpers the kernel
reaped itself included, which the process tree's count (harness.run.cores.cpu_seconds) never sees."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run import cores
from harness.shared import cpugroup

# a parent that ignores SIGCHLD and forks three helpers of 0.3 s of CPU each: the kernel reaps them at once
AUTOREAP = """
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
sys.stdin.readline()
done_r, done_w = os.pipe()
for _ in range(3):
    if os.fork() == 0:
        start = time.process_time()
        while time.process_time() - start < 0.3:
            pass
        os.write(done_w, b"x")
        os._exit(0)
os.close(done_w)
while os.read(done_r, 1):
    pass
time.sleep(0.2)
print("done", flush=True)
sys.stdin.readline()
"""


def needs_cgroup():
    if cpugroup.base() is None:
        pytest.skip("no cgroup2 hierarchy this process may make cgroups in")


def test_a_cgroup_counts_the_cpu_of_helpers_the_kernel_reaped():
    needs_cgroup()
    proc = subprocess.Popen([sys.executable, "-c", AUTOREAP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    group = cpugroup.join(f"test-{os.getpid()}-{time.monotonic_ns()}", proc.pid)
    try:
        assert group is not None and (group.path / "cgroup.procs").read_text().split() == [str(proc.pid)]
        before, tree_before = group.seconds(), cores.cpu_seconds(proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        counted, tree = group.seconds() - before, cores.cpu_seconds(proc.pid) - tree_before
        assert counted >= 0.8, counted                 # the three helpers' 0.9 s
        assert tree < 0.3, tree                        # gone with them from the tree's count
    finally:
        proc.stdin.write("end\n")
        proc.stdin.flush()
        proc.wait(10)
        if group is not None:
            group.remove()
    assert not group.path.exists()                     # removed once its process is gone


def test_a_worker_is_in_its_own_cgroup_from_its_start_and_it_goes_at_close(tmp_path):
    needs_cgroup()
    from harness.run import workerproc
    worker = workerproc.Worker("build", workerproc.worker_env({"KB_SANDBOX": "off"}), tmp_path / "w.log")
    try:
        group = worker.cpu_group
        assert group is not None and group.path.parent == cpugroup.base()
        assert str(worker.proc.pid) in (group.path / "cgroup.procs").read_text().split()
        assert group.seconds() is not None
    finally:
        worker.close()
    assert not group.path.exists()


def test_no_cgroup_where_none_can_be_made(monkeypatch):
    """No cgroup2 hierarchy (or one this process may not write): nothing is made, and the cores are the tree's."""
    monkeypatch.setattr(cpugroup, "_base", [None])
    assert cpugroup.join("any", os.getpid()) is None


def test_the_guardian_removes_what_a_dead_parent_left(tmp_path):
    """A parent killed before it closed its workers leaves their cgroups; its guardian removes them."""
    needs_cgroup()
    script = ("from harness.shared import containment, cpugroup; import os, sys, time; containment.setup_parent(); "
              "print(cpugroup.base(), flush=True); sys.stdin.readline()")
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=str(Path(__file__).resolve().parents[1]))
    folder = Path(parent.stdout.readline().strip())
    assert folder.is_dir()
    (folder / "leftover").mkdir()
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 30
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not folder.exists()


def test_a_cgroup_is_made_where_its_folder_was_removed_meanwhile():
    """A guardian started with this process's pid (tests do) removes its empty worker cgroups and their folder:
    the next worker's cgroup is made all the same."""
    needs_cgroup()
    cpugroup.remove_all(os.getpid())
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        group = cpugroup.join(f"test-{os.getpid()}-{time.monotonic_ns()}", proc.pid)
        assert group is not None and group.seconds() is not None
    finally:
        proc.kill()
        proc.wait(10)
    group.remove()


def test_what_an_ended_process_left_is_removed_by_the_next():
    needs_cgroup()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    left = cpugroup.base().parent / f"{cpugroup.PREFIX}{gone.pid}"
    (left / "worker").mkdir(parents=True)
    cpugroup._sweep(left.parent)
    assert not left.exists()
    assert cpugroup.base().is_dir()                    # a live process's folder stays


class _Counted:
    """A worker whose cgroup reads the CPU seconds scripted in `readings`, one per read."""

    def __init__(self, readings: list[float]) -> None:
        self.cpu_group = type("G", (), {"seconds": lambda _self: readings.pop(0)})()
        self.wakes = 0


def test_cores_are_judged_in_the_median_sample_where_the_average_is_watered_down():
    """A red team's candidate ran two threads in every counted sample and slept through each block's uncounted
    warm-up: over every second awake it read about one core (`ok`, 1.6-1.8x). Read around each counted sample, the
    median one reads two, and `extra_cores` names it; an honest side's median stays under the line."""
    from types import SimpleNamespace
    from harness.run import defenses
    from harness.run.interleave import Collected
    readings = [x for k in range(9) for x in (k * 0.01, k * 0.01 + 0.004)]   # 4 ms of CPU in each 2 ms call
    per = cores.PerSample(_Counted(readings))
    for _ in range(9):
        per.add(per.now(), 2.0)
    assert per.median() == 2.0
    few = cores.PerSample(_Counted([0.0, 0.004] * (cores.MIN_SAMPLES - 1)))
    for _ in range(cores.MIN_SAMPLES - 1):
        few.add(few.now(), 2.0)
    assert few.median() is None
    assert cores.PerSample.of(SimpleNamespace(cpu_group=None)) is None     # a process tree's ticks: no per sample

    def judged(average: float, median: float | None) -> list[str]:
        out = Collected(cores={"candidate": average, "reference": 0.97},
                        sample_cores=None if median is None else {"candidate": median, "reference": 0.98})
        ev = SimpleNamespace(out=out, cpu_threads=1)
        return [r.detail for r in defenses.cpu_cores(ev).raised]
    assert judged(0.98, 1.86) == ["the candidate's processes used more CPU cores at once while timed than "
                                  "cpu_threads allows: 1.86 cores in its median timed sample, where cpu_threads is 1 "
                                  "(the reference's executor: 0.98)"]
    assert judged(0.98, 1.05) == [] and judged(0.98, None) == []
    assert len(judged(2.1, 2.0)) == 1 and "on average while awake" in judged(2.1, 2.0)[0]


def test_work_done_while_stopped_is_told_from_work_in_the_calls():
    """A stop lands on a thread only when it returns to user space, so a copy the kernel is doing for a candidate
    runs on once the parent's clock has stopped it. Its cgroup, read at the end of each call and at the start of
    the next, counts that work where the worker was not woken in between; more than 2% of its CPU work is
    `work_while_stopped`. An honest one-thread side reads 0-0.39% on the 2-core box."""
    from types import SimpleNamespace
    from harness.run import defenses
    from harness.run.interleave import Collected
    # each call: 10 ms of CPU in the call, then 1 ms counted before the next call starts
    readings = [x for k in range(10) for x in (k * 0.011, k * 0.011 + 0.010)] + [0.110]
    worker = _Counted(readings)
    per = cores.PerSample(worker)
    for k in range(10):
        per.add(per.begin(), 10.0, counted=k % 2 == 1)            # warm-ups count towards the work too
    per.finish()
    assert len(per.ratios) == 5 and per.stopped_share() == round(0.010 / 0.110, 4)
    woken = cores.PerSample(_Counted([0.0, 0.010, 0.5, 0.51]))     # woken in between (a request): not stopped work
    woken.add(woken.begin(), 10.0)
    woken.worker.wakes += 1
    woken.add(woken.begin(), 10.0)
    assert woken.stopped_s == 0.0 and abs(woken.in_calls_s - 0.020) < 1e-12 and woken.stopped_share() is None

    def judged(share: float | None, reference: float | None = 0.002) -> list[str]:
        out = Collected(stopped_work={"candidate": share, "reference": reference})
        return [r.detail for r in defenses.stopped_work(SimpleNamespace(out=out)).raised]
    assert judged(0.125) == ["the candidate's processes went on working after the parent's clock had stopped them "
                             "(a copy or read the kernel was doing for them): 12.5% of its CPU work while timed was "
                             "done while it was stopped (the reference's executor: 0.2%)"]
    assert judged(0.0035) == [] and judged(None) == [] and len(judged(0.03, None)) == 1
    assert judged(0.05, 0.04) == []         # cpu_threads > 1: both sides' pools spin on for a moment after a call
