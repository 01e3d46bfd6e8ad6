"""An output's memory layout against the reference's.

A candidate whose output has the reference's values in another layout skipped the layout's work: a problem that
transposes and copies (`x.t().contiguous()`) answered with a plain copy viewed transposed reads several times faster,
and every element is right. So where the reference's output is contiguous, the timed call delivers a contiguous
one: the worker copies an output that is not into that layout inside the call (`conform`), and the copy is timed
with it. A candidate whose own layout differs (a channels_last output for a contiguous reference) pays that copy, as
the reference pays its layout. Where the reference returns another layout (a permuted view, channels_last) nothing
is held to it (`orders`). The trusted side then reads each timed output's strides (harness.run.defenses): an output
still in another layout means the worker's copy was skipped, and the pair is `output_changed_under_timing`.

`orders`, `dense_in`, `reordered` and `folded` (an output whose elements share memory, where the reference's do
not) work on shapes and strides alone (the parent's side); `conform` needs torch (the workers').
"""
from __future__ import annotations

from typing import Any, Sequence


def dense_in(shape: Sequence[int], strides: Sequence[int], dims: Sequence[int]) -> bool:
    """Whether a layout is a dense one (no gaps, no overlaps) with its dimensions in the order `dims` (outermost
    first); the strides of dimensions of size 1 do not matter, nor do any where the tensor has no element."""
    if len(dims) != len(shape) or any(n == 0 for n in shape):
        return len(dims) == len(shape)
    expected = 1
    for d in reversed(dims):
        if shape[d] != 1 and strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def orders(shapes: Sequence[Sequence[int]] | None, strides: Sequence[Sequence[int]] | None) -> list | None:
    """The layout each reference output holds the candidate's to: its order where it is contiguous (dimensions in
    their own order), else None: a reference that returns a permuted or channels_last layout paid nothing for it a
    candidate could skip, and holding a candidate to it would make one that writes contiguous memory pay a copy.
    None where the reference did not say its strides."""
    if not shapes or not strides or len(shapes) != len(strides):
        return None
    return [list(range(len(shape))) if len(shape) == len(stride) and dense_in(shape, stride, range(len(shape)))
            else None for shape, stride in zip(shapes, strides)]


def reordered(cand: list | None, orders_: list | None) -> str | None:
    """Why a timed output (shape, strides) is not in its reference's layout (the worker's copy into that layout was
    skipped), or None. `orders_`: each reference output's (`orders`); outputs held to none, or that have another
    number of dimensions, are not checked."""
    for j, ((shape, strides), dims) in enumerate(zip(cand or [], orders_ or [])):
        if dims is not None and len(shape) == len(dims) and not dense_in(shape, strides, dims):
            return (f"output {j}'s strides {list(strides)} for shape {list(shape)} are not in the reference's layout "
                    f"(its dimensions from the outermost: {list(dims)}): the copy into that layout, made in its "
                    f"process inside the timed call, was skipped")
    return None


def folded(cand: list | None, ref: list | None) -> str | None:
    """Why a timed output's strides (shape, strides) let its elements share memory where the reference output's do
    not (a row computed once and expanded, a stride of 0): the values read at points can be right while the work
    was not done."""
    from harness.shared.points import overlapping
    for j, ((shape, strides), (_, ref_strides)) in enumerate(zip(cand or [], ref or [])):
        if overlapping(shape, strides) and not overlapping(shape, ref_strides):
            return (f"output {j}'s strides {strides} for shape {shape} let its elements share memory (the "
                    f"reference's {ref_strides} do not)")
    return None


def conform(out: Any, orders_: list | None) -> Any:
    """`out` (a tensor, or a list or tuple of them) with every output that is not dense in its reference's order
    copied into that order; an output that is, or that is not a plain tensor (its own type's methods are candidate
    code), or that has another number of dimensions, as it is."""
    if not orders_:
        return out
    import torch
    if type(out) is torch.Tensor:
        return _one(out, orders_[0])
    if type(out) in (list, tuple):
        return type(out)(_one(t, o) for t, o in zip(out, list(orders_) + [None] * (len(out) - len(orders_))))
    return out


def _one(t: Any, dims: list[int] | None) -> Any:
    import torch
    if dims is None or type(t) is not torch.Tensor or t.layout != torch.strided or t.dim() != len(dims):
        return t
    if dense_in(t.shape, t.stride(), dims):
        return t
    back = sorted(range(len(dims)), key=dims.__getitem__)       # the permutation that undoes `dims`
    return t.permute(dims).contiguous().permute(back)
