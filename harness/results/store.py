"""Stage 6, store: <output-dir>/<run-id>/run.json (metadata, written atomically) and results.jsonl (one line per
pair, appended and fsync'ed as each pair ends, so a killed run loses nothing it finished). The parent keeps its own
copy of both and writes them again if anyone else deletes, truncates or appends to them during the run. Each line
is signed with the run's key (harness/results/signing.py), which only the parent holds; `check_lines` is the one reader
of results.jsonl (report, compare, --resume): it reads each line as a typed `Record` (harness/results/records.py, which
checks schema_version, the required fields and their types), and skips, naming file:line, a line that is not a
record, not signed by the run, or a second line for the same (problem, solution)."""
from __future__ import annotations

import datetime as _dt
import enum
import errno
import hashlib
import json
import os
import secrets
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from harness import SCHEMA_VERSION
from harness.results import signing
from harness.core.errors import InputError, UsageError
from harness.shared.channel import clean_json
from harness.results.records import Record, RecordDraft, RecordError
from harness.results.signing import KeyLookup, RunKey, Verdict
from harness.core.atomic import MARK_LIMIT, FileMark, write_atomic as _write_atomic, write_json_atomic  # noqa: F401
from harness.core.untrusted import ReadError, WriteError, load_json, read_bytes, read_run_file, show_path


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def _stderr_warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


