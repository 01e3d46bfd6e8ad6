"""The CPU path's cache flush, in a process of its own (README, Hardening: the candidate's process runs the call
and nothing else).

Before every staged sample the parent asks this process, which holds no torch, no problem and no candidate code,
to write twice the last-level cache on the pair's timing cores. Both sides' calls then start from the same state:
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


class Flush:
    """A buffer of flush_bytes(), written whole with a new value every time (no write can be skipped)."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.buffer = (ctypes.c_char * nbytes)()
        self.value = 0

    def __call__(self) -> float:
        """One flush; its time in ms."""
        t0 = time.perf_counter_ns()
        self.value = (self.value % 255) + 1
        ctypes.memset(self.buffer, self.value, self.nbytes)
        return (time.perf_counter_ns() - t0) / 1e6


def run(conn, data: dict[str, Any]) -> None:
    from harness.worker.common import pin_for_timing
    job = m.parse(m.FlusherJob, data)
    pin_for_timing()                                # the timed sides' cores: the caches those calls will use
    flush = Flush(job.nbytes or flush_bytes())
    flush()                                         # its pages faulted in before the first sample
    conn.send("flusher_ready", nbytes=flush.nbytes)
    while True:
        message = conn.recv()
        if message.get("op") != m.FlushRequest.OP:
            return
        reply = m.wire(m.Flushed(flush()))
        conn.send(reply.pop("kind"), **reply)
