"""A run's scratch folder (/dev/shm/kbharness-<run id>, where its workers exchange files): it belongs to the run's
process. The folder holds an `owner` file naming that process (pid and start time, so a reused pid is not taken
for it); the run removes the folder when it ends, Ctrl-C and SIGTERM included (harness.cli turns SIGTERM into an
interrupt), and a later run removes a folder whose owner is gone (a run killed with SIGKILL), saying so. A folder
without an owner file, or another user's, is left alone: nothing says whose it is.

A pair that failed because a write in the scratch folder failed (a full /dev/shm or disk, a file size limit) is
the harness's fault, not the pair's: what the parent saw fail (failed_write) and whether the parent can write what
the pair needs (room) are here; harness.run.schedule makes such a record `skipped` with `harness_write`."""
from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import threading
from dataclasses import dataclass
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


# ---------------------------------------------------------------- a pair's failed write

# What a failed pair's record says when a write failed: the system's words for a full disk, a quota, a file size
# limit or a read-only file system; SIGBUS (a store into a mapped file that a full tmpfs cannot back); SIGXFSZ; and
# torch.save's zip writer, which says neither ("[enforce fail at inline_container.cc:...] unexpected pos").
# Only a lead: a failure is the harness's when the parent itself cannot write what the pair needs there (room), so
# that a candidate that merely prints these words is not believed.
WRITE_FAILED = tuple(os.strerror(e) for e in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)) + (
    "SIGBUS", "SIGXFSZ", "PytorchStreamWriter", "inline_container.cc")

@dataclass(frozen=True)
class OwnFailure:
    """The parent's own write in a pair's folder that failed: its error, how many bytes it was to write, and how
    many the pair's folder held then in files the parent had not written there itself (the candidate's: its
    private temporary folder, its Triton cache, whatever it wrote; counted as allocated blocks, so a sparse file
    counts what it takes)."""
    error: WriteError
    size: int
    others: int

    def candidates(self) -> bool:
        """Whether the candidate's files are what left no room: the write fails for want of space and they hold
        at least what it needed."""
        return self.error.errno in (errno.ENOSPC, errno.EDQUOT) and self.others >= max(self.size, 1)


_failed: dict[str, OwnFailure] = {}     # a pair's folder -> the parent's own write there that failed (failed_write)
_written: dict[str, set[str]] = {}      # a pair's folder -> the files the parent wrote there (wrote)
_failed_lock = threading.Lock()         # slots are threads


def wrote(path: Path | str) -> None:
    """The parent wrote `path` in a pair's folder (harness.run.trusted.copy_out): not the candidate's."""
    path = os.path.abspath(path)
    with _failed_lock:
        _written.setdefault(os.path.dirname(path), set()).add(path)


def failed_write(path: Path | str, exc: OSError, size: int = 0) -> WriteError:
    """The parent's own write of `path` (`size` bytes) in a pair's folder failed (harness.run.trusted.copy_out): a
    WriteError naming it, noted for own_failure() with what the folder held besides the parent's own files."""
    error = WriteError(path, exc)
    folder = os.path.dirname(os.path.abspath(path))
    with _failed_lock:
        mine = _written.get(folder, set()) | {os.path.abspath(path)}
    failure = OwnFailure(error, size, _allocated(folder, mine))
    with _failed_lock:
        _failed[folder] = failure
    return error


def own_failure(folder: Path) -> OwnFailure | None:
    """The parent's failed write noted for `folder` or a folder inside it (a pair's), taken off the notes (with
    the record of what the parent wrote there)."""
    base = os.path.abspath(folder)
    with _failed_lock:
        found = [_failed.pop(k) for k in list(_failed) if k == base or k.startswith(base + os.sep)]
        for k in [k for k in _written if k == base or k.startswith(base + os.sep)]:
            del _written[k]
    return found[0] if found else None


def _allocated(folder: str, skip: set[str]) -> int:
    """Bytes of disk the files under `folder` take (st_blocks), but those in `skip`."""
    return sum(st.st_blocks * 512 for path, st in _files(folder) if path not in skip)


def _files(folder: Path | str) -> Iterator[tuple[str, os.stat_result]]:
    """Every file under `folder`, with its lstat (one that went meanwhile left out)."""
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            try:
                yield path, os.lstat(path)
            except OSError:
                pass


def names_a_failed_write(*texts: str | None) -> bool:
    """Whether a failure's words (its error, detail, log tail) say that a write failed (WRITE_FAILED)."""
    return any(words in text for text in texts if text for words in WRITE_FAILED)


def room(folder: Path, need: int) -> WriteError | None:
    """A WriteError naming `folder` when the parent could not write a file of `need` bytes in it now: past its
    file size limit (the workers inherit it), more than the file system has free, or a small write fails there
    (probe). Nothing of `need` is written: a GPU problem's trial may be many GiB of RAM-backed /dev/shm."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and need > limit:
        return WriteError(folder, OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)} (a file of {need:,} bytes is "
                                                       f"past the file size limit, {limit:,})"))
    try:
        stat = os.statvfs(folder)
    except OSError as exc:
        return WriteError(folder, exc)
    free = stat.f_bavail * stat.f_frsize
    if free < need:
        return WriteError(folder, OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({free:,} bytes free, a "
                                                        f"file of {need:,} does not fit)"))
    try:
        probe(folder)
    except WriteError as exc:
        return exc
    return None


def need(folder: Path, footprint: int | None) -> int:
    """What a pair's files in `folder` take at least: one trial's inputs, outputs, parameters and buffers
    (`footprint`, where the reference said), and a byte more than the largest file a worker left there (a write
    that failed leaves its file cut short)."""
    largest = max((st.st_size for _, st in _files(folder)), default=0)
    return max(PROBE_BYTES, footprint or 0, largest + 1)
