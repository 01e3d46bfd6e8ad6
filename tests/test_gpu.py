"""GPU pipeline and fault isolation, on a real CUDA device (skipped where there is none)."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, cuda_available, json_records, run_cli, write_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu")
    config = write_config(tmp, FIXTURES / "gpu_tree")
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "90", "--samples", "50")
    assert done.returncode == 0, done.stderr
    return json_records(done.stdout)


@pytest.mark.parametrize("candidate, status, words", [
    ("cuda_fused", "ok", None),
    ("illegal_address", "runtime_error", "illegal memory access"),
    ("hang_kernel", "timeout", "timeout"),
    ("oom", "oom", "out of memory"),
    ("zz_after_faults", "ok", None),
])
def test_gpu_verdicts(gpu_run, candidate, status, words):
    record = gpu_run[candidate]
    assert record["status"] == status, (record["error"], record["worker"])
    if words:
        assert words in record["error"].lower()
    else:
        assert record["flags"] == [] and record["error"] is None


def test_gpu_timing_uses_events_with_l2_flush(gpu_run):
    timing = gpu_run["cuda_fused"]["timing"]
    assert timing["clock"] == "cuda_event" and timing["l2_flush"] is True
    for side in ("reference", "candidate"):
        assert timing[side]["n"] == 50 and timing[side]["median_ms"] > 0
    assert gpu_run["cuda_fused"]["gpu"]["name"]
