"""The record: one JSON object per (problem, candidate) pair. Its fields are a public interface (see README);
change them only with a schema version bump."""
from __future__ import annotations

import datetime as _dt
from typing import Any

from . import SCHEMA_VERSION

STATUSES = ("ok", "incorrect", "compile_error", "load_error", "runtime_error", "timeout", "oom", "crashed",
            "skipped", "invalid")

# Flags that mean the output or the timing cannot be trusted: a pair carrying one is `invalid`, not `ok`, and
# stays out of fast_p and the geometric mean. Other flags (no_custom_kernel, little_custom_work,
# degenerate_problem, noisy) only warn.
INVALIDATING_FLAGS = ("mutates_inputs", "output_changed_under_timing", "unsynchronized_work", "tampered_timer",
                      "faster_than_physics", "output_not_plain_tensor", "interference",
                      "reduced_precision", "timing_inconsistent")

REQUIRED_FIELDS = ("schema_version", "problem", "solution", "status", "correct", "flags", "error", "speedup",
                   "device")


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
    """Problems with a record read back from a file (empty list when it is well-formed)."""
    if not isinstance(record, dict):
        return ["not an object"]
    problems = [f"missing field '{k}'" for k in REQUIRED_FIELDS if k not in record]
    if record.get("status") not in STATUSES:
        problems.append(f"unknown status {record.get('status')!r}")
    if not isinstance(record.get("flags", []), list):
        problems.append("'flags' is not a list")
    return problems
