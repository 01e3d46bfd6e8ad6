"""A problem's declared input sizes, read and applied inside a worker (docs/AUTHORING.md, Sizes).

`SIZES`, an optional module-level dict, names each size and the module-level constants it sets:

    SIZES = {"small": {"batch_size": 16}, "medium": {"batch_size": 256}, "large": {}}

The size with no overrides is the main one (the file as written: what KernelBench's loader and every problem
without SIZES gets); where none has none, the main size is added in front as `main`. A size's constants are set on
the module only while its get_inputs() runs (`applied`), then put back: Model and get_init_inputs() always see the
file's own values, so a size changes the inputs' shapes and nothing else (`check_init` holds it to that).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from harness.shared import sizes as shared


class ProblemError(Exception):
    """A SIZES declaration the harness cannot use (the problem's fault: a load_error of every pair)."""

SCALARS = (int, float, bool, str)


@dataclass(frozen=True)
class Size:
    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    main: bool = False


MAIN_ONLY = Size(shared.MAIN, {}, True)


@dataclass(frozen=True)
class Trial:
    """One correctness trial: its index among all of them (the file's `trial`), its number k within its size (its
    seed is base + k) and its size."""
    index: int
    k: int
    size: Size

    @property
    def label(self) -> str:
        return shared.trial_label(self.k, self.size.name, self.size.main)


def declared(problem) -> list[Size]:
    """The problem's sizes in declaration order, the main one marked; [MAIN_ONLY] without SIZES. ProblemError for a
    declaration the harness cannot use."""
    raw = getattr(problem, "SIZES", None)
    if raw is None:
        return [MAIN_ONLY]
    if not isinstance(raw, dict) or not raw:
        raise ProblemError(f"SIZES must be a non-empty dict of size name -> {{constant: value}}, got {_kind(raw)}")
    if len(raw) > shared.MAX_SIZES:
        raise ProblemError(f"SIZES declares {len(raw)} sizes, at most {shared.MAX_SIZES}")
    found = [_size(problem, name, overrides) for name, overrides in raw.items()]
    mains = [s.name for s in found if not s.overrides]
    if len(mains) > 1:
        raise ProblemError(f"SIZES: {', '.join(repr(n) for n in mains)} set nothing: they are the same size")
    if not mains:
        if shared.MAIN in raw:
            raise ProblemError(f"SIZES: {shared.MAIN!r} names the main size: it must set nothing")
        return [MAIN_ONLY] + found
    return [Size(s.name, s.overrides, not s.overrides) for s in found]


def _size(problem, name: Any, overrides: Any) -> Size:
    if not isinstance(name, str) or not shared.NAME.fullmatch(name):
        raise ProblemError(f"SIZES: {name!r} is not a size name (a letter, then letters, digits or _; at most 32)")
    if not isinstance(overrides, dict):
        raise ProblemError(f"SIZES[{name!r}] must be a dict of module-level constant -> value, got {_kind(overrides)}")
    for key, value in overrides.items():
        if not isinstance(key, str) or not hasattr(problem, key):
            raise ProblemError(f"SIZES[{name!r}] sets {key!r}, which the problem does not define at module level")
        current = getattr(problem, key)
        if not isinstance(current, SCALARS + (tuple, list)) or callable(current):
            raise ProblemError(f"SIZES[{name!r}] sets {key!r}, which is not a constant (a number, string or tuple)")
        if not _plain(value):
            raise ProblemError(f"SIZES[{name!r}][{key!r}] must be a number, string or tuple of them, got "
                               f"{_kind(value)}")
    return Size(name, dict(overrides))


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(isinstance(v, SCALARS) for v in value)
    return isinstance(value, SCALARS)


def _kind(value: Any) -> str:
    return type(value).__name__


@contextmanager
def applied(problem, size: Size | None) -> Iterator[None]:
    """`size`'s constants set on the problem's module for the block, the file's own put back after it."""
    if size is None or not size.overrides:
        yield
        return
    saved = {k: getattr(problem, k) for k in size.overrides}
    try:
        for key, value in size.overrides.items():
            setattr(problem, key, tuple(value) if isinstance(value, list) else value)
        yield
    finally:
        for key, value in saved.items():
            setattr(problem, key, value)


def plan(found: list[Size], trials: int) -> list[Trial]:
    """Every correctness trial: `trials` per size, the main size's first (shared.ordered)."""
    main = next(s for s in found if s.main)
    by_name = {s.name: s for s in found}
    names = shared.ordered([s.name for s in found], main.name)
    steps = [(by_name[n], k) for n in names for k in range(trials)]
    return [Trial(i, k, size) for i, (size, k) in enumerate(steps)]


def by_name(found: list[Size], name: str | None) -> Size:
    """The size called `name` (None or the main size's name: the main size); ProblemError for an unknown one."""
    for size in found:
        if (name is None and size.main) or size.name == name:
            return size
    raise ProblemError(f"no size {name!r} (declared: {', '.join(s.name for s in found)})")


def check_init(problem, found: list[Size], init: list) -> None:
    """ProblemError when a size's constants change what get_init_inputs() returns: sizes may change only the
    inputs (the model is built once, at the main size)."""
    want = _signature(init)
    for size in found:
        if not size.overrides:
            continue
        with applied(problem, size):
            got = _signature(list(problem.get_init_inputs()))
        if got != want:
            raise ProblemError(f"size {size.name!r} changes get_init_inputs() ({got} != {want}): a size may change "
                               f"only get_inputs()")


def _signature(values: list) -> list:
    import torch
    return [("tensor", tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else repr(v) for v in values]


def shapes(inputs: list) -> list[list[int] | None]:
    """The shapes of a size's inputs (None where an input is not a tensor)."""
    import torch
    return [list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs]
