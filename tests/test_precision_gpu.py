"""The reduced-precision rule on the GPU (docs/precision.md; skipped where there is no CUDA device): a TF32 matmul
and a 3xBF16 split product inside the tolerance are `reduced_precision`, an honest fp32 matmul is `ok`.

Runs run_eval.py on tests/fixtures/gpu_tree's 002_square_matmul_fp32 alone (2048^3, tolerance loose enough that
TF32 passes it). split_bf16's error is inside the 64x magnitude rule: it is caught by its signature, which needs
the reference worker to send `precision_signature` with trial 0's check (docs/precision.md, Wiring)."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, cuda_available, json_records, run_cli, write_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def precision_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("precision_gpu")
    config = write_config(tmp, FIXTURES / "gpu_tree")
    done = run_cli("--config", str(config), "--device", "cuda", "--json", "--timeout", "60", "--timing-mode", "cold",
                   "--problem", "*002_square_matmul_fp32")
    assert done.returncode == 0, done.stderr
    return json_records(done.stdout)


@pytest.mark.parametrize("candidate", ["tf32_matmul", "split_bf16"])
def test_reduced_precision_inside_the_tolerance_is_flagged(precision_run, candidate):
    record = precision_run[candidate]
    assert record["correctness"]["trials_passed"] == record["correctness"]["trials"], record["error"]
    assert record["status"] == "invalid" and "reduced_precision" in record["flags"], (record["error"],
                                                                                       record["correctness"])


def test_honest_fp32_is_not_flagged(precision_run):
    record = precision_run["honest_fp32"]
    assert record["status"] == "ok", (record["error"], record["flags"])
    assert "reduced_precision" not in record["flags"]
    corr = record["correctness"]
    assert corr["fp64_max_abs_err"] <= 8 * corr["fp64_reference_max_abs_err"], corr


@pytest.mark.parametrize("scheme", ["bf16x3", "bf16x3:rz"])
def test_a_large_bf16x3_correction_keeps_one_output_on_the_device_with_the_same_values(monkeypatch, scheme):
    """Issue 44 item 8: a bf16x3 signature forward on the GPU keeps one output-sized float64 tensor on the device,
    not two (matmul_small_k's reference was over 2x eager + 1.5 GiB for it). Where the output's rows are the first
    operand's (mm), its lo*lo product is made and subtracted a slice of rows at a time on the device; where they are
    not (here: mm taken as if they were not), it waits on the host while the main product is made. Each gives the
    values of both products made whole on the device: the host path bit for bit, the sliced one up to float64's
    rounding of the sums."""
    import torch
    from harness.worker import precision
    torch.manual_seed(0)
    a = torch.randn(4096, 32, dtype=torch.float64, device="cuda")
    b = torch.randn(32, 4096, dtype=torch.float64, device="cuda")
    output = 4096 * 4096 * 8

    def forward() -> tuple[torch.Tensor, int]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        with precision.Rounded(scheme) as mode:
            out = torch.mm(a, b)
        assert mode.rounded == 1
        torch.cuda.synchronize()
        return out, torch.cuda.max_memory_allocated() - start

    row_wise = precision._row_wise
    monkeypatch.setattr(precision, "_row_wise", lambda *args: False)
    monkeypatch.setattr(precision, "HOST_BYTES", 1 << 62)              # both products on the device
    both, both_peak = forward()
    monkeypatch.setattr(precision, "HOST_BYTES", 1 << 20)
    monkeypatch.setattr(precision, "COPY_ELEMENTS", 1 << 20)            # sub_into: 256 rows a slice
    host, host_peak = forward()
    monkeypatch.setattr(precision, "_row_wise", row_wise)
    monkeypatch.setattr(precision, "SLICE_BYTES", 1 << 24)              # 16 MiB: 512 rows a slice
    rows, rows_peak = forward()
    assert torch.equal(both, host)
    assert torch.allclose(rows, both, rtol=1e-13, atol=1e-12)
    assert both_peak >= 2 * output > host_peak >= output, (both_peak, host_peak)
    assert 2 * output > rows_peak >= output, rows_peak
