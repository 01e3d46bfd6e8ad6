"""The worker's own code as it was before candidate code ran, and whether it still is.

`snapshot()` is taken when the candidate worker starts (before the candidate is imported): every global of the
harness modules the timing path uses (clocks, flush, measurement objects, the sampler, exports, raw reads,
summaries, the tensor files, the channel and the messages), every attribute of the classes they define, and each
function's code object. `changed()` names what is no longer the same object (or no longer runs the same code), and
`shadowed(obj)` names methods an instance hides behind attributes of its own. The sampler asks after every sample
and reports the names to the parent (`tampered_timer`).

Code in the candidate's process can defeat any check made in that process (it can replace this one too); these
catch the plain cheats and say what they touched. What the parent checks with its own clock (the
`timing_inconsistent` flag) does not depend on them."""
from __future__ import annotations

import contextlib
import importlib
import itertools
import operator
import sys
import types
from typing import Any

WATCHED = ("harness.worker.timing", "harness.shared.stats", "harness.shared.points", "harness.shared.channel",
           "harness.shared.messages",
           "harness.worker.common", "harness.worker.sampler", "harness.shared.tensorfile", "harness.worker.rawread",
           "harness.worker.cudadriver", "harness.worker.integrity", "harness.shared.sizes", "harness.worker.sizes")

_entries: dict[str, tuple[Any, str, Any, Any]] = {}     # label -> (owner, attribute, value, value's __code__)
_MISSING = object()
_torch_saved: tuple = ()            # ((namespace, read-only copy of its names, added names count), ...)


def _add(label: str, owner: Any, attr: str, value: Any) -> None:
    _entries[label] = (owner, attr, value, getattr(value, "__code__", None))


def snapshot(modules: tuple[str, ...] = WATCHED) -> int:
    """Record the watched modules, and torch's own namespaces, as they are now; returns how many entries are
    watched."""
    global _torch_saved
    import torch
    import torch.nn.functional
    # (namespace, its names as they are now, whether a name added later counts): an attribute set on
    # torch.Tensor hides the C method of the same name, while names torch adds to itself on lazy imports
    # (torch._dynamo when something compiles) cannot be what a problem's get_inputs() was written to call
    _torch_saved = tuple((ns, types.MappingProxyType(dict(vars(ns))), ns is torch.Tensor)
                         for ns in (torch, torch.Tensor, torch.nn.functional))
    _last_seen.clear()
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


def watch_module(module: Any) -> None:
    """Add the globals of `module` (the problem, loaded before candidate code): its get_inputs() draws every
    sample's inputs in this process, and a candidate that wraps it does its work there, outside the timed region."""
    for attr, value in list(vars(module).items()):
        if not attr.startswith("__"):
            _add(f"{module.__name__}.{attr}", module, attr, value)


@contextlib.contextmanager
def clean_torch():
    """torch as it was before candidate code ran, for the duration: the harness draws each sample's inputs and
    copies them inside this, so a candidate that replaced torch.randn, Tensor.clone or F.linear (to do its work
    while the inputs are made, outside the timed region) is not called there. Its replacements are put back
    on the way out. A namespace nothing changed costs one pass in C over its names, comparing by identity (never
    a value's own __eq__, which a candidate's object may answer as it likes); so does one changed the same way as
    at the last call (_differences), so that a candidate which replaced a name pays no more a sample than one
    which did not: a walk in Python over torch's ~1500 names each sample (a fraction of a millisecond) reads as
    time the candidate hid from its report (`timing_inconsistent`)."""
    undo: list[tuple[Any, str, Any]] = []
    for index, (ns, saved, added_count) in enumerate(_torch_saved):
        current = vars(ns)
        if _identical(current, saved, added_count):
            continue
        replaced, added = _differences(index, current, saved, added_count)
        for name in replaced:
            undo.append((ns, name, current.get(name, _MISSING)))
            setattr(ns, name, saved[name])
        for name in added:
            undo.append((ns, name, current[name]))
            delattr(ns, name)
    try:
        yield
    finally:
        for ns, name, value in reversed(undo):
            if value is _MISSING:
                delattr(ns, name)
            else:
                setattr(ns, name, value)


_last_seen: dict[int, tuple[dict, list[str], list[str]]] = {}   # namespace index -> (its names, replaced, added)


def _identical(current: dict, saved: Any, whole: bool) -> bool:
    """Every name of `saved` bound in `current` to the very same object, and with `whole` no name besides: by
    identity, in C (a value's == is the candidate's to define: an object equal to everything would hide there)."""
    if whole and len(current) != len(saved):
        return False
    return all(map(operator.is_, map(current.get, saved.keys(), itertools.repeat(_MISSING)), saved.values()))


def _differences(index: int, current: dict, saved: Any, added_count: bool) -> tuple[list[str], list[str]]:
    """The names of a namespace that differ from `saved`: those replaced (or deleted) and those added (where added
    names count). Found by a walk over every name the first time, and again only when the namespace is no longer
    what it was at the last walk."""
    last = _last_seen.get(index)
    if last is not None and _identical(current, last[0], True):
        return last[1], last[2]
    replaced = [name for name, value in saved.items() if current.get(name, _MISSING) is not value]
    added = [name for name in current if name not in saved] if added_count else []
    _last_seen[index] = (dict(current), replaced, added)
    return replaced, added


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
