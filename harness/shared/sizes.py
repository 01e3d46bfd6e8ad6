"""A problem's input sizes as both ends of the protocol name them (docs/AUTHORING.md, Sizes). Pure: no torch.

A problem may declare `SIZES`, named variants of its module-level constants (harness.worker.sizes reads and applies
them); the main size is the file as written, what KernelBench's loader sees. Each correctness trial k runs at every
size, the main size's first, each size on the same seeds; a trial's label names its size where it is not the main
one (`trial0@small`), so the parent can tell that the candidate returned every trial it was asked for.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

MAIN = "main"                       # the main size's name when SIZES names none with no overrides
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
MAX_SIZES = 8


def trial_label(k: int, size: str, main: bool) -> str:
    """The label (and output file stem) of trial k at `size`: `trial<k>` at the main size, `trial<k>@<size>` else."""
    return f"trial{k}" if main else f"trial{k}@{size}"


def size_of(label: str | None) -> str | None:
    """The size a trial label names (None: the main size, or not a trial label)."""
    if not label or "@" not in label:
        return None
    return label.split("@", 1)[1]


def ordered(names: list[str], main: str) -> list[str]:
    """The sizes in the order their trials run: the main size first, the others as declared."""
    return [main] + [n for n in names if n != main]


def labels(names: list[str], main: str, trials: int) -> list[str]:
    """Every trial's label, in the order the trials run (per size, trials 0..trials-1)."""
    return [trial_label(k, name, name == main) for name in ordered(names, main) for k in range(trials)]


def describe(overrides: dict[str, Any], shapes: Iterable[list[int] | None]) -> str:
    """One line for a size: what it sets and the shapes of its tensor inputs, e.g.
    `batch_size=16; inputs [16, 4096]`."""
    parts = [", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in overrides.items())]
    tensors = [s for s in shapes if s is not None]
    if tensors:
        parts.append("inputs " + ", ".join(str(list(s)) for s in tensors))
    return "; ".join(p for p in parts if p)