class RunStore:
    """One run's folder. A store that writes (create, resume) keeps every line of results.jsonl and the whole of
    run.json in memory, checks before each write and at the end (finish) that the files still hold exactly what it
    wrote, and when they do not, says so in one line and writes them again from its own copy; it never stops the
    run for it. A store that only reads (open, for report) reads the files."""

    def __init__(self, output_dir: Path, run_id: str, warn: Callable[[str], None] | None = None):
        self.dir = output_dir / run_id
        self.run_id = run_id
        self.results_path = self.dir / "results.jsonl"
        self.run_json = self.dir / "run.json"
        self.lock = threading.Lock()
        self.warn = warn or _stderr_warn
        self._lines: list[bytes] | None = None      # results.jsonl as this store holds it (writing stores only)
        self._records: list[Record] = []           # what records() gives a writing store: its lines, typed
        self._meta: dict[str, Any] | None = None
        self._results_mark: FileMark | None = None
        self._meta_mark: FileMark | None = None
        self._key: RunKey | None = None             # the run's signing key (writing stores only)

    @classmethod
    def create(cls, output_dir: Path, metadata: dict[str, Any],
               warn: Callable[[str], None] | None = None) -> "RunStore":
        store = cls(output_dir, new_run_id(), warn)
        try:
            store.dir.mkdir(parents=True, exist_ok=False)
            (store.dir / "logs").mkdir()
        except OSError as exc:
            raise UsageError(f"output_dir {output_dir}: cannot create a run folder there: {exc.strerror}") from None
        try:
            store._key = RunKey.create(_cache_dir(metadata), store.run_id)
        except UsageError:
            (store.dir / "logs").rmdir()                    # the empty folder made just now
            store.dir.rmdir()
            raise
        store._meta = {"schema_version": SCHEMA_VERSION, "run_id": store.run_id, **metadata,
                       "signing": store._key.record()}
        store._lines = []
        store._write_meta()
        store._write_results()
        return store

    @classmethod
    def open(cls, output_dir: Path, run_id: str) -> "RunStore":
        """A past run, to read (report, compare, export): nothing in its folder is created, and no link that leads
        out of it is followed (harness.core.untrusted.read_run_file)."""
        check_run_id(run_id)
        store = cls(output_dir, run_id)
        if store.dir.is_symlink() and not store.dir.resolve().is_relative_to(output_dir.resolve()):
            raise UsageError(f"{show_path(store.dir)}: a link out of the output folder; not followed")
        if not store.dir.is_dir() or not os.path.lexists(store.run_json):
            raise UsageError(f"{show_path(store.dir)}: no such run (no run.json)")
        return store

    @classmethod
    def resume(cls, output_dir: Path, run_id: str, warn: Callable[[str], None] | None = None) -> "RunStore":
        """A past run, to continue: its run.json and results.jsonl are taken into memory; a torn last line (a run
        killed mid-write) is cut away, so its pair runs again and the next record starts on a line of its own. New
        lines are signed with the run's own key; a line it does not verify, or a second line for a pair, is removed
        (KeyFileError, exit 2, when the key file is gone)."""
        store = cls.open(output_dir, run_id)
        store.warn = warn or _stderr_warn
        store._meta = store.metadata()
        store._key = signing.key_to_resume(store._meta, store.run_json)
        _real_dir(store.dir / "logs", store.warn)
        data = original = store._read_run_file("results.jsonl") or b""
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            if _parse(tail) is None:
                number = data.count(b"\n") + 1
                store.warn(f"{store.results_path}:{number}: torn last line (a run killed while writing it) "
                           f"removed; its pair runs again")
                data = data[:cut]
            else:
                data += b"\n"
        lines = data.splitlines(keepends=True)
        checked = check_lines(lines, KeyLookup(store._key))
        removed = set()
        for issue in checked.issues:
            if issue.kind is Issue.NOT_A_RECORD:
                store.warn(f"{store.results_path}:{issue.number}: {issue.why}; skipped")
            else:
                store.warn(f"{store.results_path}:{issue.number}: {issue.why}; removed")
                removed.add(issue.number)
        store._lines = [line for number, line in enumerate(lines, 1) if number not in removed]
        store._records = [r for r, _ in checked.records]
        if data != original or removed:
            store._write_results()
        store._results_mark = FileMark.of(store.results_path, full=False)
        store._meta_mark = FileMark.of(store.run_json)
        return store

    def metadata(self) -> dict[str, Any]:
        if self._meta is not None:
            return json.loads(json.dumps(self._meta, default=str))
        raw = self._read_run_file("run.json")
        if raw is None:
            raise InputError(f"{show_path(self.run_json)}: no such file")
        try:
            data = load_json(raw)
        except ValueError as exc:
            raise InputError(f"{show_path(self.run_json)}: unreadable: {str(exc)[:200]}") from None
        if not isinstance(data, dict):
            raise InputError(f"{show_path(self.run_json)}: not a run.json (a JSON object), got {type(data).__name__}")
        return data

    def _read_run_file(self, name: str) -> bytes | None:
        try:
            return read_run_file(self.dir, name)
        except ReadError as exc:
            raise InputError(f"{show_path(self.dir / name)}: cannot read: {exc.why}") from None

    def update_metadata(self, **fields: Any) -> None:
        with self.lock:
            if self._meta is None:
                raise RuntimeError("update_metadata on a store opened for reading")
            self._check(self.run_json, self._meta_mark, "run.json")
            self._meta.update(fields)
            self._write_meta()

    def append(self, record: RecordDraft | dict[str, Any]) -> Record:
        """One record's line, signed (a draft is written as its to_json(); a dict is a record's JSON already, as a
        dask task returns it); the Record that line reads back as, which records() gives from then on. A record
        that would not read back (Record.from_json) is a RecordError, and nothing is written."""
        if self._lines is None or self._key is None:
            raise RuntimeError("append on a store opened for reading")
        data = record.to_json() if isinstance(record, RecordDraft) else record
        line = signing.signed_line(clean_json(data), self._key)
        with self.lock:
            typed = Record.from_json(json.loads(line), f"{self.results_path}:{len(self._lines) + 1}")
            changed = self._check(self.results_path, self._results_mark, "results.jsonl", full=False)
            self._lines.append(line)
            self._records.append(typed)
            mark = None if changed else self._append_to_ours(line)
            if mark is None:
                if not changed:                 # deleted or replaced between the check and the write
                    self._check(self.results_path, self._results_mark, "results.jsonl", full=False)
                self._write_results()
            else:
                self._results_mark = mark
        return typed

    def _append_to_ours(self, line: bytes) -> FileMark | None:
        """Append to results.jsonl only if it is still the file this store wrote (never create it: a file deleted
        a moment ago is written again whole, and said so, by the caller); the mark of the file as appended to,
        or None when it was not."""
        try:
            fd = os.open(self.results_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        size = None
        try:
            st = os.fstat(fd)
            if self._results_mark is None or st.st_ino != self._results_mark.inode:
                return None
            size = st.st_size
            view = memoryview(line)
            while view:                     # after a short write, the next one says why (a full disk, a size limit)
                written = os.write(fd, view)
                if not written:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
            os.fsync(fd)
            st = os.fstat(fd)
            return FileMark(st.st_ino, st.st_size, None)
        except OSError as exc:
            _cut_back(fd, size)                     # no torn line for a reader, or a resumed run's next append
            raise WriteError(self.results_path, exc) from None
        finally:
            os.close(fd)

    def finish(self) -> None:
        """The end of a run: both files must hold exactly what this store wrote; rewrite any that does not."""
        with self.lock:
            if self._lines is None:
                return
            mark = self._results_mark
            digest = hashlib.sha256(b"".join(self._lines)).hexdigest()
            expected = FileMark(mark.inode, mark.size, digest) if mark else None
            if self._check(self.results_path, expected, "results.jsonl"):
                self._write_results()
            if self._check(self.run_json, self._meta_mark, "run.json"):
                self._write_meta()

    def records(self) -> list[Record]:
        """The run's records, typed (`Record.to_json` gives each one's JSON object, as `report --jsonl` prints
        it): a writing store's as it appended or resumed them, a store that only reads reads them through
        `read_records` (checked, verified, each pair once)."""
        if self._lines is not None:
            return list(self._records)
        return list(read_records(self.results_path, self.warn))

    def done_keys(self) -> set[tuple[str, str]]:
        return {r.key for r in self.records()}

    def _check(self, path: Path, mark: FileMark | None, name: str, full: bool = True) -> bool:
        """True (and one line said) when the file is no longer what this store last wrote."""
        if mark is None:
            return False
        now = FileMark.of(path, full=full and mark.sha256 is not None)
        change = mark.change(now)
        if change is None and not full and now is not None and self._lines:
            change = self._last_line_changed()
        if change is None:
            return False
        held = f"the {len(self._records)} records" if name == "results.jsonl" else "the copy"
        foreign = self._foreign_note() if name == "results.jsonl" and now is not None else ""
        self.warn(f"{path}: {change} during the run{foreign}; writing it again from {held} this run holds")
        return True

    def _foreign_note(self) -> str:
        """" (2 lines not signed by this run: 3, 4)" for the lines of results.jsonl this run's key does not
        verify, or ""."""
        try:
            lines = read_bytes(self.results_path, MARK_LIMIT).splitlines()
        except ReadError:
            return ""
        foreign = [n for n, line in enumerate(lines, 1) if line.strip() and not self._signed_here(line)]
        if not foreign:
            return ""
        shown = ", ".join(map(str, foreign[:5])) + (", ..." if len(foreign) > 5 else "")
        return f" ({len(foreign)} line{'s' if len(foreign) > 1 else ''} not signed by this run: {shown})"

    def _signed_here(self, line: bytes) -> bool:
        record = _parse(line)
        return record is not None and signing.verify_line(record, self._key) is Verdict.VALID

    def _last_line_changed(self) -> str | None:
        last = self._lines[-1]
        try:
            with open(self.results_path, "rb") as f:
                f.seek(-len(last), os.SEEK_END)
                return None if f.read(len(last)) == last else "was overwritten"
        except OSError:
            return "was overwritten"

    def _write_results(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._results_mark = _write_atomic(self.results_path, b"".join(self._lines), digest=False)

    def _write_meta(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._meta_mark = write_json_atomic(self.run_json, self._meta)


def _cut_back(fd: int, size: int | None) -> None:
    """A failed append's part undone: the file cut back to `size`, where it ended before (best effort)."""
    if size is None:
        return
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


def check_run_id(run_id: str) -> None:
    """A run id names a folder directly under the output directory."""
    if not run_id or run_id in (".", "..") or "/" in run_id or "\\" in run_id or "\0" in run_id:
        raise UsageError(f"{run_id!r} is not a run id (a folder name directly under the output directory)")


def _real_dir(path: Path, warn: Callable[[str], None]) -> None:
    """`path` as a directory of its own: a link or a file in its place (which would send what is written there
    elsewhere) is removed first, and said so."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        warn(f"{show_path(path)}: not a folder (a link or a file); replaced by an empty folder")
        path.unlink()
    path.mkdir(exist_ok=True)


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        record = load_json(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _cache_dir(metadata: dict[str, Any]) -> str:
    """Where a new run's key goes: the run's cache_dir (config), else the default."""
    config = metadata.get("config")
    cache_dir = config.get("cache_dir") if isinstance(config, dict) else None
    return cache_dir if isinstance(cache_dir, str) and cache_dir else signing.DEFAULT_CACHE_DIR


class Issue(enum.Enum):
    NOT_A_RECORD = "not a record"           # not JSON, or not a record's shape
    FOREIGN = "foreign"                     # a record the run's key does not verify
    DUPLICATE = "duplicate"                 # a second line for a (problem, solution) already read


@dataclass(frozen=True)
class LineIssue:
    number: int                             # 1-based line number in results.jsonl
    why: str                                # "bad signature", "unsigned line in a signed run", ...
    kind: Issue


@dataclass(frozen=True)
class CheckedLines:
    records: list[tuple[Record, int]]               # (record, line number), each pair once
    issues: list[LineIssue]
    unverified: str | None                  # why no line could be verified (no key), or None


def check_lines(lines: list[bytes], keys: KeyLookup) -> CheckedLines:
    """The one reader of results.jsonl lines: the records to use, and every other non-blank line with why. A line
    is used when it is a record, carries the run's signature (or the run has no key to check it with: then
    `unverified` says why), and is the first valid line for its (problem, solution). A torn last line (no newline:
    a run killed mid-write, or one still writing) is left out silently."""
    records: list[tuple[Record, int]] = []
    issues: list[LineIssue] = []
    first: dict[tuple[str, str], int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record, why = _record_of(line, number)
        torn = number == len(lines) and not line.endswith(b"\n") and why == NOT_JSON
        if record is None:
            if not torn:
                issues.append(LineIssue(number, why, Issue.NOT_A_RECORD))
            continue
        verdict = signing.verify_line(record.raw, keys.key)
        if verdict in (Verdict.BAD_SIGNATURE, Verdict.UNSIGNED):
            issues.append(LineIssue(number, verdict.value, Issue.FOREIGN))
            continue
        if record.key in first:
            issues.append(LineIssue(number, f"a second line for ({record.problem}, {record.solution}); "
                                            f"the first, line {first[record.key]}, is kept", Issue.DUPLICATE))
            continue
        first[record.key] = number
        records.append((record, number))
    return CheckedLines(records, issues, _unverified(keys, records))


NOT_JSON = "not a JSON line"


def _record_of(line: bytes, number: int) -> tuple[Record | None, str]:
    """(record, "") for a well-formed record line, else (None, why)."""
    try:
        obj = load_json(line)
    except ValueError:
        return None, NOT_JSON
    try:
        return Record.from_json(obj, f"line {number}"), ""
    except RecordError as exc:
        return None, f"bad record ({exc.what})"


def _unverified(keys: KeyLookup, records: list[tuple[Record, int]]) -> str | None:
    if keys.key is not None or not records:
        return None
    if keys.meta_readable and not keys.names_key and any(signing.FIELD in r.raw for r, _ in records):
        return "its lines carry signatures but its run.json names no signing key"
    return keys.unverified_because


def run_keys(results_path: Path) -> KeyLookup:
    """The signing key of the run whose results.jsonl this is, from the run.json beside it; never raises."""
    try:
        raw = read_run_file(results_path.parent, "run.json", MARK_LIMIT)
        meta = None if raw is None else load_json(raw)
    except (ReadError, ValueError):
        meta = None
    return signing.lookup(meta if isinstance(meta, dict) else None)


def read_records(path: Path, warn: Callable[[str], None] | None = None) -> Iterator[Record]:
    """Records of a results file (report, compare), verified with its run's key: a line that is not a record (not
    JSON, a schema_version newer than this harness reads, a required field missing or of the wrong type), not
    signed by the run, or a second line for a pair is named in a warning (file:line, why) and skipped; a run
    without a key to verify with (one from before records were signed, or its key file gone) gets a one-line
    notice that its records are unverified."""
    try:
        data = read_run_file(path.parent, path.name)
    except ReadError as exc:
        raise InputError(f"{show_path(path)}: cannot read: {exc.why}") from None
    if data is None:
        return iter([])                         # a run that has not written a record yet
    lines = data.splitlines(keepends=True)
    warn = warn or _stderr_warn
    checked = check_lines(lines, run_keys(path))
    for issue in checked.issues:
        warn(f"{path}:{issue.number}: {issue.why}; skipped")
    if checked.unverified:
        count = len(checked.records)
        warn(f"{path}: {count} record{'s' if count != 1 else ''} unverified: {checked.unverified}")
    return iter([record for record, _ in checked.records])
