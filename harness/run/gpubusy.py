"""Whether a GPU a run is about to time on is already at work for someone else.

Read once, as a run starts and before it starts a worker of its own: nvidia-smi's utilization and memory in use of
each slot's GPU, and the compute processes on it. Another process's kernels on the same GPU slow both sides of a
pair by different amounts from one moment to the next, so every figure of such a run is perturbed: a 2-GPU lease
whose two runs both landed on one GPU read 54% of its A/A pairs within 1.000 +/- 0.5%, where one run alone reads
80-89% (docs/measurements.md, twenty-fifth session). The run goes on, says so in one line per GPU, and keeps what it
saw in run.json (`gpus_busy_at_start`).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Sequence

BUSY_UTILIZATION_PCT = 5        # nvidia-smi's share of the last sample period in which a kernel ran
BUSY_MEMORY_MIB = 1024          # in use with no process of ours on it (a context of another container shows so)


@dataclass(frozen=True)
class Activity:
    utilization_pct: int | None
    memory_used_mib: int | None
    pids: tuple[int, ...] = ()

    def busy(self) -> bool:
        return (bool(self.pids) or (self.utilization_pct or 0) >= BUSY_UTILIZATION_PCT
                or (self.memory_used_mib or 0) >= BUSY_MEMORY_MIB)


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse(usage: str | None, apps: str | None) -> dict[int, Activity]:
    """nvidia-smi's `index,uuid,utilization.gpu,memory.used` lines and `gpu_uuid,pid` lines, by nvidia-smi index."""
    by_uuid: dict[str, int] = {}
    found: dict[int, tuple[int | None, int | None]] = {}
    for line in (usage or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            by_uuid[parts[1]] = int(parts[0])
            found[int(parts[0])] = (_int(parts[2]), _int(parts[3]))
    pids: dict[int, list[int]] = {}
    for line in (apps or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] in by_uuid and parts[1].isdigit():
            pids.setdefault(by_uuid[parts[0]], []).append(int(parts[1]))
    return {index: Activity(util, mem, tuple(pids.get(index, ()))) for index, (util, mem) in found.items()}


def read() -> dict[int, Activity]:
    """Every GPU's activity now, by nvidia-smi index; {} without nvidia-smi or where it answers nothing."""
    from harness.run.meta import nvidia_smi
    usage = nvidia_smi(["--query-gpu=index,uuid,utilization.gpu,memory.used", "--format=csv,noheader,nounits"])
    apps = nvidia_smi(["--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader,nounits"])
    return parse(usage, apps)


def line(slot: str, machine_index: int, seen: Activity) -> str:
    """One line for a busy GPU: which, what was seen, what it means."""
    what = [f"{seen.utilization_pct}% utilization" if seen.utilization_pct is not None else None,
            f"{seen.memory_used_mib} MiB in use" if seen.memory_used_mib is not None else None,
            (f"{len(seen.pids)} other process{'es' if len(seen.pids) > 1 else ''} (pid "
             f"{', '.join(map(str, seen.pids[:4]))}{', ...' if len(seen.pids) > 4 else ''})") if seen.pids else None]
    return (f"{slot} (the machine's GPU {machine_index}) is at work before this run starts: "
            f"{', '.join(w for w in what if w)}; every time measured on it will be perturbed: time on an idle GPU")


def check(slots: Sequence[Any], gpu_list: Sequence[dict[str, Any]], activity: dict[int, Activity] | None = None,
          own: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """For each busy slot GPU: its line and what was seen (for run.json). `activity`: read() unless given; `own`:
    this process's pid (os.getpid() unless given), not counted as another's."""
    own = os.getpid() if own is None else own
    machine = {g["index"]: g.get("machine_index", g["index"]) for g in gpu_list}
    gpu_slots = [s for s in slots if s.gpu is not None and s.gpu in machine]
    if not gpu_slots:
        return []
    activity = read() if activity is None else activity
    busy = []
    for slot in gpu_slots:
        seen = activity.get(machine[slot.gpu])
        if seen is not None and own in seen.pids:      # a caller of harness.api with CUDA of its own: its memory
            seen = Activity(seen.utilization_pct, None, tuple(p for p in seen.pids if p != own))   # is not news
        if seen is not None and seen.busy():
            busy.append((line(slot.name, machine[slot.gpu], seen),
                         {"slot": slot.name, "machine_index": machine[slot.gpu], **asdict(seen)}))
    return busy
