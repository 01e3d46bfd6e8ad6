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
