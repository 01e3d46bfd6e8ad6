"""How a candidate worker's outputs reach the reference worker: one raw file per call in the run's scratch
folder (/dev/shm where it exists).

Layout: 8 bytes of header length (little-endian), a JSON header (format, then per tensor dtype, shape, offset,
nbytes), then each tensor's bytes at a 64-byte aligned offset. The writer copies device tensors straight into
the memory-mapped file and the reader maps it and copies each tensor to the device: one copy each way, where
torch.save/torch.load made four (to host, clone, serialize, parse) and took seconds per GiB.

The file is written by candidate code's process, so the reader trusts nothing in it: the header is bounded,
dtypes come from an allow-list, shapes and offsets are checked against the file's size.
"""
from __future__ import annotations

import json
import math
import os
import struct
from typing import Any

FORMAT = "kb-tensors-1"
_ALIGN = 64
_MAX_HEADER = 1 << 20
_MAX_TENSORS = 1024
_DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "complex128", "int64", "int32", "int16",
           "int8", "uint8", "bool")


class TensorFileError(ValueError):
    """The file is not a well-formed tensor file (message says what is wrong)."""


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def write_tensors(tensors: list, path: str) -> str:
    """Write `tensors` (any device, any layout) to `path`; returns path."""
    import torch
    entries, offset = [], 0
    for t in tensors:
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _DTYPES:
            raise TensorFileError(f"cannot transport dtype {dtype}")
        nbytes = t.numel() * t.element_size()
        entries.append({"dtype": dtype, "shape": list(t.shape), "offset": offset, "nbytes": nbytes})
        offset = _aligned(offset + nbytes)
    header = json.dumps({"format": FORMAT, "tensors": entries}).encode()
    data_start = _aligned(8 + len(header))
    total = data_start + offset
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(total)
    if offset == 0:
        return path
    mapped = torch.from_file(path, shared=True, size=total, dtype=torch.uint8)
    for t, entry in zip(tensors, entries):
        if entry["nbytes"]:
            start = data_start + entry["offset"]
            dst = mapped[start:start + entry["nbytes"]].view(t.dtype).view(t.shape)
            dst.copy_(t.detach())
    del mapped
    return path


def write_raw(entries: list[tuple[str, int, bytes]], path: str) -> str:
    """Write 1-D tensors given as (dtype name, element count, their bytes) to `path`, in write_tensors's format,
    without torch: the parent's copy of a CPU candidate's output, read from its memory (harness.run.peek)."""
    heads, offset = [], 0
    for dtype, count, data in entries:
        heads.append({"dtype": dtype, "shape": [count], "offset": offset, "nbytes": len(data)})
        offset = _aligned(offset + len(data))
    header = json.dumps({"format": FORMAT, "tensors": heads}).encode()
    data_start = _aligned(8 + len(header))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for head, (_, _, data) in zip(heads, entries):
            f.seek(data_start + head["offset"])
            f.write(data)
        f.truncate(data_start + offset)
    return path


def read_tensors(path: str, device: str) -> list:
    """The tensors of a file written by write_tensors, copied to `device`. Raises TensorFileError."""
    import torch
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise TensorFileError("file too short for a header")
            (length,) = struct.unpack("<Q", head)
            if not 0 < length <= _MAX_HEADER or 8 + length > size:
                raise TensorFileError("header length out of range")
            header = json.loads(f.read(length).decode())
    except OSError as exc:
        raise TensorFileError(f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise TensorFileError("header is not JSON") from None
    entries = _checked_entries(header, size - _aligned(8 + length))
    data_start = _aligned(8 + length)
    mapped = torch.from_file(path, shared=False, size=size, dtype=torch.uint8) if size > data_start else None
    out = []
    for e in entries:
        dtype = getattr(torch, e["dtype"])
        if e["nbytes"] == 0:
            out.append(torch.empty(e["shape"], dtype=dtype, device=device))
            continue
        start = data_start + e["offset"]
        host = mapped[start:start + e["nbytes"]].view(dtype).view(e["shape"])
        out.append(host.to(device, copy=True))
    return out


def _checked_entries(header: Any, data_size: int) -> list[dict[str, Any]]:
    import torch
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TensorFileError("not a kb-tensors-1 file")
    entries = header.get("tensors")
    if not isinstance(entries, list) or len(entries) > _MAX_TENSORS:
        raise TensorFileError("no tensor list in the header")
    end = 0
    for e in entries:
        if not isinstance(e, dict) or e.get("dtype") not in _DTYPES:
            raise TensorFileError(f"bad tensor entry {str(e)[:80]}")
        shape, offset, nbytes = e.get("shape"), e.get("offset"), e.get("nbytes")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape) or len(shape) > 16:
            raise TensorFileError(f"bad shape {str(shape)[:80]}")
        if type(offset) is not int or type(nbytes) is not int or offset < end or offset % _ALIGN:
            raise TensorFileError("bad offset")
        if nbytes != math.prod(shape) * getattr(torch, e["dtype"]).itemsize or offset + nbytes > data_size:
            raise TensorFileError("tensor size does not match its shape or the file")
        end = offset + nbytes
    return entries
