"""The cores a run's GPU slots hold on this machine, so that two runs at once do not time on the same cores.

A GPU slot's workers are held to its cores (Slot.cpus; its timing cores are the first of them, both sides the same).
Each run used to split its own affinity over its own slots, so two runs of one slot each (two users' run_eval.py on
two GPUs of one host, two CI jobs, the external dask workers of one host) both timed on the machine's first core.
On a 2-GPU H200 host, a default-path A/A calibrate on GPU 0 beside a staged one on GPU 1 flagged 6 of 13 honest pairs
`timing_inconsistent` that way (docs/measurements.md, "Two runs on one host").

Now the cores are cut into as many equal shares as the machine has GPUs (at least as many as the run has slots), and
each slot takes the first share that no other process holds: an exclusive flock on one file per core in a folder of
the machine's temporary directory (KB_CORE_LOCKS names another), held until this process ends, so a crash frees
it. Where every share is held, the slot takes the share of its position, as before, and the run says so.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

LOCKS_VAR = "KB_CORE_LOCKS"


@dataclass
class Claim:
    """Each slot's cores, in the order asked; `contended`: the positions that found no free share. The held files
    are closed by release() or when this process ends."""
    shares: list[tuple[int, ...]]
    contended: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for fd in self.held:
            try:
                os.close(fd)
            except OSError:
                pass
        self.held.clear()


def lock_dir() -> Path:
    return Path(os.environ.get(LOCKS_VAR) or Path(tempfile.gettempdir()) / "kb-harness-cores")


def split(cores: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """`count` equal shares of `cores` in order (the remainder unused); every share is all cores where there are
    fewer cores than shares."""
    cores = sorted(cores)
    size = len(cores) // max(1, count)
    if size == 0:
        return [tuple(cores)] * max(1, count)
    return [tuple(cores[i * size:(i + 1) * size]) for i in range(count)]


def claim(slots: int, cores: Sequence[int], machine_gpus: int, folder: Path | None = None) -> Claim:
    """`slots` shares of `cores`, each one no other process holds where one is free."""
    shares = split(cores, max(slots, machine_gpus, 1))
    folder = folder or lock_dir()
    result = Claim([])
    taken: set[int] = set()
    for position in range(slots):
        for index, share in enumerate(shares):
            if index in taken:
                continue
            fds = _lock_all(folder, share)
            if fds is not None:
                taken.add(index)
                result.shares.append(share)
                result.held.extend(fds)
                break
        else:
            result.shares.append(shares[position % len(shares)])
            result.contended.append(position)
    return result


def _lock_all(folder: Path, share: tuple[int, ...]) -> list[int] | None:
    """Exclusive locks on every core of the share, or None (and nothing held) where another process holds one. A
    folder that cannot be made or written holds nothing: every share is free then."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if folder.stat().st_uid == os.getuid():
            os.chmod(folder, 0o1777)                # other users' runs take their shares here too
    except OSError:
        return []
    fds: list[int] = []
    for core in share:
        try:
            fd = os.open(folder / f"core-{core}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            for held in fds:
                os.close(held)
            return None
        fds.append(fd)
    return fds


def assign(slots: Sequence[Any], say: Callable[[str], None], machine_gpus: int | None = None) -> Claim:
    """Every slot's `cpus`: the GPU slots' from claim() over this process's cores (the machine's GPUs counted by
    nvidia-smi, which lists them all whatever CUDA_VISIBLE_DEVICES says); a CPU slot keeps all of them. Said once
    where a share is contended. Keep the Claim for as long as the slots run."""
    cores = sorted(os.sched_getaffinity(0))
    gpu_slots = [s for s in slots if s.gpu is not None]
    for slot in slots:
        if slot.gpu is None:
            slot.cpus = tuple(cores)
    if not gpu_slots:
        return Claim([])
    if machine_gpus is None:
        from harness.run import meta
        machine_gpus = len(meta.machine_gpus())
    got = claim(len(gpu_slots), cores, machine_gpus)
    for slot, share in zip(gpu_slots, got.shares):
        slot.cpus = share
    if got.contended:
        say(contended_line([gpu_slots[i].name for i in got.contended]))
    return got


def contended_line(names: Sequence[str]) -> str:
    return (f"{', '.join(names)}: every share of this machine's cores is held by another run (two runs time on the "
            "same cores, which perturbs both: run one at a time, or on fewer GPUs each)")
