"""Executors: where a run's pairs are measured. The parent discovers and builds; an executor turns the pairs into
exactly one record each through `ctx.emit`, problem by problem (every pair of one problem against one reference
worker), on this machine's slots (`local`) or on a dask cluster (`dask`).

An executor is a module named in harness.core.config.EXECUTORS whose `make(cfg)` returns an `Executor`; the pipeline
knows nothing else about it."""
from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Protocol

from harness.core.config import EXECUTORS, Config
from harness.core.discover import Pair


class Executor(Protocol):
    remote_gpus: bool           # the GPUs are the executor's workers', not this machine's (the parent may have none)

    def where(self, device: str, slot_names: list[str]) -> str:
        """What the run's first line says the pairs run on."""

    def check(self) -> None:
        """Raise a UsageError now, before the builds, if this executor cannot run here."""

    def begin(self, cfg: Config, slots: list[Any], toolchain: Any) -> None:
        """Called before the builds: start, in the background, what run() will need first."""

    def run(self, pairs: list[Pair], ctx: Any, slots: list[Any], device: str,
            say: Callable[[str], None]) -> dict[str, Any] | None:
        """Every pair gets exactly one record through ctx.emit. Returns what run.json records under the executor's
        name, or None."""


def executor_for(cfg: Config) -> Executor:
    return importlib.import_module(EXECUTORS[cfg.executor]).make(cfg)


def problem_groups(pairs: list[Pair]) -> list[list[Pair]]:
    """The pairs by problem, the biggest groups first (better balance over slots or dask workers)."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.problem_id, []).append(pair)
    return sorted(groups.values(), key=lambda group: -len(group))


def scratch_root(run_id: str) -> Path:
    """Where a run's workers exchange files on this host: /dev/shm when writable, else the temp dir."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return base / f"kbharness-{run_id}"
