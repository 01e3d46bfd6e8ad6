"""A run's scratch folder (/dev/shm/kbharness-<run id>, where its workers exchange files): it belongs to the run's
process. The folder holds an `owner` file naming that process (pid and start time, so a reused pid is not taken
for it); the run removes the folder when it ends, Ctrl-C and SIGTERM included (harness.cli turns SIGTERM into an
interrupt), and a later run removes a folder whose owner is gone (a run killed with SIGKILL), saying so. A folder
without an owner file, or another user's, is left alone: nothing says whose it is."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Callable, Iterator

from harness.core.untrusted import ReadError, WriteError, read_text, show_path, write_text
from harness.run.executors import scratch_root

OWNER = "owner"
PREFIX = "kbharness-"
PROBE_BYTES = 1 << 20       # written once where a run writes, before any pair runs: a full disk stops it there


@contextlib.contextmanager
def owned(run_id: str, say: Callable[[str], None]) -> Iterator[Path]:
    """The run's scratch folder for the duration of the block: stale folders of killed runs swept first, the
    folder claimed and probed for room (a WriteError before any pair runs), removed when the block ends however it
    ends."""
    sweep(scratch_root(run_id).parent, say)
    folder = claim(run_id)
    try:
        probe(folder)
        yield folder
    finally:
        release(folder)


def claim(run_id: str) -> Path:
    """The run's scratch folder, made, with its owner file; a WriteError when it cannot be written (a full disk)."""
    folder = scratch_root(run_id)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(folder, exc) from None
    write_text(folder / OWNER, f"{os.getpid()} {_started(os.getpid())}\n")
    return folder


def release(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def sweep(base: Path, say: Callable[[str], None]) -> list[Path]:
    """Remove the scratch folders in `base` (where runs' scratch goes) of runs whose process is gone; each removal
    is one line to `say`. Returns what was removed."""
    removed: list[Path] = []
    try:
        entries = [entry for entry in os.scandir(base) if entry.name.startswith(PREFIX)]
    except OSError:
        return removed
    for entry in entries:
        pid = _dead_owner(Path(entry.path))
        if pid is not None:
            release(Path(entry.path))
            if not os.path.lexists(entry.path):
                removed.append(Path(entry.path))
                say(f"removed {show_path(entry.path)}: the scratch folder of a run whose process ({pid}) is gone "
                    "(killed before it could clean up)")
    return removed


def probe(folder: Path) -> None:
    """Write PROBE_BYTES into `folder` and remove them: a WriteError naming the folder when the disk (or a file
    size limit) cannot take them, so the run stops before any pair instead of blaming one."""
    path = folder / f".write-probe-{os.getpid()}"
    try:
        write_text(path, "\0" * PROBE_BYTES)
    except WriteError as exc:
        raise WriteError(folder, exc) from None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _dead_owner(folder: Path) -> int | None:
    """The pid named in `folder`'s owner file when that process is gone; None when it lives, or when the folder
    is not a plain folder of this user's with an owner file to judge by."""
    try:
        st = os.lstat(folder)
        if not os.path.isdir(folder) or os.path.islink(folder) or st.st_uid != os.getuid():
            return None
        pid_text, _, started = read_text(folder / OWNER, 100, follow=False).strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ReadError, ValueError):
        return None
    if pid <= 0 or pid == os.getpid():
        return None
    return pid if _started(pid) != started else None


def _started(pid: int) -> str:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22), which tells a reused pid
    from the process itself; "" when there is no such process; "?" where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    except OSError:
        return _alive_without_proc(pid)
    return stat.rsplit(")", 1)[-1].split()[19]         # fields after the command name, which may hold spaces


def _alive_without_proc(pid: int) -> str:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ""
    except OSError:
        pass
    return "?"
