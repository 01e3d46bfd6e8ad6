"""The parent reads a CPU worker's memory itself (Linux `process_vm_readv`), with the worker stopped: how a CPU
candidate's timed outputs are checked without its process taking part (README, Hardening: commit, then check).

The worker hands over only where its output lies (messages.Exported: dtype, shape, strides, address); the parent
draws the positions after that (harness.shared.points) and reads the bytes from the worker's address space. Whatever the
worker claims, what is read is what its memory holds: a wrong address reads wrong values or fails, and either is
a failed check. No torch here.
"""
from __future__ import annotations

import ctypes
import errno
import os

from harness.shared import points

_IOV_MAX = 1024
SPAN_BYTES = 1 << 20             # positions within this many bytes are read with one copy


class PeekError(Exception):
    """The worker's memory could not be read (message says why)."""


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = None


def _readv():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                                           ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_ulong]
        _libc.process_vm_readv.restype = ctypes.c_ssize_t
    return _libc.process_vm_readv


def read_bytes(pid: int, address: int, nbytes: int) -> bytes:
    """`nbytes` at `address` in process `pid`."""
    return read_many(pid, [address], nbytes)[0] if nbytes else b""


def read_many(pid: int, addresses: list[int], size: int) -> list[bytes]:
    """`size` bytes at each address in process `pid` (one system call per 1024 addresses)."""
    out: list[bytes] = []
    for start in range(0, len(addresses), _IOV_MAX):
        chunk = addresses[start:start + _IOV_MAX]
        buffer = ctypes.create_string_buffer(size * len(chunk))
        local = _IoVec(ctypes.cast(buffer, ctypes.c_void_p), size * len(chunk))
        remote = (_IoVec * len(chunk))(*[_IoVec(a, size) for a in chunk])
        got = _readv()(pid, ctypes.byref(local), 1, remote, len(chunk), 0)
        if got != size * len(chunk):
            code = ctypes.get_errno() if got < 0 else errno.EFAULT
            raise PeekError(f"cannot read the worker's memory ({errno.errorcode.get(code, code)}: "
                            f"{os.strerror(code)})")
        raw = buffer.raw
        out += [raw[i * size:(i + 1) * size] for i in range(len(chunk))]
    return out


def read_points(pid: int, dtype: str, shape: list[int], strides: list[int], address: int,
                flat: list[int]) -> list[float]:
    """The values at row-major flat indices `flat` of a tensor that lies at `address` in process `pid`."""
    size = points.SIZES.get(dtype)
    if size is None:
        raise PeekError(f"cannot read dtype {dtype} from memory")
    addresses = [address + off * size for off in points.offsets(shape, strides, flat)]
    if not addresses:
        return []
    first = min(addresses)
    span = max(addresses) + size - first
    if span <= SPAN_BYTES:
        block = read_bytes(pid, first, span)
        raws = [block[a - first:a - first + size] for a in addresses]
    else:
        raws = read_many(pid, addresses, size)
    return points.decode(dtype, raws)


def mappings_of(pid: int, inode: int) -> list[tuple[int, int]]:
    """The address ranges [start, end) at which process `pid` maps the file with inode `inode` (/proc/<pid>/maps:
    every mapping, however the process made it). PeekError when its maps cannot be read."""
    ranges = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) >= 5 and fields[4] == str(inode):
                    start, end = fields[0].split("-")
                    ranges.append((int(start, 16), int(end, 16)))
    except (OSError, ValueError) as exc:
        raise PeekError(f"cannot read its memory map ({exc})") from None
    return ranges


def overlaps(start: int, nbytes: int, ranges: list[tuple[int, int]]) -> bool:
    return nbytes > 0 and any(start < end and lo < start + nbytes for lo, end in ranges)


def readable() -> str | None:
    """None when this process can read a child's memory here; else why not (one line)."""
    try:
        value = ctypes.c_int(12345)
        got = read_bytes(os.getpid(), ctypes.addressof(value), 4)
        return None if got == bytes(value) else "process_vm_readv read other bytes"
    except (PeekError, OSError, AttributeError) as exc:
        return str(exc)
