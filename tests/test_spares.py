"""Spare workers on a GPU slot import torch on the cores no timed thread uses, and go on while a side is timed;
where a slot has no such cores they are stopped then, as on the CPU path."""
import os
import subprocess
import sys

import pytest

from harness.run.schedule import Slot
from harness.run.workerproc import SpareWorkers


def test_a_gpu_slot_keeps_its_timing_cores_away_from_its_spares():
    slot = Slot("cuda:0", 0, cpus=tuple(range(16)))
    assert slot.timing_cpus() == (0,)
    assert slot.spare_cpus() == tuple(range(1, 16))
    env = slot.env()
    assert env["KB_SPARE_CPUS"] == ",".join(map(str, range(1, 16))) and env["KB_TIMING_CPUS"] == "0"
    assert Slot("cuda:0", 0, cpus=(0, 1)).spare_cpus() == ()          # one core left: not enough
    assert Slot("cpu", None, cpus=tuple(range(16))).spare_cpus() == ()  # the CPU path times on its cores


class _Stoppable:
    def __init__(self):
        self.paused = 0

    def pause(self):
        self.paused += 1

    def resume(self):
        self.paused -= 1


@pytest.mark.parametrize("spare_cpus, stopped", [("1,2", 0), ("", 1)])
def test_quiet_spares_are_not_stopped_while_a_side_is_timed(tmp_path, spare_cpus, stopped):
    spares = SpareWorkers({"KB_SPARE_CPUS": spare_cpus}, tmp_path, "t", enabled=True)
    worker = _Stoppable()
    spares.spares["reference"] = worker
    spares.pause()
    assert worker.paused == stopped
    spares.resume()
    assert worker.paused == 0


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_spare_imports_on_its_cores_and_takes_the_slot_cores_with_its_job():
    a, b = sorted(os.sched_getaffinity(0))[:2]
    code = ("import os\nfrom harness.worker import common\n"
            "print(common.hold_spare_cores(), sorted(os.sched_getaffinity(0)))\n"
            "common.hold_slot_cores()\nprint(sorted(os.sched_getaffinity(0)))")
    env = {**os.environ, "KB_SPARE_CPUS": str(b), "KB_CPUS": f"{a},{b}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split("\n")[:2] == [f"True [{b}]", f"[{a}, {b}]"]


class _FakeWorker:
    started: list = []

    def __init__(self, role, env, log_path):
        self.role = role
        _FakeWorker.started.append(role)


def test_prime_starts_a_spare_for_each_role_that_has_none(tmp_path, monkeypatch):
    from harness.run import workerproc
    monkeypatch.setattr(workerproc, "Worker", _FakeWorker)
    _FakeWorker.started = []
    spares = SpareWorkers({}, tmp_path, "t", enabled=True)
    spares.prime(("reference", "candidate"))
    spares.prime(("candidate", "executor"))
    assert _FakeWorker.started == ["reference", "candidate", "executor"]
    assert set(spares.spares) == {"reference", "candidate", "executor"}
    off = SpareWorkers({}, tmp_path, "t", enabled=False)
    off.prime(("reference",))
    assert off.spares == {} and _FakeWorker.started == ["reference", "candidate", "executor"]


@pytest.mark.parametrize("spare_cpus, primed", [("1,2", ("reference", "candidate")), ("", ())])
def test_a_gpu_slot_starts_its_first_problems_workers_while_it_measures_its_ceilings(tmp_path, monkeypatch,
                                                                                     spare_cpus, primed):
    """The first reference's torch import and compile warm-up overlap the ceilings worker (~6 s on an H200 host),
    where the spares have cores of their own."""
    from harness.run import schedule, workerproc
    monkeypatch.setattr(workerproc, "Worker", _FakeWorker)
    _FakeWorker.started = []
    seen = {}
    monkeypatch.setattr(schedule, "slot_spares", lambda ctx, slot, upcoming: SpareWorkers(
        {"KB_SPARE_CPUS": spare_cpus}, tmp_path, "t", enabled=True, upcoming=upcoming))
    monkeypatch.setattr(schedule, "measure_ceilings",
                        lambda ctx, slot: seen.setdefault("primed_before_ceilings", tuple(_FakeWorker.started)) and {})

    class _Ctx:
        cfg = type("Cfg", (), {"defenses": True, "timing": type("T", (), {"staged_gpu": False})()})()
        ceilings: dict = {}

    monkeypatch.setattr(SpareWorkers, "close", lambda self: None)
    schedule.serve_slot(Slot("cuda:0", 0, cpus=(0, 1, 2)), _Ctx(), lambda: None)
    assert seen["primed_before_ceilings"] == primed
