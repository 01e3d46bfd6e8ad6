"""The record: one JSON object per (problem, candidate) pair. Its fields are a public interface (see README);
change them only with a schema version bump.

Write side: `new_record`, `finish` and `add_flag` build the plain dict the store signs and appends. Read side:
`Record.from_json` checks a record read back (schema_version, required fields, their types) and gives the typed,
immutable `Record` that report, compare, ci, the HTML pages and the KernelBench export read."""
from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass, field
from typing import Any, Iterable

from harness import SCHEMA_VERSION
from harness.core.errors import InputError
from harness.core.flags import INVALIDATING, ranks
from harness.core.numbers import is_number, number


class Status(str, enum.Enum):
    """How a pair ended. A str, so a Status compares equal to (and JSON-encodes as) its value."""
    OK = "ok"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    LOAD_ERROR = "load_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    OOM = "oom"
    CRASHED = "crashed"
    SKIPPED = "skipped"
    INVALID = "invalid"

    def __str__(self) -> str:
        return self.value


STATUSES = tuple(s.value for s in Status)

# Flags that mean the output or the timing cannot be trusted (a pair carrying one is `invalid`): harness.core.flags.
INVALIDATING_FLAGS = INVALIDATING

REQUIRED_FIELDS = ("schema_version", "problem", "solution", "status", "correct", "flags", "error", "speedup",
                   "device")

# Fields that hold an object (or null); read back as they are.
OBJECT_FIELDS = ("seed", "gpu", "build", "precision", "sandbox", "retried", "correctness", "timing", "worker",
                 "kernels", "performance", "flag_details")


# ---------------------------------------------------------------- write side

def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_record(problem: str, solution: str, device: str, run_id: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "problem": problem,
        "solution": solution,
        "status": None,
        "correct": False,
        "flags": [],
        "error": None,
        "speedup": None,
        "device": device,
        "gpu": None,
        "build": None,
        "correctness": None,
        "timing": None,
        "worker": None,
        "sandbox": None,
        "precision": None,
        "started_at": now(),
        "finished_at": None,
    }


def finish(record: dict[str, Any], status: str, error: str | None = None) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    record["status"] = status
    record["correct"] = status == "ok"
    record["error"] = one_line(error) if error else None
    record["finished_at"] = now()
    return record


def one_line(text: str, limit: int = 500) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def add_flag(record: dict[str, Any], flag: str) -> None:
    if flag not in record["flags"]:
        record["flags"].append(flag)


def check_record(record: Any) -> list[str]:
    """Problems with a record read back from a file (empty list when it is well-formed): Record.from_json's
    checks, as a list."""
    try:
        Record.from_json(record, "record")
    except RecordError as exc:
        return [exc.what]
    return []


# ---------------------------------------------------------------- read side

class RecordError(InputError):
    """A record that cannot be read, in one line: where it is (file:line) and what is wrong with it."""

    def __init__(self, where: str, what: str):
        super().__init__(f"{where}: {what}")
        self.where, self.what = where, what


