"""Pinned host memory in a GPU reference (a process where candidate code never runs): the copies that wait on the host
while float64 work runs (harness.worker.float64.Parked), trial 0's outputs kept there (reference._Trials.settle_first)
and the bf16x3 correction's host copies (harness.worker.precision). Pinning is most of what such a copy costs: torch
pins with one thread by default (cudaHostAlloc), 0.4-0.6 s a GiB on an H200, and a reference is held to its timing
core from its first sample on. Here torch's host allocator registers memory whose pages several threads touch, and
each block is pinned with the calling thread on the slot's spare cores (docs/measurements.md, twenty-second
session)."""
from __future__ import annotations

import contextlib
import os

from harness.worker.common import env_cores

REGISTER_THREADS = 8      # the most threads torch's host allocator touches a new block's pages with (register_pinned)


def host_cores() -> list[int]:
    """The cores the reference's host-memory work may spread over while nothing of its pair is timed (spread_out):
    the slot's spare cores (KB_SPARE_CPUS), else its whole share (KB_CPUS), else those this process may use."""
    return env_cores("KB_SPARE_CPUS") or env_cores("KB_CPUS") or sorted(os.sched_getaffinity(0))


def register_pinned() -> int:
    """A GPU reference's pinned host memory (Parked's draws, trial 0's outputs kept on the host, the bf16x3 correction's
    copies) mapped by torch's host allocator itself, its pages touched by several threads, then registered with CUDA
    (`pinned_use_cuda_host_register`), instead of cudaHostAlloc's one thread: on an H200 with 16 cores, held to one
    and pinning on the other 15 (benchmarks/host_link.py --harness), 6 GiB pinned in 1.37 s against 3.30 s, 2.5 GiB
    in 0.49 s against 1.55 s (docs/measurements.md, twenty-second session). The threads start in the allocating call
    and take its thread's cores, which spread_out widens. Set at run time, before the first pinned block. Returns
    the threads (a power of two up to REGISTER_THREADS within host_cores()), or 0 where fewer than two cores are
    there to touch pages on, or torch does not take the setting: then nothing changes."""
    cores = min(len(host_cores()), REGISTER_THREADS)
    if cores < 2:
        return 0
    threads = 1 << (cores.bit_length() - 1)
    try:
        import torch
        torch._C._accelerator_setAllocatorSettings(
            f"pinned_use_cuda_host_register:True,pinned_num_register_threads:{threads}")
    except (AttributeError, RuntimeError):
        return 0
    return threads


@contextlib.contextmanager
def spread_out():
    """The calling thread, and the threads it starts meanwhile (the host allocator's page-touching ones), on
    host_cores() for the duration, then back on the cores it had: a reference is held to its timing core from its
    first sample on (common.pin_for_timing), and pinning a block on that one core took as long with 8 threads as with
    one (docs/measurements.md, twenty-second session). Used only where none of the pair's samples is being taken."""
    try:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, host_cores())
    except OSError:
        yield
        return
    try:
        yield
    finally:
        try:
            os.sched_setaffinity(0, before)
        except OSError:
            pass


def host_empty(shape, dtype):
    """An empty host tensor for a copy of device memory: pinned, its pages touched and registered on the cores
    spread_out gives, so that it crosses both ways at the link's speed; pageable where no pinned memory can be had."""
    import torch
    try:
        with spread_out():
            return torch.empty(shape, dtype=dtype, device="cpu", pin_memory=True)
    except RuntimeError:                                # no pinned memory to be had
        return torch.empty(shape, dtype=dtype, device="cpu")
