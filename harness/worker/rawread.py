"""An output's values read from its memory, not through torch, and where an output lies for the trusted side.

Candidate code can replace any torch method in its process (Tensor.__getitem__, reshape, copy_, to), so the
harness's own reads in a worker use functions bound by `bind()` when the worker starts, before candidate code is
imported, and tensor accessors taken from torch's C base class, which Python code cannot modify:

  read(outs, seed)   a few positions straight from memory (ctypes.string_at on the host, cuMemcpyDtoH on the
                     device): the moment a call returns and again before the next sample, so that work still
                     filling the output after the call returned shows (`unsynchronized_work`);
  export(outs)       where each output lies (address, or CUDA IPC handle and offset), sent with the sample's
                     reply; the timed output's check is then made by a process the candidate cannot touch: the
                     parent (harness.run.peek) or the reference worker (harness.worker.peer), at positions drawn
                     after the reply (harness.shared.points).

Both workers do the same per-sample work; harness.worker.integrity watches this module's globals like the rest of the
timing path. Runs only inside worker processes.
"""
from __future__ import annotations

import base64
import ctypes
import os
from typing import Any

from harness.shared import points
from harness.worker import cudadriver

RETURN_POINTS = 8                # positions read the moment a call returns, and again before the next sample
SPAN_BYTES = 1 << 20             # positions within this many bytes are read with one copy

_string_at = ctypes.string_at
_create_buffer = ctypes.create_string_buffer
_urandom = os.urandom
_b64encode = base64.b64encode
# bound by bind(), each a module global so that harness.worker.integrity sees one replaced
_data_ptr = _stride = _numel = _element_size = _storage = _storage_ptr = _storage_nbytes = None
_shape = _dtype = _is_cuda = None
_device_outputs = False          # a CUDA worker's: its outputs are read on the device, a host tensor cannot be


class RawReadError(Exception):
    """An output cannot be read from memory (message says why)."""


def bind(cuda: bool) -> None:
    """Take the accessors and, on a CUDA worker, the driver's functions (harness.worker.cudadriver). Called once,
    before candidate code is imported."""
    import torch
    global _data_ptr, _stride, _numel, _element_size, _storage, _storage_ptr, _storage_nbytes
    global _shape, _dtype, _is_cuda, _device_outputs
    base, storage = torch._C.TensorBase, torch._C.StorageBase
    _data_ptr, _stride, _numel, _element_size = base.data_ptr, base.stride, base.numel, base.element_size
    _storage, _storage_ptr, _storage_nbytes = base.untyped_storage, storage.data_ptr, storage.nbytes
    _shape, _dtype, _is_cuda = (vars(base)[name].__get__ for name in ("shape", "dtype", "is_cuda"))
    _device_outputs = cuda
    if cuda:
        cudadriver.bind()


positions = points.positions
same = points.same


def fresh_seed() -> int:
    """A seed nothing in this process could know before now."""
    return int.from_bytes(_urandom(8), "little")


def read(outs: list, seed: int, count: int = RETURN_POINTS) -> list[float]:
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
        values.extend(_read_tensor(t, positions(seed + points.TENSOR_STRIDE * j, numel, min(count, numel)), cuda))
    return values


def _read_tensor(t: Any, flat: list[int], cuda: bool) -> list[float]:
    dtype = str(_dtype(t))
    if dtype not in points.SIZES:
        raise RawReadError(f"cannot read dtype {dtype} from memory")
    size, base, storage = _element_size(t), _data_ptr(t), _storage(t)
    lo = _storage_ptr(storage)
    hi = lo + _storage_nbytes(storage)
    addresses = [base + offset * size for offset in points.offsets(list(_shape(t)), list(_stride(t)), flat)]
    if not all(lo <= a and a + size <= hi for a in addresses):
        raise RawReadError("an output's strides reach outside its storage")
    first = min(addresses)
    span = max(addresses) + size - first
    if span <= SPAN_BYTES:                 # one copy for all (on the GPU, one driver call instead of 32)
        block = _copy_out(first, span, cuda)
        raws = [block[a - first:a - first + size] for a in addresses]
    else:
        raws = [_copy_out(a, size, cuda) for a in addresses]
    return points.decode(dtype, raws)


def _copy_out(address: int, size: int, cuda: bool) -> bytes:
    if not cuda:
        return _string_at(address, size)
    buffer = _create_buffer(size)
    _check(cudadriver.copy_dtoh(buffer, address, size), "cuMemcpyDtoH")
    return buffer.raw


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RawReadError(f"{what} failed (CUresult {result})")


def address_of(t: Any) -> int:
    """The address of a tensor's first element (the accessor bound at start)."""
    if _data_ptr is None:
        raise RawReadError("raw reads were not bound at worker start")
    return _data_ptr(t)


def export(outs: list) -> list[dict[str, Any]]:
    """Where each output tensor lies (messages.Exported, as dicts), for the trusted side to read: on the host its
    address in this process; on the device the IPC handle of the allocation that holds it and its offset there
    (cudadriver.export). Raises RawReadError for a tensor that cannot be described or exported, or that lies on
    the host in a CUDA worker (the trusted side could not map it: the trials then compare a file of it, and a timed
    sample's output is unreadable)."""
    if _data_ptr is None:
        raise RawReadError("raw reads were not bound at worker start")
    described = []
    for i, t in enumerate(outs):
        dtype = str(_dtype(t))
        if dtype not in points.SIZES:
            raise RawReadError(f"cannot read dtype {dtype} from memory")
        address, handle, on_device = _data_ptr(t), "", _is_cuda(t)
        if _device_outputs and not on_device and _numel(t):
            raise RawReadError(f"output {i} lies in host memory: on the GPU an output must be on the device")
        if on_device and _numel(t):
            if cudadriver.export is None:
                raise RawReadError("a CUDA output in a worker bound without the CUDA driver")
            raw, base = cudadriver.export(address)
            if raw is None:
                raise RawReadError(f"its memory cannot be exported to another process (CUresult {base})")
            address, handle = address - base, _b64encode(raw).decode("ascii")
        described.append({"dtype": dtype, "shape": list(_shape(t)), "strides": list(_stride(t)),
                          "address": address, "handle": handle})
    return described
