"""The reduced-precision signatures (docs/precision.md): the model's float64 forward with the operands of every
matmul and convolution rounded as a reduced-precision kernel rounds them, so that the reference can ask how much of
a candidate's error against float64 is that rounding's (harness.worker.verify.precision_signature).

The schemes, named in SCHEMES:
- `tf32:a`, `tf32:b`: one operand (a: the input of linear and convolutions, the left one of a matmul; b: the weight,
  the right one) rounded to nearest (ties to even) at 10 explicit mantissa bits, the products summed exactly. A TF32
  kernel rounds both and carries both signatures; one that splits an operand into two TF32 parts (2xTF32) one. They
  are kept apart because a pooled output averages one of them away (docs/precision.md);
- `bf16x3`: each operand split as hi = bf16(x), lo = bf16(x - hi), both to nearest, and the product taken as
  hi*hi + hi*lo + lo*hi (the lo*lo term dropped), summed exactly;
- `bf16x3:rz`: the same split by truncation (masking the low 16 bits, the cheap way in a kernel), whose dropped
  bits are other bits than the rounded split's.
The sums are exact (float64 over float32-sized operands), so the emulated output differs from the float64 reference
only by the operands' rounding: that difference is the scheme's signature, which no summation order of fp32
arithmetic reproduces. Runs in the reference worker only, where candidate code never runs; the mode intercepts the
model's own calls while it is active and nothing else.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from harness.worker.hostpin import host_empty

TF32_BITS = 10                 # explicit mantissa bits a TF32 operand keeps
BF16_BITS = 7                  # and a bfloat16 one

_BITS = {torch.float64: (torch.int64, 52), torch.float32: (torch.int32, 23)}
_EXPONENT = {torch.int64: 0x7FF << 52, torch.int32: 0xFF << 23}     # all ones: Inf or NaN
CHUNK_ELEMENTS = 1 << 22      # an operand is rounded this many elements at a time (32 MiB of float64)
COPY_ELEMENTS = 1 << 25       # copy_into: about this many elements a slice (256 MiB of float64)
HOST_BYTES = 256 << 20        # bf16x3's lo*lo product this large waits on the host while the main one is made
SLICE_BYTES = 64 << 20        # bf16x3's lo*lo product, where an op's output rows are its input's: this much a slice
ROWS_OF_A, ROWS_OF_BOTH = "a", "both"     # _row_wise: where an op's output rows come from


def round_mantissa(x: torch.Tensor, bits: int, truncate: bool = False) -> torch.Tensor:
    """`x` (float32 or float64) with `bits` explicit mantissa bits, to nearest with ties to even (`truncate`:
    toward zero), in its own dtype; NaN and Inf as they were. A float32 value rounded in float64 rounds as in
    float32 (the exponent range aside). A new contiguous tensor; beside it, temporaries of CHUNK_ELEMENTS."""
    out = _copy(x)
    _round_flat(out.view(-1), bits, truncate)
    return out


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst.copy_(src) (the same shape) a slice of dim 0 at a time, about COPY_ELEMENTS elements each. A slice from
    another device in another dtype crosses in its own dtype and is converted on dst's device: torch would convert
    it on the host first (one thread there: a 4 GiB float32 input took seconds a copy) and move twice the bytes."""
    if dst.dim() == 0 or dst.numel() == 0:
        dst.copy_(src)
        return
    convert = src.device != dst.device and src.dtype != dst.dtype
    for rows in _slices(dst):
        part = src[rows]
        dst[rows].copy_(part.to(dst.device) if convert else part)


def sub_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst.sub_(src) (the same shape), a slice of dim 0 at a time as copy_into takes them when src lies on another
    device: each slice crosses on its own, so no src-sized tensor is made on dst's device. Bit for bit dst - src."""
    if src.device == dst.device or dst.dim() == 0 or dst.numel() == 0:
        dst.sub_(src.to(dst.device))
        return
    for rows in _slices(dst):
        dst[rows].sub_(src[rows].to(dst.device))


