"""harness.worker.verify: comparing a candidate's outputs with the reference's."""
from __future__ import annotations

import torch

from harness.worker.verify import compare_outputs, compare_tensor


def test_compare_tolerance_nan_and_shape():
    ref = torch.tensor([1.0, 2.0, float("nan"), 0.0])
    assert compare_tensor(ref.clone(), ref, 1e-4, 1e-4)["ok"]
    off = ref.clone()
    off[1] = 2.0 + 2.1e-4 + 1e-4                      # just over atol + rtol*|2|
    result = compare_tensor(off, ref, 1e-4, 1e-4)
    assert not result["ok"] and result["first_mismatch"]["index"] == [1]
    nan = ref.clone()
    nan[0] = float("nan")
    assert "NaN" in compare_tensor(nan, ref, 1e-4, 1e-4)["reason"]
    assert "shape" in compare_tensor(ref[:3], ref, 1e-4, 1e-4)["reason"]
    assert "dtype" in compare_tensor(ref.double(), ref, 1e-4, 1e-4)["reason"]
    assert "2 outputs, expected 1" in compare_outputs([ref, ref], [ref], 1e-4, 1e-4)["reason"]


def test_compare_multi_dim_index():
    ref = torch.zeros(3, 4)
    out = ref.clone()
    out[2, 1] = 1.0
    assert compare_tensor(out, ref, 1e-4, 1e-4)["first_mismatch"]["index"] == [2, 1]
