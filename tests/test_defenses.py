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
    from harness.run import defenses, verdicts
    from harness.results.records import RecordDraft
    from harness.shared import messages as m
    record = RecordDraft.from_json({"flags": []})
    parsed = [m.parse(m.Profile, {"other_kernels": [], **p}) if isinstance(p, dict) else None for p in profiles]
    verdicts.write(record, defenses.check_kernels(parsed))
    assert record.flags == flags
    if flags == ["little_custom_work"]:
        assert "4.0%" in record.flag_details["little_custom_work"]
    if flags == ["no_custom_kernel"] and len(profiles) == 3:
        assert "1 of 3 profiled calls" in record.flag_details["no_custom_kernel"]
    if any(isinstance(p, dict) for p in profiles):
        assert record.kernels.profiled_calls == len(profiles)


@pytest.mark.parametrize("candidate_dtypes, shapes, failure", [
    (["torch.float32"], [[4]], None),
    (["torch.float16"], [[4]], "output dtype ['torch.float16'] != the reference's ['torch.float32']"),
    (["torch.float32"], [[2, 2]], "output shape [[2, 2]] != the reference's [[4]]"),
    (None, [[4]], None),                                      # a reply that described no dtype: values decide
])
def test_a_timed_output_is_held_to_the_references_dtype_and_shape(candidate_dtypes, shapes, failure):
    """Values alone could let a timed output in lower precision (float16 values within the tolerance) or another
    shape pass; the trusted read holds each timed output to the reference's dtype and shape for the same inputs."""
    from harness.run import defenses
    from harness.run.interleave import CANDIDATE, Collected
    from harness.run.trusted import Checked
    out = Collected()
    out.checks[7] = {"reference": Checked([1.0, 2.0], [[4]], dtypes=["torch.float32"]),
                     CANDIDATE: Checked([1.0, 2.0], shapes, dtypes=candidate_dtypes)}
    checked, full, found = defenses.check_timed_outputs(out, 1e-4, 1e-4)
    assert checked == 1 and full == []
    assert found == (failure and f"timed call 0: {failure}")


@pytest.mark.parametrize("candidate, reference, failure", [
    ([6, 1], [6, 1], None),                                   # contiguous, like the reference
    ([1, 4], [6, 1], None),                                   # transposed: no element shares memory
    ([0, 1], [6, 1], "output 0's strides [0, 1] for shape [4, 6] let its elements share memory (the "
                     "reference's [6, 1] do not)"),           # one row computed, expanded over the batch
    ([1, 1], [6, 1], "output 0's strides [1, 1] for shape [4, 6] let its elements share memory (the "
                     "reference's [6, 1] do not)"),           # an as_strided view folded onto itself
    ([0, 1], [0, 1], None),                                   # the reference's own output is expanded too
])
def test_a_timed_output_may_not_fold_its_elements_onto_each_other(candidate, reference, failure):
    """Issue 48 item 2: values read at points can be right in an output that computed one row and expanded it
    (a stride of 0) while the reference materialised every row; the timed output's strides are held to that."""
    from harness.run import defenses
    from harness.run.interleave import CANDIDATE, Collected
    from harness.run.trusted import Checked
    out = Collected()
    out.checks[7] = {"reference": Checked([1.0], [[4, 6]], layouts=[([4, 6], reference)]),
                     CANDIDATE: Checked([1.0], [[4, 6]], layouts=[([4, 6], candidate)])}
    checked, full, found = defenses.check_timed_outputs(out, 1e-4, 1e-4)
    assert checked == 1 and found == (failure and f"timed call 0: {failure}")