def _slices(t: torch.Tensor):
    """Slices of t's dim 0 of about COPY_ELEMENTS elements each (t has a dim 0 and elements)."""
    rows = max(1, COPY_ELEMENTS * t.shape[0] // t.numel())
    return [slice(i, i + rows) for i in range(0, t.shape[0], rows)]


def _to_host(x: torch.Tensor) -> torch.Tensor:
    """x, or where it lies on an accelerator and holds at least HOST_BYTES, a copy of it on the host (x's device
    memory goes with the caller's last reference to it), in pinned memory where it can be had: on an H200 a 1 GiB
    copy into fresh pageable memory took 0.85 s, pinning 1 GiB 0.50 s and the copy into it 0.02 s, and torch keeps a
    freed pinned block for the next scheme's (docs/measurements.md, twenty-first session)."""
    if x.device.type == "cpu" or x.numel() * x.element_size() < HOST_BYTES:
        return x
    host = host_empty(x.shape, x.dtype)
    copy_into(host, x)
    return host


def _copy(x: torch.Tensor) -> torch.Tensor:
    """x's values in a new contiguous tensor (Rounded's `own` where x cannot be rounded in place)."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    out.copy_(x.detach())                               # (a forward may turn autograd on)
    return out


def split(x: torch.Tensor, bits: int, truncate: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo): hi = x at `bits` mantissa bits, lo = (x - hi) at `bits` (x - hi is exact in x's dtype)."""
    hi = round_mantissa(x, bits, truncate)
    return hi, round_mantissa(x - hi, bits, truncate)


def _round_flat(x: torch.Tensor, bits: int, truncate: bool) -> None:
    """round_mantissa in place on a contiguous 1-D tensor, CHUNK_ELEMENTS at a time."""
    for i in range(0, x.numel(), CHUNK_ELEMENTS):
        _round_(x[i:i + CHUNK_ELEMENTS], bits, truncate)


def _round_(x: torch.Tensor, bits: int, truncate: bool) -> None:
    """round_mantissa in place on a contiguous slice, on its bits: to nearest adds half the dropped part's unit less
    one, plus the kept part's last bit (ties to even); then the dropped bits are cleared. Inf and NaN (an all-ones
    exponent) get neither, so they stay as they were, payload and all. Temporaries: one integer and one bool tensor
    of the slice's size (the whole-tensor formula held about five copies of the operand)."""
    int_type, total = _BITS[x.dtype]
    drop = total - bits
    raw = x.view(int_type)
    exponent = _EXPONENT[int_type]
    step = torch.bitwise_and(raw, exponent)
    special = step == exponent
    if not truncate:
        torch.bitwise_right_shift(raw, drop, out=step)
        raw.add_(step.bitwise_and_(1).add_((1 << (drop - 1)) - 1).masked_fill_(special, 0))
    torch.bitwise_and(raw, (1 << drop) - 1, out=step)
    raw.sub_(step.masked_fill_(special, 0))             # raw - (raw & dropped) is raw & ~dropped


# The product operands of each op the mode rounds (positions in args, with the keyword names they may come by),
# and how its additive term (a bias, or addmm's input) is left out of a correction term.
_BIAS, _BETA = "bias", "beta"
_PAIRS: dict[Any, tuple[tuple[int, str], tuple[int, str], str | None]] = {}
for _f in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.mm,
           torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.mv, torch.Tensor.mv, torch.dot, torch.Tensor.dot,
           torch.inner, torch.tensordot):
    _PAIRS[_f] = ((0, "input"), (1, "other"), None)
_CONVOLUTIONS = (F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)
for _f in (F.linear, *_CONVOLUTIONS):
    _PAIRS[_f] = ((0, "input"), (1, "weight"), _BIAS)
for _f in (torch.addmm, torch.Tensor.addmm, torch.baddbmm, torch.Tensor.baddbmm, torch.addbmm, torch.addmv):
    _PAIRS[_f] = ((1, "mat1"), (2, "mat2"), _BETA)


