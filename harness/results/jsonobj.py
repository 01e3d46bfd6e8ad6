"""Dataclasses written as JSON objects: the record and its parts (harness.results.parts).

A `JsonObject` is written field by field, in declaration order, each under its own name (`to_json`); a field that
holds ABSENT is left out, which is how a key that the record writes only sometimes stays missing rather than null.
`from_json` reads one back leniently (a record line is untrusted): a part that is not an object reads as None, a
missing key as the field's default (ABSENT or None), and every other value as it is, for the reader to check."""
from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, TypeVar

T = TypeVar("T", bound="JsonObject")


class Absent:
    """The value of a field whose key is not written (None is written, as null). Falsy; one instance, ABSENT,
    which copies and pickles as itself."""
    _instance: "Absent | None" = None

    def __new__(cls) -> "Absent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT = Absent()


def to_json(value: Any) -> Any:
    """`value` as JSON data: JsonObjects as objects, tuples as lists, enums as their values."""
    if isinstance(value, JsonObject):
        return value.to_json()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


class JsonObject:
    """Base of a dataclass that is one JSON object (see the module's docstring)."""

    def to_json(self) -> dict[str, Any]:
        data = {}
        for f in dataclasses.fields(self):          # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not ABSENT:
                data[f.name] = to_json(value)
        return data

    @classmethod
    def from_json(cls: type[T], data: Any) -> T | None:
        """The object in `data` (None when `data` is not a dict); see the module's docstring."""
        if not isinstance(data, dict):
            return None
        hints = _hints(cls)
        values = {}
        for f in dataclasses.fields(cls):           # type: ignore[arg-type]
            if f.name in data:
                values[f.name] = _read(hints[f.name], data[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                values[f.name] = None
        return cls(**values)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _alternatives(hint: Any) -> tuple[Any, ...]:
    """The types a hint allows: each member of a union, else the hint itself."""
    origin = typing.get_origin(hint)
    union = origin is typing.Union or str(origin) == "<class 'types.UnionType'>"
    return typing.get_args(hint) if union else (hint,)


def _part(hint: Any) -> type | None:
    """The JsonObject class a hint names (alone or in a union), or None."""
    return next((h for h in _alternatives(hint) if isinstance(h, type) and issubclass(h, JsonObject)), None)


def _read(hint: Any, value: Any) -> Any:
    """A field's value read back: a part, a list of parts or a dict of parts where the hint says so (None when it
    is not an object, a list, a dict; entries that are not objects left out), an enum's member for its value,
    anything else as it is."""
    part = _part(hint)
    if part is not None:
        return part.from_json(value)
    kind = next((h for h in _alternatives(hint) if isinstance(h, type) and issubclass(h, enum.Enum)), None)
    if kind is not None:
        try:
            return kind(value)
        except (ValueError, TypeError):
            return value
    for h in _alternatives(hint):
        origin, args = typing.get_origin(h), typing.get_args(h)
        if origin is list and args and _part(args[0]):
            if not isinstance(value, list):
                return None
            return [_part(args[0]).from_json(v) for v in value if isinstance(v, dict)]
        if origin is dict and len(args) == 2 and _part(args[1]):
            if not isinstance(value, dict):
                return None
            return {k: _part(args[1]).from_json(v) for k, v in value.items() if isinstance(v, dict)}
    return value
