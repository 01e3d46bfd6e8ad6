"""The CPU path's cache flush, in a process of its own (README, Hardening: the candidate's process runs the call
and nothing else).

Before every staged sample the parent asks this process, which holds no torch, no problem and no candidate code,
to write twice the last-level cache, and enough to empty each core's own caches from every core of the pair's
slot. Both sides' calls then start from the same state:
their inputs, their own code and data, and the memory their allocator hands out all come from memory, and the
core last ran this process, not the one about to be timed (a side that had just staged its own inputs started
warmer than one woken from a stop). The candidate's process cannot touch the flush, skip it or work behind it.

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


def run(conn, data: dict[str, Any]) -> None:
    job = m.parse(m.FlusherJob, data)
    flush = Flush(job.nbytes or flush_bytes(), slot_cores())   # every core the timed sides may run on
    flush()                                         # its pages faulted in before the first sample
    conn.send("flusher_ready", nbytes=flush.nbytes)
    while True:
        message = conn.recv()
        if message.get("op") != m.FlushRequest.OP:
            return
        reply = m.wire(m.Flushed(flush()))
        conn.send(reply.pop("kind"), **reply)
