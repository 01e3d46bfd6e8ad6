"""Files written whole or not at all, and the marks that tell whether someone else changed them since: the run
folder's run.json and results.jsonl (harness.results.store), the between-process terms (harness.run.between), the
lint reports."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.untrusted import ReadError, read_bytes, replace_whole


def write_json_atomic(path: Path, data: Any) -> "FileMark":
    return write_atomic(path, (json.dumps(data, indent=2, default=str) + "\n").encode(), digest=True)


def write_atomic(path: Path, data: bytes, digest: bool) -> "FileMark":
    """Write `path` whole, synced, through a temporary file and a rename (untrusted.replace_whole); the mark of what
    was written."""
    inode = replace_whole(path, data, sync=True)
    return FileMark(inode, len(data), hashlib.sha256(data).hexdigest() if digest else None)


MARK_LIMIT = 1 << 30


@dataclass(frozen=True)
class FileMark:
    """What this process last wrote to a file: enough to notice that someone else deleted, truncated, replaced or
    appended to it."""
    inode: int
    size: int
    sha256: str | None              # None: only inode and size were taken (the cheap check before an append)

    @classmethod
    def of(cls, path: Path, full: bool = True) -> "FileMark | None":
        try:
            if not full:
                st = path.stat()
                return cls(st.st_ino, st.st_size, None)
            data = read_bytes(path, MARK_LIMIT)        # never blocks on a FIFO put in the file's place
            return cls(os.stat(path).st_ino, len(data), hashlib.sha256(data).hexdigest())
        except FileNotFoundError:
            return None
        except (ReadError, OSError):
            if not os.path.lexists(path):
                return None
            return cls(-1, -1, None)                # no longer a regular file: "was replaced by another file"

    def change(self, now: "FileMark | None") -> str | None:
        """How the file differs from this mark, in words, or None."""
        if now is None:
            return "was deleted"
        if now.inode != self.inode:
            return "was replaced by another file"
        if now.size < self.size:
            return "was truncated"
        if now.size > self.size:
            return "was appended to by another process"
        if now.sha256 is not None and self.sha256 is not None and now.sha256 != self.sha256:
            return "was overwritten"
        return None
