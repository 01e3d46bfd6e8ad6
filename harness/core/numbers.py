"""Numbers read back from JSON: a record line, a worker's message, run.json. JSON has no NaN or Inf, so the harness
writes them as the strings str(float) gives ('nan', 'inf', '-inf': harness.shared.channel.clean_json); a bool is
never a number. An integer past a float's range reads as the infinity of its sign, as JSON's 1e400 does."""
from __future__ import annotations

import math
from typing import Any

NON_FINITE = ("nan", "inf", "-inf")         # how NaN and Inf are written (str of the float)


def is_number(value: Any) -> bool:
    """An int or a float (NaN and Inf too, as themselves or as the strings they are written as); not a bool."""
    if isinstance(value, str):
        return value.lower() in NON_FINITE
    return isinstance(value, (int, float)) and not isinstance(value, bool)


MAGNITUDE_LIMIT = 1e100     # no measurement reads past this; arithmetic on a hostile 1.7e308 (x 1.25) overflows


def number(value: Any, finite: bool = True) -> float | None:
    """`value` as a float when is_number(value), else None. With `finite` (the default) NaN, Inf and a magnitude past
    MAGNITUDE_LIMIT are None too; without it they are the floats they stand for."""
    if not is_number(value):
        return None
    value = as_float(value)
    return value if not finite or abs(value) <= MAGNITUDE_LIMIT else None


def as_float(value: int | float | str) -> float:
    """float(value), but an int too large for a float (a 400-digit one in a hostile record) is the infinity of its
    sign instead of an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