def _tf32(call: Callable, a: torch.Tensor, b: torch.Tensor, which: str, own: Callable = _copy) -> torch.Tensor:
    """One operand rounded as TF32 (`which`: "a", the input or left operand; "b", the weight or right one): a
    kernel that rounds both carries both signatures, one that splits the other operand (2xTF32) one of them.
    `own(x)`: x's values in a contiguous tensor to round in place (Rounded: a copy, or x itself)."""
    x = own(a if which == "a" else b)
    _round_flat(x.view(-1), TF32_BITS, False)
    return call(x, b, True) if which == "a" else call(a, x, True)


def _part(x: torch.Tensor, truncate: bool, kept: bool, own: Callable = _copy) -> torch.Tensor:
    """One half of split(x, BF16_BITS) as bf16x3 uses it (`kept`: hi + lo, as x - ((x - hi) - lo); else lo), in
    `own(x)` (a new contiguous tensor, or x itself: Rounded) worked out CHUNK_ELEMENTS at a time: at most one
    tensor of x's size beside it, and slice-sized temporaries."""
    out = own(x)
    flat = out.view(-1)
    for i in range(0, flat.numel(), CHUNK_ELEMENTS):
        xc = flat[i:i + CHUNK_ELEMENTS]                 # x, until it is overwritten
        rest = xc.clone()
        _round_(rest, BF16_BITS, truncate)              # hi
        torch.sub(xc, rest, out=rest)                   # x - hi, exact
        if not kept:
            xc.copy_(rest)
            _round_(xc, BF16_BITS, truncate)            # lo
            continue
        lo = rest.clone()
        _round_(lo, BF16_BITS, truncate)
        rest.sub_(lo)                                   # what the split drops
        del lo
        xc.sub_(rest)                                   # x - rest
    return out


def _bf16x3(call: Callable, a: torch.Tensor, b: torch.Tensor, truncate: bool, own: Callable = _copy,
            rows: str | None = None) -> torch.Tensor:
    """hi*hi + hi*lo + lo*hi as (hi + lo) * (hi + lo) - lo*lo: two exact products instead of three. Where the
    output's rows come from a's rows (`rows`: _row_wise), the lo*lo product is made and subtracted a slice of rows at
    a time (_rows_less_low).
    Else the lo*lo product first, so that beside the operands at most one part of each and two outputs are alive at
    once (an operand Rounded works on in place is written back by `call`, before its other part is made); on a GPU a
    lo*lo product of HOST_BYTES or more waits on the host meanwhile, so that one output-sized float64 tensor is on
    the device at a time (issue 44 item 8; the figures: docs/measurements.md)."""
    if rows:
        return _rows_less_low(call, a, b, truncate, own, rows == ROWS_OF_BOTH)
    a_lo, b_lo = _part(a, truncate, False, own), _part(b, truncate, False, own)
    low = _to_host(call(a_lo, b_lo, False))            # a large one waits on the host: one output on the device
    del a_lo, b_lo
    a_kept, b_kept = _part(a, truncate, True, own), _part(b, truncate, True, own)
    out = call(a_kept, b_kept, True)
    del a_kept, b_kept
    if out.shape == low.shape and out.is_contiguous() and not out.requires_grad:
        sub_into(out, low)                              # (contiguous: no element of it shares memory)
        return out
    return out - low.to(out.device)


