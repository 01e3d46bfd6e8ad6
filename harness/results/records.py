"""The record: one JSON object per (problem, candidate) pair. Its fields are a public interface (see README);
change them only with a schema version bump.

Write side: `new_record` starts a `RecordDraft`, the writers fill in its typed parts (harness.results.parts),
`finish` gives it its Status, `add_flag` its flags, and the run hands the draft to the store, which writes its
`to_json()` and gives back the `Record` that line reads as. Read side: `Record.from_json` checks a record read back
(schema_version, required fields, their types) and gives the typed, immutable `Record`; RunStore.records() and
read_records give nothing else, and report, compare, ci, calibrate, the HTML pages and the KernelBench export read
only Records. `Record.to_json` is its line's JSON object again (`report --jsonl`)."""
from __future__ import annotations

import copy
import datetime as _dt
import enum
from dataclasses import dataclass, field, fields
from typing import Any, Iterable

from harness import SCHEMA_VERSION
from harness.core.errors import InputError
from harness.core import ranking
from harness.core.flags import INVALIDATING
from harness.core.numbers import is_number, number
from harness.results.jsonobj import ABSENT, Absent, JsonObject
from harness.results.parts import (Build, Correctness, Gpu, Kernels, Performance, Precision, Profile, Retried, Sandbox,
                                   Seed, SideStats, SizeResult, Timing, WorkerRun)


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

# Fields that hold an object (or null), and the part each reads back as; flag_details (flag name -> its sentence)
# is keyed by whatever flags the record carries, so it stays a dict.
OBJECT_FIELDS: dict[str, type[JsonObject] | None] = {
    "seed": Seed, "gpu": Gpu, "build": Build, "precision": Precision, "sandbox": Sandbox, "retried": Retried,
    "correctness": Correctness, "timing": Timing, "worker": WorkerRun, "kernels": Kernels,
    "performance": Performance, "profile": Profile, "flag_details": None}


# ---------------------------------------------------------------- write side

def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(kw_only=True)
class RecordDraft(JsonObject):
    """A record while it is written. Its JSON (`to_json`) is the record's line: these fields in this order; the
    ones that default to ABSENT are written only once a writer sets them."""
    schema_version: int = SCHEMA_VERSION
    run_id: str
    problem: str
    solution: str
    status: Status | None = None
    correct: bool = False
    flags: list[str] = field(default_factory=list)
    error: str | None = None
    speedup: float | None = None
    device: str
    gpu: Gpu | None = None
    build: Build | None = None
    correctness: Correctness | None = None
    timing: Timing | None = None
    worker: WorkerRun | None = None
    sandbox: Sandbox | None = None
    precision: Precision | None = None
    started_at: str = field(default_factory=now)
    finished_at: str | None = None
    seed: Seed | Absent = ABSENT                      # the pair ran (a record decided before running has none)
    error_detail: str | None | Absent = ABSENT        # a failure's traceback or compiler output, where it has one
    speedup_ci: list[float] | Absent = ABSENT
    speedup_vs_compile: float | Absent = ABSENT
    speedup_vs_compile_ci: list[float] | Absent = ABSENT
    flag_details: dict[str, str | None] | Absent = ABSENT     # flag name -> why it is on the record
    kernels: Kernels | Absent = ABSENT
    performance: Performance | Absent = ABSENT
    retried: Retried | Absent = ABSENT
    sizes: list[SizeResult] | Absent = ABSENT          # problems that declare several sizes: one entry per size
    sizes_geomean: float | None | Absent = ABSENT      # the geometric mean of the timed sizes' speedups
    profile: Profile | Absent = ABSENT                # run_eval.py profile's records only (its own folder)

    def __setattr__(self, name: str, value: Any) -> None:
        late = self.__dict__.setdefault("_late", [])    # the keys written only once set, in the order they were
        if value is not ABSENT and name in _LATE and name not in late:
            late.append(name)
        super().__setattr__(name, value)

    def to_json(self) -> dict[str, Any]:
        """The record's JSON object: the fields always written, then the others in the order they were set."""
        data = super().to_json()
        order = [k for k in data if k not in _LATE] + [k for k in self.__dict__["_late"] if k in data]
        return {k: data[k] for k in order}

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def flag_detail(self, name: str) -> str | None:
        return self.flag_details.get(name) if self.flag_details else None

    def set_flag_detail(self, name: str, detail: str | None) -> None:
        if self.flag_details is ABSENT:
            self.flag_details = {}
        self.flag_details[name] = detail


