"""FLOPs of one forward pass, counted with torch.utils.flop_counter's formulas (`flop_registry`) under a dispatch
mode of our own.

torch's FlopCounterMode counts the same way (ops it has no formula for are decomposed, the rest run and are
counted; higher-order ops are not), but entering any TorchDispatchMode whose `__torch_dispatch__` is wrapped by
`torch._disable_dynamo` imports torch._dynamo first, seconds a process (docs/measurements.md), which every
reference worker paid before its first pair could be checked. This mode says it needs no such wrapping (it never
runs under torch.compile), so counting costs what the forward costs. Counts match FlopCounterMode's
(tests/test_flops.py)."""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

# Metadata queries: not ops to run or count (FlopCounterMode skips them the same way).
_METADATA = {getattr(torch.ops.aten, name).default for name in (
    "is_contiguous", "is_strides_like_format", "is_non_overlapping_and_dense", "size", "sym_size", "stride",
    "sym_stride", "storage_offset", "sym_storage_offset", "numel", "sym_numel", "dim")
    if hasattr(torch.ops.aten, name)}


class _Counter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False                                   # see the module's docstring

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _METADATA or isinstance(func, torch._ops.HigherOrderOperator):
            return NotImplemented
        packet = func._overloadpacket
        formula = flop_registry.get(packet)
        if formula is None and func is not torch.ops.prim.device.default:
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out


def count(fn: Any, *args: Any) -> int:
    """The FLOPs `fn(*args)` performs (its result is dropped)."""
    counter = _Counter()
    with counter:
        fn(*args)
    return counter.total
