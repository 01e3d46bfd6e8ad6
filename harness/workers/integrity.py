"""The worker's own code as it was before candidate code ran, and whether it still is.

`snapshot()` is taken when the candidate worker starts (before the candidate is imported): every global of the
harness modules the timing path uses (clocks, flush, measurement objects, the sampler, fingerprints, raw reads,
summaries, the tensor files, the channel and the messages), every attribute of the classes they define, and each
function's code object. `changed()` names what is no longer the same object (or no longer runs the same code), and
`shadowed(obj)` names methods an instance hides behind attributes of its own. The sampler asks after every sample
and reports the names to the parent (`tampered_timer`).

Code in the candidate's process can defeat any check made in that process (it can replace this one too); these
catch the plain cheats and say what they touched. What the parent checks with its own clock (the
`timing_inconsistent` flag) does not depend on them."""
from __future__ import annotations

import importlib
import sys
from typing import Any

WATCHED = ("harness.timing", "harness.channel", "harness.messages", "harness.workers.common",
           "harness.workers.sampler", "harness.workers.tensorfile", "harness.workers.rawread",
           "harness.workers.cudadriver", "harness.workers.integrity")

_entries: dict[str, tuple[Any, str, Any, Any]] = {}     # label -> (owner, attribute, value, value's __code__)
_MISSING = object()


def _add(label: str, owner: Any, attr: str, value: Any) -> None:
    _entries[label] = (owner, attr, value, getattr(value, "__code__", None))


def snapshot(modules: tuple[str, ...] = WATCHED) -> int:
    """Record the watched modules as they are now; returns how many entries are watched."""
    _entries.clear()
    for name in modules:
        module = sys.modules.get(name) or importlib.import_module(name)
        for attr, value in list(vars(module).items()):
            if attr.startswith("__") or attr == "_entries":
                continue
            _add(f"{name}.{attr}", module, attr, value)
            if isinstance(value, type) and value.__module__ == name:
                for member, inner in list(vars(value).items()):
                    if not member.startswith("__") or member in ("__init__", "__call__"):
                        _add(f"{name}.{attr}.{member}", value, member, inner)
    return len(_entries)


def changed() -> list[str]:
    """Labels of watched entries that are no longer the object (or the code) recorded."""
    out = []
    for label, (owner, attr, value, code) in _entries.items():
        now = vars(owner).get(attr, _MISSING)
        if now is not value or (code is not None and getattr(now, "__code__", None) is not code):
            out.append(label)
    return out


def shadowed(obj: Any) -> list[str]:
    """Methods of obj's class that obj hides behind an instance attribute of the same name."""
    cls = type(obj)
    return [f"{cls.__module__}.{cls.__name__}.{name} (on the instance)" for name in vars(obj)
            if callable(getattr(cls, name, None))]