def _rows_less_low(call: Callable, a: torch.Tensor, b: torch.Tensor, truncate: bool, own: Callable,
                   both: bool = False) -> torch.Tensor:
    """_bf16x3 where the output's rows are a's: the (hi + lo) * (hi + lo) product first, then the lo*lo product made
    and subtracted from it a slice of a's rows at a time (about SLICE_BYTES of output each; `both`: the same slice
    of b's rows with it, where dim 0 is a batch both share: bmm), with the parts made once for all slices (an
    operand rounded in place is written back after the last). One output-sized float64 tensor on the device, as on
    the host path, without an output's bytes crossing to the host and back: on an H200 that round trip was most of
    the derive (docs/measurements.md, twentieth session). The slices' products are the whole product's rows, up to
    float64's rounding of their sums, far below what the split drops."""
    a_kept, b_kept = _part(a, truncate, True, own), _part(b, truncate, True, own)
    out = call(a_kept, b_kept, True)
    del a_kept, b_kept
    a_lo, b_lo = _part(a, truncate, False, own), _part(b, truncate, False, own)
    if out.requires_grad or not out.is_contiguous() or out.dim() == 0 or out.shape[0] != a.shape[0]:
        return out - call(a_lo, b_lo, False)            # not as _row_wise promised: the whole product
    step = max(1, SLICE_BYTES * a.shape[0] // max(1, out.numel() * out.element_size()))
    for i in range(0, a.shape[0], step):
        low = call(a_lo[i:i + step], b_lo[i:i + step] if both else b_lo, False, written_back=False)
        if low.shape != out[i:i + step].shape:
            raise RuntimeError(f"bf16x3: a slice of rows gave {tuple(low.shape)}, not {tuple(out[i:i + step].shape)}")
        out[i:i + step].sub_(low)
        del low
    return out


_SCHEME: dict[str, Callable] = {
    "tf32:a": lambda call, a, b, own, rows: _tf32(call, a, b, "a", own),
    "tf32:b": lambda call, a, b, own, rows: _tf32(call, a, b, "b", own),
    "bf16x3": lambda call, a, b, own, rows: _bf16x3(call, a, b, False, own, rows),
    "bf16x3:rz": lambda call, a, b, own, rows: _bf16x3(call, a, b, True, own, rows),     # split by truncation
}
SCHEMES = tuple(_SCHEME)


class Rounded(TorchFunctionMode):
    """While active, each matmul-like op (matmul, mm, bmm, mv, dot, einsum of two operands, linear, addmm and
    kin, convolutions and transposed convolutions) computes with its floating operands rounded by `scheme`;
    `rounded` counts the calls it changed. Meant for a float64 forward: its sums are then exact at float32 sizes."""

    def __init__(self, scheme: str):
        super().__init__()
        self.scheme = _SCHEME[scheme]
        self.rounded = 0
        self._sources: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}     # source()

    def source(self, t: torch.Tensor, values: torch.Tensor) -> None:
        """`t` (a float64 input of the forward, contiguous) holds `values` (another copy of them: the float32 input
        on the host it was made from, harness.worker.float64.float64_reference). While t is unchanged since (its
        version counter), an operand that is t itself, sharing its memory with no other argument of the op, is
        rounded in place and written back from `values` once the op returns, instead of being rounded in a copy:
        a second operand-sized float64 tensor on the device (matrix_vector: 8 GiB beside its 8 GiB input)."""
        self._sources[id(t)] = (t, values, t._version)

    def forget(self) -> None:
        """No tensor of source() held any longer."""
        self._sources = {}

    def _scheme(self, func: Callable, a: torch.Tensor, b: torch.Tensor, tensors: list,
                rows: str | None = None) -> torch.Tensor:
        """self.scheme on the operands a and b of `func(x, y, keep_additive)` (every tensor argument in `tensors`),
        with an `own` that rounds a source() input in place and a call that writes it back after each product.
        `rows`: the output's rows (dim 0) come from a's rows (_row_wise), so a product may be made a slice of them
        at a time."""
        ptrs = [t.untyped_storage().data_ptr() for t in tensors]
        dirty: list = []

        def own(x: torch.Tensor) -> torch.Tensor:
            entry = self._sources.get(id(x))
            if entry is None or entry[0] is not x or entry[2] != x._version or not x.is_contiguous() or \
                    x.requires_grad or ptrs.count(x.untyped_storage().data_ptr()) != 1:
                return _copy(x)
            dirty.append(entry)
            return x

        def restore() -> None:
            while dirty:
                t, values, _ = dirty.pop()
                copy_into(t, values)
                self._sources[id(t)] = (t, values, t._version)

        def call(x, y, keep_additive: bool, written_back: bool = True):
            try:
                return func(x, y, keep_additive)
            finally:
                if written_back:                        # False: the next call reads the same rounded operand
                    restore()

        try:
            return self.scheme(call, a, b, own, rows)
        finally:
            restore()                                   # (where the scheme failed before its call)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.einsum:
            return self._einsum(args, kwargs)
        operands = _pair_operands(func, args, kwargs) if func in _PAIRS else None
        if operands is None:
            return func(*args, **kwargs)
        (i, ni), (j, nj), additive = _PAIRS[func]
        args, (a, b) = list(args), operands

        def call(x, y, keep_additive: bool):
            new_args, new_kwargs = list(args), dict(kwargs)
            _set(new_args, new_kwargs, i, ni, x)
            _set(new_args, new_kwargs, j, nj, y)
            if not keep_additive and additive == _BIAS:
                _set(new_args, new_kwargs, 2, _BIAS, None)
            elif not keep_additive and additive == _BETA:
                new_kwargs[_BETA] = 0
            return func(*new_args, **new_kwargs)

        self.rounded += 1
        return self._scheme(call, a, b, _tensors(args) + _tensors(kwargs.values()), _row_wise(func, a, b))

    def _einsum(self, args, kwargs):
        equation, operands = args[0], _einsum_operands(args)
        if operands is None:
            return torch.einsum(*args, **kwargs)
        self.rounded += 1
        return self._scheme(lambda x, y, _keep: torch.einsum(equation, x, y), *operands, operands)


