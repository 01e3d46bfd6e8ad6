"""CPU time of a worker's processes that survives their reaping (harness.run.cores).

A process's CPU time reaches its parent's count (cutime, cstime) only when the parent reaps it. A helper process
that the kernel reaps itself (its parent ignores SIGCHLD) takes its time with it, so a count over the worker's
process tree never sees it. A cgroup does: its `cpu.stat` counts the CPU of every process that was ever in it, reaped
by anyone or not. Each worker is put in a cgroup of its own (cgroup v2, the unified hierarchy) when it starts,
before its job, so every process it or its candidate starts is in it from its first instruction.

Where this process cannot make one (no cgroup2 hierarchy, a read-only one, not allowed to move processes), nothing
is made, `join` returns None, and the cores are counted over the process tree as before (the record's
`timing.cpu_cores_counted` says which). A confined worker cannot move its processes out: every cgroup file is
outside what its sandbox may write (harness.worker.sandbox).

Layout: <this process's own cgroup>/kb-harness-<pid>/<worker tag>. A worker's cgroup is removed when the worker is
closed; what is left of kb-harness-<pid> when this process ends is removed by its guardian
(harness.shared.containment.guard, `remove_all`), and what even that left (a cgroup that still held a process then)
by the next process that makes its folder here.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

PREFIX = "kb-harness-"
_lock = threading.Lock()
_base: list[Path | None] = []          # this process's folder of worker cgroups, once looked for (None: none)


def _mount() -> Path | None:
    """Where the cgroup2 hierarchy is mounted (/proc/self/mountinfo), or None."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def _own() -> Path | None:
    """This process's cgroup in the v2 hierarchy (/proc/self/cgroup's "0::" line under its mount), or None."""
    mount = _mount()
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines() if mount else []
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            path = mount / line[3:].lstrip("/")
            return path if (path / "cgroup.procs").exists() else None
    return None


def base() -> Path | None:
    """This process's folder of worker cgroups, made on the first call (None where it cannot be)."""
    with _lock:
        if not _base:
            _base.append(_make())
        return _base[0]


def _make() -> Path | None:
    own = _own()
    if own is None:
        return None
    _sweep(own)
    folder = own / f"{PREFIX}{os.getpid()}"
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    if not (folder / "cpu.stat").exists():
        _rmdir(folder)
        return None
    return folder


class Group:
    """One worker's cgroup."""

    def __init__(self, path: Path):
        self.path = path

    def seconds(self) -> float | None:
        """CPU seconds of every process that was ever in it (user and system), or None where it cannot be read."""
        try:
            for line in (self.path / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            return None
        return None

    def remove(self) -> None:
        """The cgroup removed (once its processes are gone; a process still in it keeps it, and the guardian's
        `remove_all` tries again when this process ends)."""
        _rmdir(self.path)


def join(tag: str, pid: int) -> Group | None:
    """A new cgroup named `tag` with process `pid` in it (its threads too; the processes it starts from now on are
    born in it), or None where none can be made or `pid` cannot be moved."""
    folder = base()
    if folder is None:
        return None
    path = folder / tag
    try:
        folder.mkdir(exist_ok=True)         # again where something removed it while it was empty
        path.mkdir()
        (path / "cgroup.procs").write_text(str(pid))
    except OSError:
        _rmdir(path)
        return None
    return Group(path)


def remove_all(parent: int) -> None:
    """Every worker cgroup of process `parent` (already ended; of this process's own cgroup, as its guardian is)
    and its folder removed, where empty."""
    own = _own()
    if own is not None:
        _remove_folder(own / f"{PREFIX}{parent}")


def _sweep(own: Path) -> None:
    """The folders of processes that ended while one of their workers' cgroups still held a process (their guardian
    could not remove them then), removed where empty now."""
    try:
        folders = [f for f in own.iterdir() if f.name.startswith(PREFIX) and f.name[len(PREFIX):].isdigit()]
    except OSError:
        return
    for folder in folders:
        if not Path(f"/proc/{folder.name[len(PREFIX):]}").exists():
            _remove_folder(folder)


def _remove_folder(folder: Path) -> None:
    """A process's folder of worker cgroups and the cgroups in it removed, where empty."""
    try:
        children = [child for child in folder.iterdir() if child.is_dir()]
    except OSError:
        return
    for child in children:
        _rmdir(child)
    _rmdir(folder)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
