"""An output's layout against the reference's (harness.shared.layout): which layout a reference holds outputs to,
the copy into it that a timed call makes, and what the trusted side reads from the strides alone."""
import torch

from harness.shared import layout


def test_a_contiguous_reference_holds_its_outputs_to_that_layout_and_no_other_does():
    x = torch.randn(4, 6, 5)
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    shapes = [x.shape, x.permute(2, 0, 1).shape, cl.shape, x[:, ::2].shape, [4, 1]]
    strides = [x.stride(), x.permute(2, 0, 1).stride(), cl.stride(), x[:, ::2].stride(), [1, 7]]
    assert layout.orders(shapes, strides) == [[0, 1, 2], None, None, None, [0, 1]]   # size 1: any stride
    assert layout.dense_in(cl.shape, cl.stride(), [0, 2, 3, 1])
    assert not layout.dense_in(x[:, ::2].shape, x[:, ::2].stride(), [0, 1, 2])         # a view with gaps
    assert layout.orders(shapes, None) is None


def test_a_timed_output_is_copied_into_the_references_layout_and_only_then():
    reference = torch.randn(64, 96).t().contiguous()                        # (96, 64), contiguous
    dims = layout.orders([reference.shape], [reference.stride()])[0]
    view = torch.randn(64, 96).t()                                          # the same shape, transposed strides
    out = layout.conform(view, [dims])
    assert out.stride() == reference.stride() and torch.equal(out, view)    # the same values, the reference's layout
    same = torch.randn(96, 64)
    assert layout.conform(same, [dims]) is same                             # nothing to do: no copy
    pair = layout.conform((view, same), [dims, dims])
    assert type(pair) is tuple and pair[0].stride() == reference.stride() and pair[1] is same
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)      # channels_last for a contiguous one
    assert layout.conform(cl, [[0, 1, 2, 3]]).is_contiguous()
    assert layout.conform(view, None) is view and layout.conform(view, [None]) is view


def test_the_trusted_side_reads_a_skipped_copy_from_the_strides():
    dims = layout.orders([[96, 64]], [[64, 1]])
    assert dims == [[0, 1]]
    assert layout.reordered([([96, 64], [64, 1])], dims) is None
    assert layout.reordered([([96, 64], [1, 96])], dims).startswith("output 0's strides [1, 96]")
    assert layout.reordered([([32, 64], [1, 32])], dims) is not None       # another size: the same order
    assert layout.reordered([([96, 1], [1, 7])], dims) is None              # a size-1 dimension's stride
    assert layout.reordered([([96, 64], [1, 96])], layout.orders([[96, 64]], [[0, 1]])) is None   # expanded: none
    assert layout.reordered([([96, 64], [1, 96])], None) is None            # a reference that did not say
