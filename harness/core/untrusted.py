"""Everything the harness reads from disk is untrusted, like candidate code: file names, file contents, values.

- `show_name` / `show_path`: a name as text that is safe to print and to put in a record. A file name is bytes
  until shown to be text: bytes that are not UTF-8 (which Python carries as lone surrogates) appear as `\\xNN`,
  control characters (a newline, an ANSI escape) as `\\xNN`/`\\uNNNN`; every other name is left as it is.
- `show_value`: at most a short prefix of a value, built without expanding it whole (a value made of YAML aliases
  can be exponentially large when printed).
- `read_source`: a Python file's text, decoded as the interpreter decodes it (BOM, coding declaration).
- `read_bytes`: a file's bytes, only when it is a regular file (never a FIFO that blocks, a device that never
  ends or a directory) and not larger than a limit; `ReadError` says why in words.
- `write_bytes`: write a file through a fresh temporary file and a rename, so that a symlink planted at the path
  (or at a predictable temporary name) is replaced, never followed; a write that fails (a full disk) is a
  `WriteError`, which harness.cli reports as one line naming the file.
"""
from __future__ import annotations

import importlib.util
import json
import os
import reprlib
import stat
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError

SHOWN_VALUE_CHARS = 80


class ReadError(Exception):
    """A file that cannot be used: `why` is a few words (`not a regular file (a FIFO)`, `Permission denied`)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class WriteError(HarnessError, OSError):
    """A file the harness writes could not be written (a full disk, a file size limit, a read-only folder): named
    as a failed write, with the path and the system's reason, never blamed on a problem or candidate. Exit 1. An
    OSError too (errno, strerror, filename as the failed write's), so a caller that handles one still does."""

    def __init__(self, path: Path | str, exc: OSError):
        OSError.__init__(self, exc.errno, exc.strerror or str(exc), str(path))
        self.message = f"cannot write {show_path(path)}: {exc.strerror or exc}"

    def __str__(self) -> str:
        return self.message


def show_name(name: str) -> str:
    """`name` with undecodable bytes and non-printable characters escaped; unchanged when it is plain text."""
    if name.isprintable() and not any("\udc80" <= ch <= "\udcff" for ch in name):
        return name
    out = []
    for ch in name:
        if "\udc80" <= ch <= "\udcff":                       # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{ord(ch) - 0xdc00:02x}")
        elif ch.isprintable() and not "\ud800" <= ch <= "\udfff":
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def show_path(path: Path | str) -> str:
    return show_name(str(path))


def is_plain_name(name: str) -> bool:
    """True when `show_name` leaves the name as it is."""
    return show_name(name) == name


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = SHOWN_VALUE_CHARS
_REPR.maxother = SHOWN_VALUE_CHARS
_REPR.maxlong = 40
for _attr in ("maxlist", "maxtuple", "maxdict", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_REPR, _attr, 6)


def show_value(value: Any, limit: int = SHOWN_VALUE_CHARS) -> str:
    """repr(value), cut to `limit` characters ('...' marks the cut); never builds more than a bounded prefix."""
    try:
        text = _REPR.repr(value)
    except Exception:                                   # noqa: BLE001 - a value whose repr fails is still shown
        text = f"<{type(value).__name__}>"
    text = show_name(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def show_text(value: Any, limit: int = SHOWN_VALUE_CHARS) -> str:
    """A string as it is (escaped, cut to `limit`); any other value as show_value shows it."""
    if not isinstance(value, str):
        return show_value(value, limit)
    text = show_name(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symlink"}


def kind_of(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_bytes(path: Path | str, limit: int, follow: bool = True) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; ReadError otherwise. Opened non-blocking (a
    FIFO never blocks the harness), checked with fstat on the open file (what is read is what was checked), and
    read no further than `limit` + 1 bytes (a file that grows while it is read is still refused). `follow=False`
    refuses a symlink at the last component."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == 40 and not follow and os.path.islink(path):         # ELOOP under O_NOFOLLOW: a link
            raise ReadError("a symlink, not followed here") from None
        raise ReadError(exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReadError(f"not a regular file ({kind_of(st.st_mode)})")
        if st.st_size > limit:
            raise ReadError(f"too large ({st.st_size} bytes; the limit is {limit})")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ReadError(f"too large (over {limit} bytes)")
        return b"".join(chunks)
    except OSError as exc:
        raise ReadError(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def read_text(path: Path | str, limit: int, follow: bool = True) -> str:
    """read_bytes as text; a leading UTF-8 BOM is dropped, bytes that are not UTF-8 become U+FFFD."""
    return read_bytes(path, limit, follow).decode("utf-8-sig", errors="replace")


def read_source(path: Path | str, limit: int, follow: bool = True) -> str:
    """A Python source file's text as the interpreter decodes it on import (importlib.util.decode_source): a
    UTF-8 BOM dropped, a coding declaration honoured (PEP 263), newlines made universal. ReadError, as for
    read_bytes, also when Python could not decode the file either (bytes that are not UTF-8 and no declaration)."""
    data = read_bytes(path, limit, follow)
    try:
        return importlib.util.decode_source(data)
    except SyntaxError as exc:                          # what detect_encoding raises: a bad or missing declaration
        raise ReadError(f"not Python source text: {show_text(exc.msg)}") from None
    except (UnicodeDecodeError, LookupError) as exc:    # bytes the declared encoding cannot decode
        raise ReadError(f"not Python source text: {show_text(str(exc))}") from None


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write `path` whole: a temporary file created fresh beside it (O_EXCL, never an existing file or link), then
    renamed over `path`, which replaces a symlink there instead of writing through it. A write that fails (a full
    disk, a file size limit) is a WriteError naming `path`, an OSError too."""
    replace_whole(Path(path), data, sync=False)


def replace_whole(path: Path, data: bytes, sync: bool) -> int:
    """write_bytes, and with `sync` the data on disk before the rename; the inode written (from the file itself,
    not from the path afterwards, which someone may already have replaced)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise WriteError(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
            inode = os.fstat(f.fileno()).st_ino
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WriteError(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return inode


def write_text(path: Path | str, text: str) -> None:
    write_bytes(path, text.encode("utf-8", errors="backslashreplace"))


def inside(path: Path, folder: Path) -> bool:
    """True when `path`, with every link resolved, lies in `folder` (also resolved)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):                     # RuntimeError: a symlink loop (Python < 3.13)
        return False


def load_json(data: bytes | str) -> Any:
    """json.loads, where input nested past Python's recursion limit is a ValueError like any other bad JSON."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None


RUN_FILE_LIMIT = 1 << 30        # bytes: run.json or results.jsonl larger than this is not read


def read_run_file(run_dir: Path, name: str, limit: int = RUN_FILE_LIMIT) -> bytes | None:
    """A file of a run folder (run.json, results.jsonl), or None when there is none. ReadError when it is a link
    that leads out of the run folder (or nowhere: a dangling link is never followed, let alone created), not a
    regular file, too large or unreadable."""
    path = run_dir / name
    if not os.path.lexists(path):
        return None
    if path.is_symlink() and not inside(path, run_dir):
        target = os.readlink(path)
        raise ReadError(f"a link to {show_path(target)}, outside the run folder; not followed")
    return read_bytes(path, limit)
