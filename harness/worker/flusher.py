"""The cache flush before every staged sample, in a process of its own (README, Hardening: the candidate's process
runs the call and nothing else).

Before every staged sample the parent asks this process, which holds no torch, no problem and no candidate code,
to empty the caches: on the CPU path it writes twice the last-level cache, and enough to empty each core's own
caches from every core of the pair's slot; on the GPU it writes twice the L2 (at least 128 MiB) from a CUDA context
of its own, through the driver (ctypes on libcuda, no torch), after making lines a call marked persisting normal
again. Both sides' calls then start from the same state: on the CPU their inputs, their own code and data, and the
memory their allocator hands out all come from memory, and the core last ran this process, not the one about to be
timed (a side that had just staged its own inputs started warmer than one woken from a stop); on the GPU each call
is the first work of its context after another context's (the reference, which stages every sample's inputs,
would otherwise run its own calls with no switch of context before them and the candidate's after one, which gave
the candidate's samples unexplained time of their own and put an A/A pair of a memory-bound call far from 1.0:
docs/measurements.md). In graph mode, whose samples are hot, the flusher writes a few bytes only, for that switch.
The candidate's process cannot touch the flush, skip it or work behind it.

Runs only inside its worker process.
"""
from __future__ import annotations

import ctypes
import glob
import os
import time
from typing import Any

from harness.shared import messages as m

MIN_BYTES, MAX_BYTES, ASSUMED_CACHE = 16 << 20, 512 << 20, 32 << 20


def cpu_cache_bytes(sysfs: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """The largest data cache the first core sees (its last level), from sysfs; 0 where sysfs says nothing."""
    largest = 0
    for index in glob.glob(os.path.join(sysfs, "index*")):
        try:
            with open(os.path.join(index, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(os.path.join(index, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            largest = max(largest, int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            continue
    return largest


def flush_bytes(cache_bytes: int | None = None) -> int:
    """Twice the last-level cache (ASSUMED_CACHE where sysfs does not say), within MIN_BYTES and MAX_BYTES."""
    size = cpu_cache_bytes() if cache_bytes is None else cache_bytes
    return min(max(2 * (size or ASSUMED_CACHE), MIN_BYTES), MAX_BYTES)


PRIVATE_BYTES = 8 << 20          # more than any core's own L1 and L2 (1-2 MiB on current x86 server cores)


class Flush:
    """A buffer of flush_bytes(), written with a new value every time (no write can be skipped): whole from the
    first of `cores` (the shared last-level cache), then PRIVATE_BYTES of it from each other one, so that no core
    the timed side may run on keeps its own caches warm (a last-level cache that is not inclusive leaves the other
    cores' L1 and L2 as they were)."""

    def __init__(self, nbytes: int, cores: list[int] | None = None):
        self.nbytes = nbytes
        self.buffer = (ctypes.c_char * nbytes)()
        self.value = 0
        self.cores = cores or []

    def __call__(self) -> float:
        """One flush; its time in ms."""
        t0 = time.perf_counter_ns()
        self.value = (self.value % 255) + 1
        for i, core in enumerate(self.cores or [None]):
            if core is not None:
                try:
                    os.sched_setaffinity(0, {core})
                except OSError:
                    continue                        # a core this process may not use: its caches are not ours
            ctypes.memset(self.buffer, self.value, self.nbytes if i == 0 else min(self.nbytes, PRIVATE_BYTES))
        return (time.perf_counter_ns() - t0) / 1e6


def slot_cores() -> list[int]:
    """The cores the pair's workers run on (KB_CPUS), else those this process may use."""
    try:
        return sorted({int(c) for c in os.environ.get("KB_CPUS", "").split(",") if c.strip()}) or \
            sorted(os.sched_getaffinity(0))
    except (ValueError, OSError, AttributeError):
        return []


GPU_MIN_BYTES = 128 << 20       # the GPU flush: twice the L2, at least this
CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38


class DeviceFlushError(Exception):
    """The driver refused a step of the GPU flusher's setup or flush (message says which)."""


class DeviceFlush:
    """The GPU's L2 flush from a context of this process's own, through the CUDA driver: a write of max(2 x L2,
    GPU_MIN_BYTES) with a new value every time, after cuCtxResetPersistingL2Cache; or, `hot`, of 4 bytes."""

    def __init__(self, ordinal: int, nbytes: int = 0):
        lib = ctypes.CDLL("libcuda.so.1")
        u64 = ctypes.c_uint64
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
        lib.cuMemsetD32_v2.argtypes = [u64, ctypes.c_uint, ctypes.c_size_t]
        self.lib = lib
        self._check(lib.cuInit(0), "cuInit")
        device, context, l2 = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_int()
        self._check(lib.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
        self._check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
        self._check(lib.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        self._check(lib.cuDeviceGetAttribute(ctypes.byref(l2), CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device),
                    "cuDeviceGetAttribute")
        self.nbytes = (nbytes or max(2 * l2.value, GPU_MIN_BYTES)) // 4 * 4
        self.address = u64()
        self._check(lib.cuMemAlloc_v2(ctypes.byref(self.address), self.nbytes), "cuMemAlloc")
        self.value = 0

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            raise DeviceFlushError(f"{what} failed (CUresult {result})")

    def __call__(self, hot: bool = False) -> float:
        """One flush (or, `hot`, a 4-byte write), finished on the device; its time in ms."""
        t0 = time.perf_counter_ns()
        self.value = (self.value + 1) & 0x7FFFFFFF
        if not hot:
            self.lib.cuCtxResetPersistingL2Cache()      # best effort: a GPU without persisting lines has none
        self._check(self.lib.cuMemsetD32_v2(self.address, self.value, 1 if hot else self.nbytes // 4),
                    "cuMemsetD32")
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")
        return (time.perf_counter_ns() - t0) / 1e6


def _ordinal(device: str) -> int:
    """The device index in "cuda:N" (0 for "cuda": each worker sees only its slot's GPU)."""
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


def run(conn, data: dict[str, Any]) -> None:
    job = m.parse(m.FlusherJob, data)
    if job.device == "cpu":
        host = Flush(job.nbytes or flush_bytes(), slot_cores())   # every core the timed sides may run on
        flush = lambda hot: host()                  # noqa: E731 - the CPU path has no hot samples
        nbytes = host.nbytes
    else:
        device = DeviceFlush(_ordinal(job.device), job.nbytes)
        flush, nbytes = device, device.nbytes
    flush(False)                                    # its pages faulted in before the first sample
    conn.reply(m.FlusherReady(nbytes))
    while True:
        message = conn.recv()
        if message.get("op") != m.FlushRequest.OP:
            return
        req = m.parse(m.FlushRequest, message)
        conn.reply(m.Flushed(flush(req.hot)))
