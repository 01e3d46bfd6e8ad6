"""Whether a pair ranks: the one decision every output reads (the terminal table's summary, leaderboard.md,
`report --json/--csv/--kernelbench`, the HTML pages, `compare` and `ci`).

A ranked pair may be a problem's best and counts in the geometric mean and fast_p. A pair ranks when it is `ok`
(correct, and nothing invalidates it), none of its flags keeps it off (harness.core.flags) and it is not a control:
a candidate named `aa_*` (the A/A copies of the reference, calibrate's `aa_reference`) or `control_*`
(docs/AUTHORING.md), or any pair of a calibrate run. Pure functions: no other harness module but flags."""
from __future__ import annotations

from typing import Any, Iterable

from harness.core import flags

CONTROL_PREFIXES = ("aa_", "control_")


def is_control_name(candidate: str) -> bool:
    """A candidate named as a control (`aa_*`, `control_*`)."""
    return candidate.startswith(CONTROL_PREFIXES)


def is_calibrate_run(meta: Any) -> bool:
    """A run made by `run_eval.py calibrate` (run.json's argv): every pair in it is the reference against itself."""
    argv = meta.get("argv") if isinstance(meta, dict) else None
    return isinstance(argv, list) and len(argv) > 1 and argv[1] == "calibrate"


def is_control(candidate: str, calibrate: bool = False) -> bool:
    """A control: named as one, or any pair of a calibrate run."""
    return calibrate or is_control_name(candidate)


def ranks(candidate: str, ok: bool, flag_names: Iterable[str], calibrate: bool = False) -> bool:
    """The decision: `ok`, no flag keeps it off the ranking, and not a control."""
    return ok and not is_control(candidate, calibrate) and flags.ranks(flag_names)


def record_ranks(record: Any, calibrate: bool = False) -> bool:
    """`ranks` of a record's JSON object (`status`, `correct`, `flags`, `solution`; a missing `flags` or `solution`
    reads as none): a field of the wrong type does not rank (a reader older than the writer fails closed)."""
    if not isinstance(record, dict):
        return False
    names, solution = record.get("flags") or [], record.get("solution", "")
    if not isinstance(names, (list, tuple)) or not isinstance(solution, str):
        return False
    ok = record.get("status") == "ok" and record.get("correct") is True
    return ranks(solution.rsplit("/", 1)[-1], ok, (str(n) for n in names), calibrate)