_LATE = {f.name for f in fields(RecordDraft) if f.default is ABSENT}


def new_record(problem: str, solution: str, device: str, run_id: str) -> RecordDraft:
    return RecordDraft(run_id=run_id, problem=problem, solution=solution, device=device)


def exit_status(kind: str) -> Status:
    """What a worker's end makes of its pair (or build, or lint), by harness.run.workerproc.WorkerExit's `kind`:
    `timeout` and `oom` as they are, anything else (it exited, or broke the protocol) `crashed`."""
    return {"timeout": Status.TIMEOUT, "oom": Status.OOM}.get(kind, Status.CRASHED)


def finish(record: RecordDraft, status: Status, error: str | None = None) -> RecordDraft:
    if not isinstance(status, Status):
        raise TypeError(f"finish takes a Status, not {status!r}")
    record.status = status
    record.correct = status is Status.OK
    record.error = one_line(error) if error else None
    record.finished_at = now()
    return record


def one_line(text: str, limit: int = 500) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def add_flag(record: RecordDraft, flag: str) -> None:
    if flag not in record.flags:
        record.flags.append(flag)


def check_record(record: Any) -> list[str]:
    """Problems with a record read back from a file (empty list when it is well-formed): Record.from_json's
    checks, as a list."""
    try:
        Record.from_json(record.to_json() if isinstance(record, RecordDraft) else record, "record")
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
    seed: Seed | None = None
    gpu: Gpu | None = None
    build: Build | None = None
    precision: Precision | None = None
    sandbox: Sandbox | None = None
    retried: Retried | None = None
    correctness: Correctness | None = None
    timing: Timing | None = None
    worker: WorkerRun | None = None
    kernels: Kernels | None = None
    performance: Performance | None = None
    profile: Profile | None = None
    flag_details: dict[str, str | None] | None = None     # flag name -> its sentence, as read (values unchecked)
    sizes: tuple[SizeResult, ...] | None = None            # problems with several sizes: per size (SizeResult)
    sizes_geomean: float | None = None

    @classmethod
    def from_json(cls, obj: Any, where: str) -> "Record":
        """The record in `obj` (a parsed JSON line); a RecordError naming `where` when its schema_version is
        missing or newer than this harness reads, a required field is missing, or a field has the wrong type."""
        if not isinstance(obj, dict):
            raise RecordError(where, "not an object")
        line = _Line(obj, where)
        version = line.schema_version()
        missing = [k for k in REQUIRED_FIELDS if k not in obj]
        if missing:
            raise RecordError(where, "missing field " + ", ".join(f"'{k}'" for k in missing))
        return cls(
            schema_version=version, problem=line.text("problem"), solution=line.text("solution"),
            status=line.status(), correct=line.boolean("correct"), flags=line.flags(),
            error=line.text("error", optional=True), speedup=line.number("speedup"), device=line.text("device"),
            raw=obj, run_id=line.text("run_id", optional=True), speedup_ci=line.interval("speedup_ci"),
            speedup_vs_compile=line.number("speedup_vs_compile"),
            speedup_vs_compile_ci=line.interval("speedup_vs_compile_ci"),
            started_at=line.text("started_at", optional=True), finished_at=line.text("finished_at", optional=True),
            sizes=line.sizes(), sizes_geomean=line.number("sizes_geomean"),
            **{name: line.part(name) for name in OBJECT_FIELDS})

    @classmethod
    def of(cls, item: RecordLike, where: str = "record") -> "Record":
        """`item` when it is a Record already, else the record in it (from_json; a draft through its JSON)."""
        if isinstance(item, Record):
            return item
        return cls.from_json(item.to_json() if isinstance(item, RecordDraft) else item, where)

    def to_json(self) -> dict[str, Any]:
        """The record's JSON object, as its line holds it (every field, hmac included): a copy, so the record
        stays as it was read. What `report --jsonl` prints."""
        return copy.deepcopy(self.raw)

    def median_ms(self, side: str) -> float | None:
        """One side's median time (`reference` or `candidate`: timing.<side>.median_ms) as it reads, when it is a
        finite number; else None."""
        stats = getattr(self.timing, side, None) if self.timing is not None else None
        value = stats.median_ms if isinstance(stats, SideStats) else None
        return value if number(value) is not None else None

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
    def control(self) -> bool:
        """A control by its name (`aa_*`, `control_*`): never ranked (harness.core.ranking)."""
        return ranking.is_control_name(self.candidate)

    @property
    def ranked(self) -> bool:
        """May be a problem's best and counts in the geometric mean and fast_p: harness.core.ranking's decision
        (`ok`, no flag keeps it off, not a control). A pair of a calibrate run: ranking.ranks with calibrate=True."""
        return ranking.ranks(self.candidate, self.ok, self.flags)

    @property
    def invalid(self) -> bool:
        """Correct outputs, but a defense says the output or the timing cannot be trusted."""
        return self.status is Status.INVALID


