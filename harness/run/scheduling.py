"""The parent's watch on the workers' scheduling (README, Hardening: no raising of its own priority).

Candidate workers run without CAP_SYS_NICE and with RLIMIT_RTPRIO and RLIMIT_NICE at 0 (harness.worker.sandbox),
so a candidate cannot give its threads a real-time policy or a nice value below the one it started with. The
parent checks that it did not all the same (a kernel or a sandbox mode that let it): every thread of a worker's
process tree is read from /proc at the end of each block, and one whose policy is real-time or whose nice value is
below the lowest its worker had when the rounds began is named. A side that lowers its own priority only slows
itself and is not named; but the reference's executor, which runs nothing but the problem's own Model, is named
when a thread of it runs at a lower priority than its threads did when it was started (a higher nice value, or
SCHED_BATCH or SCHED_IDLE):
any process of the same user may do that to it, the candidate's included, and a slower reference reads as a faster
candidate. Linux only; elsewhere nothing is read and nothing is named.
"""
from __future__ import annotations

import os

from harness.shared import containment

REALTIME = {1: "SCHED_FIFO", 2: "SCHED_RR", 6: "SCHED_DEADLINE"}
BACKGROUND = {3: "SCHED_BATCH", 5: "SCHED_IDLE"}
_NICE, _RT_PRIORITY, _POLICY = 16, 37, 38        # fields of /proc/<pid>/task/<tid>/stat after the ')' (19, 40, 41)


def threads(pid: int) -> list[tuple[int, int, int, int]]:
    """(tid, nice, rt_priority, policy) of every thread of `pid` and its descendants; [] where /proc says nothing."""
    found = []
    for member in containment.tree([pid]):
        try:
            tids = os.listdir(f"/proc/{member}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{member}/task/{tid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                found.append((int(tid), int(fields[_NICE]), int(fields[_RT_PRIORITY]), int(fields[_POLICY])))
            except (OSError, IndexError, ValueError):
                continue                            # a thread that just ended
    return found


def lowest_nice(pid: int) -> int | None:
    """The lowest nice value among a worker's threads now (its baseline when the rounds begin)."""
    values = [nice for _, nice, _, _ in threads(pid)]
    return min(values) if values else None


def raised(pid: int, baseline: int | None) -> str | None:
    """Why a worker's scheduling was raised since its baseline (one line), or None."""
    for tid, nice, rt_priority, policy in threads(pid):
        if policy in REALTIME or rt_priority > 0:
            return f"thread {tid} runs under {REALTIME.get(policy, f'policy {policy}')} (priority {rt_priority})"
        if baseline is not None and nice < baseline:
            return f"thread {tid} runs at nice {nice}, below the {baseline} its worker started the rounds with"
    return None


def settings(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (nice, policy) of every thread of a worker's tree now (its baseline, for `lowered`)."""
    return {tid: (nice, policy) for tid, nice, _, policy in threads(pid)}


def lowered(pid: int, baseline: dict[int, tuple[int, int]]) -> str | None:
    """Why a thread of the worker runs at a lower priority than the worker's threads did at its baseline (`settings`):
    a nice value above its own there (a thread started since: above the highest there), or SCHED_BATCH or SCHED_IDLE
    where it had neither (a thread started since: where no thread had one). One line, or None; None without a
    baseline."""
    if not baseline:
        return None
    highest = max(nice for nice, _ in baseline.values())
    any_background = any(policy in BACKGROUND for _, policy in baseline.values())
    for tid, nice, _, policy in threads(pid):
        was_nice, was_policy = baseline.get(tid, (highest, 5 if any_background else 0))
        if policy in BACKGROUND and was_policy not in BACKGROUND:
            return f"thread {tid} runs under {BACKGROUND[policy]}"
        if nice > was_nice:
            return f"thread {tid} runs at nice {nice}, above the {was_nice} its worker had when it was started"
    return None
