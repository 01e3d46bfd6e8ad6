"""harness.run.schedule: which pairs are measured again, what a slot's workers get."""
from __future__ import annotations

import pytest

from conftest import REPO
from harness.core.config import load_config


@pytest.mark.parametrize("flags, reason", [
    (["interference"], "interference"),
    (["no_custom_kernel", "interference", "timing_inconsistent"], "interference"),   # a burst of load raises both
    (["timing_inconsistent"], "timing_inconsistent"),
    (["interference", "tampered_timer"], None),            # a verdict load cannot produce: no second try
    (["noisy"], None),
])
def test_which_invalid_pairs_are_measured_again(flags, reason):
    from harness.results.records import RecordDraft
    from harness.run.schedule import _load_sensitive
    assert _load_sensitive(RecordDraft.from_json({"status": "invalid", "flags": flags})) == reason
    assert _load_sensitive(RecordDraft.from_json({"status": "ok", "flags": flags})) is None


def test_a_retried_pair_keeps_its_first_trys_reading_and_phases():
    """The second try's record stands; `retried` keeps the first try's reading of the flag and its worker.phases
    (its reference's setup among them), which benchmarks/pair_time.py counts as part of the pair's cost."""
    from harness.results.records import RecordDraft
    from harness.run.schedule import _retried
    phases = {"reference_setup": 0.8, "trials": 1.0, "timing": 3.0, "total": 4.5}
    first = RecordDraft.from_json({"status": "invalid", "flags": ["interference"],
                                   "flag_details": {"interference": "+7.0% slower"}, "worker": {"phases": phases}})
    retried = _retried("interference", first).to_json()
    assert retried == {"reason": "interference", "first_try": "+7.0% slower", "first_try_phases": phases}
    assert _retried("interference", RecordDraft.from_json({"status": "invalid"})).first_try_phases is None


def test_pair_workers_warm_the_profiler_only_where_calls_are_profiled(tmp_path):
    """torch.profiler's first CUDA trace costs seconds: the reference and candidate workers of a GPU slot start it
    before the rounds when the defenses (which profile calls) are on; nowhere else."""
    from harness.run.schedule import Slot, pair_worker_env
    cfg = tmp_path / "config.yaml"
    cfg.write_text("trials: 1\n")
    gpu, cpu = Slot("cuda:0", 0), Slot("cpu", None)
    assert pair_worker_env(load_config(cfg, {}), gpu).get("KB_WARM_PROFILER") == "1"
    assert "KB_WARM_PROFILER" not in pair_worker_env(load_config(cfg, {"defenses": False}), gpu)
    assert "KB_WARM_PROFILER" not in pair_worker_env(load_config(cfg, {}), cpu)


def test_both_sides_are_timed_on_the_same_cores():
    """Every worker of a GPU slot gets the slot's timing cores (the first cpu_threads of its share), and once a side is
    about to be timed every one of its threads, those started earlier included, is held to them: the two sides'
    timed threads cannot land on two different cores of a shared machine."""
    import os
    import subprocess
    import sys
    from harness.run.schedule import Slot
    slot = Slot("cuda:0", 0, cpus=(4, 5, 6, 7))
    assert slot.env(1)["KB_TIMING_CPUS"] == "4" and slot.env(2)["KB_TIMING_CPUS"] == "4,5"
    assert slot.env(1)["KB_CPUS"] == "4,5,6,7"
    assert Slot("cpu", None, cpus=(0, 1)).env(1)["KB_TIMING_CPUS"] == ""      # the CPU path: not held (caches)
    core = min(os.sched_getaffinity(0))
    script = (
        "import os, threading\n"
        "from harness.worker.common import pin_for_timing\n"
        "started, stop = threading.Event(), threading.Event()\n"
        "t = threading.Thread(target=lambda: (started.set(), stop.wait())); t.start(); started.wait()\n"
        "print(sorted(os.sched_getaffinity(t.native_id)) == sorted(os.sched_getaffinity(0)))\n"
        "print(pin_for_timing())\n"
        "print(sorted(os.sched_getaffinity(t.native_id)), sorted(os.sched_getaffinity(0)))\n"
        "stop.set()\n")
    env = {**os.environ, "KB_TIMING_CPUS": str(core), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["True", f"[{core}]", f"[{core}] [{core}]"]
    env.pop("KB_TIMING_CPUS")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[1] == "None"            # nothing to hold to: left as it was


def test_spares_are_started_only_for_jobs_that_will_come():
    """A slot's spare workers (SpareWorkers' `upcoming`): a candidate for each pair its reference process has yet to
    serve, the first one's beside the reference; both roles while another process pair or problem may come; none
    after the last pair of the run's last problem."""
    from harness.run.schedule import Outlook
    more = [False]
    outlook = Outlook(lambda: more[0], pairs_left=2)
    assert outlook.upcoming("reference") == ("candidate",)       # the first pair's candidate, beside the reference
    outlook.pairs_left = 1
    assert outlook.upcoming("candidate") == ("candidate",)
    outlook.pairs_left = 0
    assert outlook.upcoming("candidate") == ()                    # the last pair: no spare of either role
    outlook.processes_after = 1
    assert set(outlook.upcoming("candidate")) == {"reference", "candidate"}
    outlook.processes_after, more[0] = 0, True                    # another problem may come to this slot
    assert set(outlook.upcoming("candidate")) == {"reference", "candidate"}

    # a staged path's pairs take a reference executor each (harness.run.reference_executor) before the candidate
    outlook = Outlook(lambda: False, pairs_left=2, executor=True)
    assert set(outlook.upcoming("reference")) == {"candidate", "executor"}
    outlook.pairs_left = 1
    assert outlook.upcoming("executor") == ("candidate",)           # its pair's candidate is still to come
    assert set(outlook.upcoming("candidate")) == {"candidate", "executor"}
    outlook.pairs_left = 0
    assert outlook.upcoming("executor") == ("candidate",) and outlook.upcoming("candidate") == ()


def test_a_run_started_with_cuda_visible_devices_times_on_the_gpu_it_names(tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES=1 python run_eval.py (a SLURM job's GPU, one of several runs of a host): --gpus 0 is the
    first GPU it names, and that slot's workers see GPU 1 alone. Before, they saw GPU 0 whatever the parent's
    setting said, and two runs meant for two GPUs timed on one."""
    from harness.run import meta, pipeline
    from test_meta import FOUR
    monkeypatch.setattr(meta, "machine_gpus", lambda: meta.parse_gpus(FOUR))
    monkeypatch.setattr(pipeline.meta, "torch_versions", lambda: {"torch": "2.11.0", "cuda": "13.0"})
    cfg = tmp_path / "config.yaml"
    cfg.write_text("trials: 1\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    device, slots = pipeline.resolve_slots(load_config(cfg, {}), meta.gpus())
    assert device == "cuda" and [(s.name, s.env()["CUDA_VISIBLE_DEVICES"]) for s in slots] == [("cuda:0", "1")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2")
    _, slots = pipeline.resolve_slots(load_config(cfg, {"gpus": (0, 1)}), meta.gpus())
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["3", "2"]
    with pytest.raises(pipeline.UsageError, match="no GPU with index 2 .*CUDA_VISIBLE_DEVICES=3,2 numbers"):
        pipeline.resolve_slots(load_config(cfg, {"gpus": (2,)}), meta.gpus())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    _, slots = pipeline.resolve_slots(load_config(cfg, {"gpus": (2,)}), meta.gpus())
    assert slots[0].env()["CUDA_VISIBLE_DEVICES"] == "2"