RecordLike = Record | RecordDraft | dict[str, Any]      # what Record.of types: a Record, a draft, a record's JSON


def as_records(items: Iterable[RecordLike], where: str = "record") -> list[Record]:
    """Records from Records, drafts or JSON objects that did not come through the store (harness.api, tests): a
    RecordError names the first bad one ("<where> <n>")."""
    return [Record.of(item, f"{where} {i}") for i, item in enumerate(items, 1)]


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _Line:
    """Checked reads of one JSON line's fields, each failure a RecordError naming where the line is."""

    def __init__(self, obj: dict[str, Any], where: str):
        self.obj, self.where = obj, where

    def schema_version(self) -> int:
        if "schema_version" not in self.obj:
            raise RecordError(self.where, "missing field 'schema_version'")
        version = self.obj["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise RecordError(self.where, f"schema_version {one_line(repr(version), 60)} is not a version number")
        if version > SCHEMA_VERSION:
            raise RecordError(self.where, f"schema_version {version} is newer than this harness reads (up to "
                                          f"{SCHEMA_VERSION})")
        return version

    def status(self) -> Status:
        try:
            return Status(self.obj["status"])
        except ValueError:
            raise RecordError(self.where, f"unknown status {one_line(repr(self.obj['status']), 60)}") from None

    def text(self, name: str, optional: bool = False) -> str | None:
        value = self.obj.get(name)
        if isinstance(value, str) or (optional and value is None):
            return value
        raise RecordError(self.where, f"'{name}' is {_kind(value)}, not a string")

    def boolean(self, name: str) -> bool:
        value = self.obj.get(name)
        if not isinstance(value, bool):
            raise RecordError(self.where, f"'{name}' is {_kind(value)}, not true or false")
        return value

    def flags(self) -> tuple[str, ...]:
        flags = self.obj["flags"]
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise RecordError(self.where, "'flags' is not a list of strings")
        return tuple(flags)

    def part(self, name: str) -> Any:
        """The object field `name`, read back as its part (OBJECT_FIELDS), or None."""
        value = self.obj.get(name)
        if value is not None and not isinstance(value, dict):
            raise RecordError(self.where, f"'{name}' is {_kind(value)}, not an object")
        part = OBJECT_FIELDS[name]
        return value if part is None else part.from_json(value)

    def number(self, name: str) -> float | None:
        return self._finite(self.obj.get(name), name)

    def sizes(self) -> tuple[SizeResult, ...] | None:
        """`sizes`: a list of objects (each read back as a SizeResult), or None where the record has none."""
        value = self.obj.get("sizes")
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise RecordError(self.where, "'sizes' is not a list of objects")
        return tuple(SizeResult.from_json(v) for v in value)

    def interval(self, name: str) -> tuple[float, float] | None:
        value = self.obj.get(name)
        if value is None:
            return None
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise RecordError(self.where, f"'{name}' is not [lo, hi]")
        lo, hi = (self._finite(v, name) for v in value)
        return None if lo is None or hi is None else (lo, hi)

    def _finite(self, value: Any, name: str) -> float | None:
        """A finite number as a float; null, NaN or Inf (written as strings) as None; anything else a RecordError."""
        if value is not None and not is_number(value):
            raise RecordError(self.where, f"'{name}' is {_kind(value)}, not a number")
        return number(value)
