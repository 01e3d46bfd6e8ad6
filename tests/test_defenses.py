"""harness.run.defenses: the custom-kernel checks on profiled calls."""
from __future__ import annotations

import pytest


FUSED = {"kernels": 4, "custom_kernels": ["fused_bn_relu"], "custom_share": 0.28}


@pytest.mark.parametrize("profiles, flags", [
    ([{"kernels": 3, "custom_kernels": [], "custom_share": 0.0}], ["no_custom_kernel"]),
    ([{"kernels": 9, "custom_kernels": ["bias_add"], "custom_share": 0.04}], ["little_custom_work"]),
    ([FUSED, FUSED, FUSED], []),
    ([FUSED, {"kernels": 2, "custom_kernels": [], "custom_share": 0.0}, FUSED], ["no_custom_kernel"]),  # once is enough
    ([FUSED, {**FUSED, "custom_share": 0.04}], ["little_custom_work"]),                      # the least share counts
    (["not an object"], []),                                                  # read as no profile at all
    ([None, None, None], []),                                                                  # the CPU path
])
def test_custom_kernel_share_warnings(profiles, flags):
    from harness.run import defenses
    from harness.results.records import RecordDraft
    from harness.shared import messages as m
    record = RecordDraft.from_json({"flags": []})
    parsed = [m.parse(m.Profile, {"other_kernels": [], **p}) if isinstance(p, dict) else None for p in profiles]
    defenses.check_kernels(record, parsed)
    assert record.flags == flags
    if flags == ["little_custom_work"]:
        assert "4.0%" in record.flag_details["little_custom_work"]
    if flags == ["no_custom_kernel"] and len(profiles) == 3:
        assert "1 of 3 profiled calls" in record.flag_details["no_custom_kernel"]
    if any(isinstance(p, dict) for p in profiles):
        assert record.kernels.profiled_calls == len(profiles)