class Products(TorchFunctionMode):
    """While active, counts the calls Rounded would round (`count`), changing nothing: whether a forward has any
    product for the signature forwards to round (harness.worker.reference._derive asks it of the FLOP count's
    forward, so that a problem with none is told without a float64 forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.einsum:                    # of any floating dtype: the float64 forward's are float64
            self.count += _einsum_operands(args, _any_floating) is not None
        elif func in _PAIRS:
            self.count += _pair_operands(func, args, kwargs, _any_floating) is not None
        return func(*args, **kwargs)


def _any_floating(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _einsum_operands(args, floating: Callable | None = None) -> list | None:
    """An einsum's two floating operands (`floating`: _floating), or None where it has another number of them, or
    one is not floating."""
    floating = floating or _floating
    operands = list(args[1:])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    return operands if len(operands) == 2 and all(floating(t) for t in operands) else None


def _pair_operands(func, args, kwargs, floating: Callable | None = None) -> tuple | None:
    """The product operands (a, b) of a _PAIRS op's call, or None where one is not floating (`floating`:
    _floating)."""
    floating = floating or _floating
    (i, ni), (j, nj), _ = _PAIRS[func]
    a, b = _arg(list(args), kwargs, i, ni), _arg(list(args), kwargs, j, nj)
    return (a, b) if floating(a) and floating(b) else None


def _row_wise(func, a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Where `func`'s output rows (dim 0) come from: ROWS_OF_A, the same rows of its first operand `a` alone, whatever
    `b` is (a batched convolution, dim 0 the batch; linear, mm and mv; matmul of a matrix or batch by a matrix or
    vector); ROWS_OF_BOTH, the same rows of `a` and of `b` (bmm, matmul of two batches of one size: dim 0 a batch
    they share); None: neither (addmm and baddbmm, whose additive term has the output's shape; an unbatched
    convolution; einsum)."""
    if func in _CONVOLUTIONS:
        return ROWS_OF_A if a.dim() == b.dim() else None
    if func is F.linear:
        return ROWS_OF_A if a.dim() >= 2 else None
    if func in (torch.mm, torch.Tensor.mm, torch.mv, torch.Tensor.mv):
        return ROWS_OF_A
    if func in (torch.bmm, torch.Tensor.bmm):
        return ROWS_OF_BOTH if a.dim() == b.dim() == 3 and a.shape[0] == b.shape[0] else None
    if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__):
        if a.dim() >= 2 and b.dim() <= 2:
            return ROWS_OF_A
        if a.dim() == b.dim() >= 3 and a.shape[0] == b.shape[0]:
            return ROWS_OF_BOTH
    return None


def _arg(args: list, kwargs: dict, i: int, name: str):
    return args[i] if i < len(args) else kwargs.get(name)


def _set(args: list, kwargs: dict, i: int, name: str, value) -> None:
    if i < len(args):
        args[i] = value
    else:
        kwargs[name] = value


def _tensors(items) -> list:
    """The tensors among `items`, and in the lists and tuples among them."""
    return [t for x in items for t in (x if isinstance(x, (list, tuple)) else [x]) if isinstance(t, torch.Tensor)]


def _floating(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in _BITS
