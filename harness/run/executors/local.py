"""The local executor: one thread per slot (a GPU of --gpus, or the CPU), each taking the next problem group."""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from harness.core.config import Config
from harness.core.discover import Pair
from harness.run.executors import problem_groups
from harness.run import coreshares, workerproc
from harness.run.build import Toolchain
from harness.run.schedule import Context, Slot, serve_slot, slot_worker_env


class LocalExecutor:
    remote_gpus = False

    def where(self, device: str, slot_names: list[str]) -> str:
        return ", ".join(slot_names)

    def check(self) -> None:
        pass

    def begin(self, cfg: Config, slots: list[Slot], toolchain: Toolchain) -> None:
        """The slots' workers' zygote imports torch (with compile baselines, the compile stack too: preloads in
        harness.run.zygote) beside the builds; its first worker, the first problem's reference, would otherwise wait for the whole import (~4 s
        a run on a GPU host; harness.run.zygote)."""
        if slots:
            workerproc.prestart(slot_worker_env(cfg, toolchain, slots[0]))

    def run(self, pairs: list[Pair], ctx: Context, slots: list[Slot], device: str,
            say: Callable[[str], None]) -> dict[str, Any] | None:
        run_all(pairs, ctx, slots, say)
        return None


def make(cfg: Config) -> LocalExecutor:
    return LocalExecutor()


def run_all(pairs: list[Pair], ctx: Context, slots: list[Slot], say: Callable[[str], None]) -> None:
    """Every pair gets a record through ctx.emit; problems are spread over the slots, each on cores of its own
    (harness.run.coreshares: no other run on this machine holds them, where any are free)."""
    work: queue.Queue = queue.Queue()
    for group in problem_groups(pairs):
        work.put(group)
    errors: list[BaseException] = []

    def next_group() -> list[Pair] | None:
        try:
            return None if ctx.stop.is_set() else work.get_nowait()
        except queue.Empty:
            return None

    def serve(slot: Slot) -> None:
        try:
            serve_slot(slot, ctx, next_group, more_groups=lambda: not work.empty())
        except BaseException as exc:                                 # noqa: BLE001 - re-raised in the caller
            errors.append(exc)
            ctx.stop.set()

    cores = coreshares.assign(slots, say)
    threads = [threading.Thread(target=serve, args=(slot,), name=slot.name, daemon=True) for slot in slots]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except BaseException:
        halt(ctx, threads)
        raise
    finally:
        cores.release()
    if errors:
        raise errors[0]


HALT_WAIT_S = 10.0


def halt(ctx: Context, threads: list[threading.Thread]) -> None:
    """An interrupted run (Ctrl-C, SIGTERM): no further problem, pair or record (a pair the interrupt cut short has
    no verdict: it runs again on --resume), every worker killed, and the slot threads waited for (HALT_WAIT_S at most),
    so that nothing writes into the run's scratch folder once the run removes it."""
    ctx.stop.set()
    ctx.emit = lambda record: None
    workerproc.kill_all()
    deadline = time.monotonic() + HALT_WAIT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
