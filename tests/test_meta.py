"""harness.run.meta: what run.json says about the machine."""
from __future__ import annotations


def test_run_json_names_each_gpu_by_uuid_where_nvidia_smi_gives_one():
    from harness.run import meta
    six = "0, NVIDIA H200, 580.159.04, 143771, 9.0, GPU-3f2a\n1, NVIDIA H200, 580.159.04, 143771, 9.0, GPU-77c1"
    assert [g.get("uuid") for g in meta.parse_gpus(six)] == ["GPU-3f2a", "GPU-77c1"]
    five = meta.parse_gpus("0, NVIDIA H100, 570.1, 81559, 9.0")
    assert five == [{"index": 0, "name": "NVIDIA H100", "driver": "570.1", "memory_mib": "81559",
                     "compute_capability": "9.0"}]
    assert meta.parse_gpus(None) == [] and meta.parse_gpus("No devices were found") == []


FOUR = "\n".join(f"{i}, NVIDIA H200, 580.159.04, 143771, 9.0, GPU-{u}" for i, u in
                 enumerate(("3f2a-01", "77c1-02", "77c9-03", "a0b4-04")))


def test_cuda_visible_devices_narrows_and_orders_the_gpus_the_way_cuda_reads_it():
    """A run started with CUDA_VISIBLE_DEVICES set uses those GPUs, in that order, numbered from 0 as torch's cuda:N
    counts them; each keeps nvidia-smi's index, which its workers' CUDA_VISIBLE_DEVICES names."""
    from harness.run import meta
    listed = meta.parse_gpus(FOUR)
    seen = lambda setting: [(g["index"], g["machine_index"], g["visible_as"])    # noqa: E731
                            for g in meta.visible(listed, setting)]
    assert seen(None) == [(0, 0, "0"), (1, 1, "1"), (2, 2, "2"), (3, 3, "3")]
    assert seen("2,0") == [(0, 2, "2"), (1, 0, "0")]
    assert seen(" 3 ") == [(0, 3, "3")]
    assert seen("GPU-77c1-02") == [(0, 1, "1")] and seen("GPU-a0") == [(0, 3, "3")]    # a UUID, a unique prefix
    assert seen("1,7,2") == [(0, 1, "1")]              # the first entry that names no GPU ends the list
    assert seen("GPU-77c") == [] and seen("1,1") == [(0, 1, "1")]                     # ambiguous; named twice
    assert seen("") == [] and seen("-1") == [] and seen("MIG-5d1c") == []
    assert meta.visible(listed, "2")[0]["uuid"] == "GPU-77c9-03"


def test_a_gpu_at_work_for_another_process_as_a_run_starts_is_named_in_one_line():
    """Two runs meant for two GPUs that land on one perturb every time either measures: a GPU of the run that
    nvidia-smi shows in use (kernels running, memory held, processes on it) is said once, as the run starts."""
    from harness.run import gpubusy, meta
    from harness.run.schedule import Slot
    listed = meta.visible(meta.parse_gpus(FOUR), "1,2")
    usage = ("0, GPU-3f2a-01, 97, 40000\n1, GPU-77c1-02, 88, 30211\n2, GPU-77c9-03, 0, 0\n"
             "3, GPU-a0b4-04, 0, 4")
    apps = "GPU-77c1-02, 4242\nGPU-77c1-02, 4243\nGPU-3f2a-01, 17"
    seen = gpubusy.parse(usage, apps)
    assert seen[1] == gpubusy.Activity(88, 30211, (4242, 4243)) and not seen[2].busy() and not seen[3].busy()
    slots = [Slot("cuda:0", 0, visible_as="1"), Slot("cuda:1", 1, visible_as="2")]
    busy = gpubusy.check(slots, listed, seen)
    assert [info["machine_index"] for _, info in busy] == [1]          # GPU 0 is busy, but this run does not use it
    text, info = busy[0]
    assert text.startswith("cuda:0 (the machine's GPU 1) is at work before this run starts: 88% utilization, "
                           "30211 MiB in use, 2 other processes (pid 4242, 4243)")
    assert info == {"slot": "cuda:0", "machine_index": 1, "utilization_pct": 88, "memory_used_mib": 30211,
                    "pids": (4242, 4243)}
    assert gpubusy.Activity(6, 0).busy() and gpubusy.Activity(0, 2048).busy() and not gpubusy.Activity(4, 500).busy()
    assert gpubusy.check([Slot("cpu", None)], listed, seen) == [] and gpubusy.parse(None, None) == {}
    mine = gpubusy.parse("0, GPU-3f2a-01, 0, 9000", "GPU-3f2a-01, 55")       # harness.api's caller holds CUDA memory
    assert gpubusy.check([Slot("cuda:0", 0)], meta.visible(meta.parse_gpus(FOUR), None), mine, own=55) == []
