"""An output's values read from its memory, not through torch.

Candidate code can replace any torch method in its process (Tensor.__getitem__, reshape, copy_, to) or register
its own kernels for torch's operators, so an output read through torch may show values its memory never held:
the empty tensor a cheat returned, filled in on the fly for exactly the positions read. This module reads a few
positions of each output straight from memory (ctypes.string_at on the host, cuMemcpyDtoH from the CUDA driver
on the device) with functions bound by `bind()` when the worker starts, before candidate code is imported, and
with tensor accessors taken from torch's C base class, which Python code cannot modify. The positions come from
the check seed (drawn by the parent after the call returned) through a generator written here in plain integer
arithmetic, so nothing candidate code can patch decides where to look.

Both workers read this way after every sample (the same per-sample work on both sides), before the output is
read through torch at all; harness.integrity watches this module's globals like the rest of the timing path.
Runs only inside worker processes.
"""
from __future__ import annotations

import ctypes
import math
import os
import struct
from typing import Any

from . import cudadriver

RAW_POINTS = 32                  # positions per output tensor read from memory after every sample
RETURN_POINTS = 8                # positions read the moment a call returns, and again at its check
SPAN_BYTES = 1 << 20             # positions within this many bytes are read with one copy

_MASK = (1 << 64) - 1
_FORMATS = {"torch.float32": "<f", "torch.float64": "<d", "torch.float16": "<e", "torch.int64": "<q",
            "torch.int32": "<i", "torch.int16": "<h", "torch.int8": "<b", "torch.uint8": "<B", "torch.bool": "<?",
            "torch.complex64": "<f", "torch.complex128": "<d"}      # complex: the real part, as torch's .to() reads

_string_at = ctypes.string_at
_create_buffer = ctypes.create_string_buffer
_unpack_from = struct.unpack_from
_urandom = os.urandom
# bound by bind(), each a module global so that harness.integrity sees one replaced
_data_ptr = _stride = _numel = _element_size = _storage = _storage_ptr = _storage_nbytes = None
_shape = _dtype = _is_cuda = None


class RawReadError(Exception):
    """An output cannot be read from memory (message says why)."""


def bind(cuda: bool) -> None:
    """Take the accessors and, on a CUDA worker, the driver's functions (harness.workers.cudadriver). Called once,
    before candidate code is imported."""
    import torch
    global _data_ptr, _stride, _numel, _element_size, _storage, _storage_ptr, _storage_nbytes
    global _shape, _dtype, _is_cuda
    base, storage = torch._C.TensorBase, torch._C.StorageBase
    _data_ptr, _stride, _numel, _element_size = base.data_ptr, base.stride, base.numel, base.element_size
    _storage, _storage_ptr, _storage_nbytes = base.untyped_storage, storage.data_ptr, storage.nbytes
    _shape, _dtype, _is_cuda = (vars(base)[name].__get__ for name in ("shape", "dtype", "is_cuda"))
    if cuda:
        cudadriver.bind()


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


def fresh_seed() -> int:
    """A seed nothing in this process could know before now."""
    return int.from_bytes(_urandom(8), "little")


def same(a: list[float], b: list[float]) -> bool:
    """Equal value for value, NaN equal to NaN."""
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


def read(outs: list, seed: int, points: int = RAW_POINTS) -> list[float]:
    """Values of each output at `points` positions drawn from seed + the tensor's index, read from memory, as
    floats (bfloat16 widened, complex: the real part). Raises RawReadError."""
    if _data_ptr is None:
        raise RawReadError("raw reads were not bound at worker start")
    values: list[float] = []
    synced = False
    for j, t in enumerate(outs):
        numel = _numel(t)
        if numel == 0:
            continue
        cuda = _is_cuda(t)
        if cuda and cudadriver.synchronize is None:
            raise RawReadError("a CUDA output in a worker bound without the CUDA driver")
        if cuda and not synced:
            _check(cudadriver.synchronize(), "cuCtxSynchronize")
            synced = True
        values.extend(_read_tensor(t, positions(seed + 7919 * j, numel, min(points, numel)), cuda))
    return values


def _read_tensor(t: Any, flat: list[int], cuda: bool) -> list[float]:
    dtype = str(_dtype(t))
    fmt = _FORMATS.get(dtype)
    if fmt is None and dtype != "torch.bfloat16":
        raise RawReadError(f"cannot read dtype {dtype} from memory")
    shape, strides, size, base = list(_shape(t)), list(_stride(t)), _element_size(t), _data_ptr(t)
    storage = _storage(t)
    lo = _storage_ptr(storage)
    hi = lo + _storage_nbytes(storage)
    addresses = []
    for index in flat:
        offset = 0
        for dim in range(len(shape) - 1, -1, -1):
            index, i = divmod(index, shape[dim])
            offset += i * strides[dim]
        address = base + offset * size
        if not (lo <= address and address + size <= hi):
            raise RawReadError("an output's strides reach outside its storage")
        addresses.append(address)
    first = min(addresses)
    span = max(addresses) + size - first
    if span <= SPAN_BYTES:                 # one copy for all (on the GPU, one driver call instead of 32)
        block = _copy_out(first, span, cuda)
        raws = [block[a - first:a - first + size] for a in addresses]
    else:
        raws = [_copy_out(a, size, cuda) for a in addresses]
    if dtype == "torch.bfloat16":
        return [_unpack_from("<f", b"\0\0" + raw)[0] for raw in raws]
    return [float(_unpack_from(fmt, raw)[0]) for raw in raws]


def _copy_out(address: int, size: int, cuda: bool) -> bytes:
    if not cuda:
        return _string_at(address, size)
    buffer = _create_buffer(size)
    _check(cudadriver.copy_dtoh(buffer, address, size), "cuMemcpyDtoH")
    return buffer.raw


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RawReadError(f"{what} failed (CUresult {result})")
