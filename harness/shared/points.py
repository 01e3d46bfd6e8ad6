"""Where a check looks in an output, and how the bytes found there become numbers. Plain arithmetic, no torch: the
parent (which reads a CPU candidate's memory itself, harness.run.peek) and the workers (harness.worker.rawread, the
reference's reads of a GPU candidate's memory) draw the same positions from the same seed.

A check seed is drawn by the parent after the call it checks has returned and its output has been handed over
(README, Hardening: commit, then check); the worker that made the output never sees it.
"""
from __future__ import annotations

import math
import struct

CHECK_POINTS = 256               # positions per output tensor read by the trusted side after every timed sample
TENSOR_STRIDE = 7919             # tensor j of an output draws its positions from seed + TENSOR_STRIDE * j
SLOT_STRIDE = 104729             # the output of captured call k (graph mode) from seed + SLOT_STRIDE * k

_MASK = (1 << 64) - 1
_unpack_from = struct.unpack_from    # bound at import, before candidate code runs in a worker (integrity watches it)
FORMATS = {"torch.float32": "<f", "torch.float64": "<d", "torch.float16": "<e", "torch.int64": "<q",
           "torch.int32": "<i", "torch.int16": "<h", "torch.int8": "<b", "torch.uint8": "<B", "torch.bool": "<?",
           "torch.complex64": "<f", "torch.complex128": "<d"}      # complex: the real part, as torch's .to() reads
SIZES = {"torch.float32": 4, "torch.float64": 8, "torch.float16": 2, "torch.bfloat16": 2, "torch.int64": 8,
         "torch.int32": 4, "torch.int16": 2, "torch.int8": 1, "torch.uint8": 1, "torch.bool": 1,
         "torch.complex64": 8, "torch.complex128": 16}


class PointError(ValueError):
    """An output's description cannot be read (message says why)."""


def positions(seed: int, numel: int, count: int) -> list[int]:
    """`count` flat indices in [0, numel) drawn from `seed` (splitmix64), the same in every process."""
    state, out = seed & _MASK, []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & _MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        out.append((z ^ (z >> 31)) % numel)
    return out


def tensor_positions(seed: int, j: int, numel: int, points: int = CHECK_POINTS) -> list[int]:
    """The positions checked in tensor j of an output."""
    return positions(seed + TENSOR_STRIDE * j, numel, min(points, numel)) if numel > 0 else []


def output_positions(seed: int, slot: int, j: int, numel: int) -> list[int]:
    """The positions checked in tensor j of the output of captured call `slot` (cold and host samples: slot 0)."""
    return tensor_positions(seed + SLOT_STRIDE * slot, j, numel)


def numel(shape: list[int]) -> int:
    return math.prod(shape) if shape else 1


def span(shape: list[int], strides: list[int]) -> int:
    """Elements from a strided tensor's first element to its last, inclusive (0 for an empty tensor)."""
    if not numel(shape):
        return 0
    return sum((d - 1) * s for d, s in zip(shape, strides)) + 1


def overlapping(shape: list[int], strides: list[int]) -> bool:
    """Whether a strided layout may give two elements one address: taken dimension by dimension from the smallest
    stride, each must step past everything the smaller ones span (a stride of 0, an expanded or an as_strided view
    that folds onto itself). A layout that passes is certainly free of overlap; a few exotic ones that interleave
    their dimensions fail it, which is why callers compare with the reference's layout."""
    reach = 0
    for size, stride in sorted((p for p in zip(shape, strides) if p[0] > 1), key=lambda p: abs(p[1])):
        if abs(stride) <= reach:
            return True
        reach += (size - 1) * abs(stride)
    return False


def offsets(shape: list[int], strides: list[int], flat: list[int]) -> list[int]:
    """Element offsets (from the first element) of row-major flat indices under `strides`."""
    if len(shape) != len(strides):
        raise PointError(f"shape {shape} and strides {strides} differ in length")
    out = []
    for index in flat:
        offset = 0
        for dim in range(len(shape) - 1, -1, -1):
            index, i = divmod(index, shape[dim])
            offset += i * strides[dim]
        out.append(offset)
    return out


def decode(dtype: str, raws: list[bytes]) -> list[float]:
    """Element bytes as floats (bfloat16 widened, complex: the real part)."""
    if dtype == "torch.bfloat16":
        return [_unpack_from("<f", b"\0\0" + raw)[0] for raw in raws]
    fmt = FORMATS.get(dtype)
    if fmt is None:
        raise PointError(f"cannot read dtype {dtype} from memory")
    return [float(_unpack_from(fmt, raw)[0]) for raw in raws]


def same(a: list[float], b: list[float]) -> bool:
    """Equal value for value, NaN equal to NaN."""
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))