@dataclass(frozen=True)
class Record:
    """One record read back: the documented fields, typed, and `raw`, the JSON object itself (nothing is lost:
    fields without an attribute here, such as error_detail or hmac, are in it). A speedup or CI end that is not a
    finite number (null, or NaN/Inf, which the store writes as strings) reads as None."""
    schema_version: int
    problem: str
    solution: str
    status: Status
    correct: bool
    flags: tuple[str, ...]
    error: str | None
    speedup: float | None
    device: str
    raw: dict[str, Any] = field(repr=False)
    run_id: str | None = None
    speedup_ci: tuple[float, float] | None = None
    speedup_vs_compile: float | None = None
    speedup_vs_compile_ci: tuple[float, float] | None = None
    started_at: str | None = None
    finished_at: str | None = None
    seed: dict[str, Any] | None = None
    gpu: dict[str, Any] | None = None
    build: dict[str, Any] | None = None
    precision: dict[str, Any] | None = None
    sandbox: dict[str, Any] | None = None
    retried: dict[str, Any] | None = None
    correctness: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    worker: dict[str, Any] | None = None
    kernels: dict[str, Any] | None = None
    performance: dict[str, Any] | None = None
    flag_details: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: Any, where: str) -> "Record":
        """The record in `obj` (a parsed JSON line); a RecordError naming `where` when its schema_version is
        missing or newer than this harness reads, a required field is missing, or a field has the wrong type."""
        if not isinstance(obj, dict):
            raise RecordError(where, "not an object")
        version = _schema_version(obj, where)
        missing = [k for k in REQUIRED_FIELDS if k not in obj]
        if missing:
            raise RecordError(where, "missing field " + ", ".join(f"'{k}'" for k in missing))
        return cls(
            schema_version=version, problem=_text(obj, "problem", where), solution=_text(obj, "solution", where),
            status=_status(obj, where), correct=_bool(obj, "correct", where), flags=_flags(obj, where),
            error=_text(obj, "error", where, optional=True), speedup=_number(obj, "speedup", where),
            device=_text(obj, "device", where), raw=obj, run_id=_text(obj, "run_id", where, optional=True),
            speedup_ci=_interval(obj, "speedup_ci", where),
            speedup_vs_compile=_number(obj, "speedup_vs_compile", where),
            speedup_vs_compile_ci=_interval(obj, "speedup_vs_compile_ci", where),
            started_at=_text(obj, "started_at", where, optional=True),
            finished_at=_text(obj, "finished_at", where, optional=True),
            **{name: _object(obj, name, where) for name in OBJECT_FIELDS})

    @classmethod
    def of(cls, item: "Record | dict[str, Any]", where: str = "record") -> "Record":
        """`item` when it is a Record already, else the record in it (from_json)."""
        return item if isinstance(item, Record) else cls.from_json(item, where)

    @property
    def key(self) -> tuple[str, str]:
        """(problem, solution): what identifies a pair across runs."""
        return self.problem, self.solution

    @property
    def candidate(self) -> str:
        """The candidate's name: the last part of `solution`."""
        return self.solution.rsplit("/", 1)[-1]

    @property
    def ok(self) -> bool:
        """Correct, and nothing makes its output or timing untrustworthy."""
        return self.status is Status.OK and self.correct

    @property
    def ranked(self) -> bool:
        """`ok`, and none of its flags keeps it off a problem's best, the geometric mean and fast_p (flags.FLAGS)."""
        return self.ok and ranks(self.flags)

    @property
    def invalid(self) -> bool:
        """Correct outputs, but a defense says the output or the timing cannot be trusted."""
        return self.status is Status.INVALID


def as_records(items: Iterable["Record | dict[str, Any]"], where: str = "record") -> list[Record]:
    """Records from Records or JSON objects (a RecordError names the first bad one: "<where> <n>")."""
    return [Record.of(item, f"{where} {i}") for i, item in enumerate(items, 1)]


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _schema_version(obj: dict[str, Any], where: str) -> int:
    if "schema_version" not in obj:
        raise RecordError(where, "missing field 'schema_version'")
    version = obj["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RecordError(where, f"schema_version {one_line(repr(version), 60)} is not a version number")
    if version > SCHEMA_VERSION:
        raise RecordError(where, f"schema_version {version} is newer than this harness reads (up to "
                                 f"{SCHEMA_VERSION})")
    return version


def _status(obj: dict[str, Any], where: str) -> Status:
    try:
        return Status(obj["status"])
    except ValueError:
        raise RecordError(where, f"unknown status {one_line(repr(obj['status']), 60)}") from None


def _text(obj: dict[str, Any], name: str, where: str, optional: bool = False) -> str | None:
    value = obj.get(name)
    if isinstance(value, str) or (optional and value is None):
        return value
    raise RecordError(where, f"'{name}' is {_kind(value)}, not a string")


def _bool(obj: dict[str, Any], name: str, where: str) -> bool:
    value = obj.get(name)
    if not isinstance(value, bool):
        raise RecordError(where, f"'{name}' is {_kind(value)}, not true or false")
    return value


def _flags(obj: dict[str, Any], where: str) -> tuple[str, ...]:
    flags = obj["flags"]
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise RecordError(where, "'flags' is not a list of strings")
    return tuple(flags)


def _object(obj: dict[str, Any], name: str, where: str) -> dict[str, Any] | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, dict):
        raise RecordError(where, f"'{name}' is {_kind(value)}, not an object")
    return value


def _finite(value: Any, name: str, where: str) -> float | None:
    if value is not None and not is_number(value):
        raise RecordError(where, f"'{name}' is {_kind(value)}, not a number")
    return number(value)


def _number(obj: dict[str, Any], name: str, where: str) -> float | None:
    return _finite(obj.get(name), name, where)


def _interval(obj: dict[str, Any], name: str, where: str) -> tuple[float, float] | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise RecordError(where, f"'{name}' is not [lo, hi]")
    lo, hi = (_finite(v, name, where) for v in value)
    return None if lo is None or hi is None else (lo, hi)
