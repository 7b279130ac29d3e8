"""The field types of the objects Claimline stores, checked at the door and again when history is read.

The API server validates objects against their schema, but a dump, a proxy or an old release of
Claimline may not have: a claim whose ``spec.devices.requests[0].exactly`` is a string would be
stored fine and then trip every page that reads it. Every field an object carries is checked
against the type the Kubernetes API defines for it (the official client's models, kept in
``api_types.json``: see ``collector.api_types``): objects, lists, maps, strings, integers,
booleans and times, all the way down. A field the API does not define (a newer release's) and a
field whose value is ``null`` (what Go reads as absent) pass; a ``null`` element of a list or
value of a map does not.

``shape_problem`` names the first misfit; ``normalize`` refuses such an object at ingest (a
collection reports it and stores the rest, an import is refused), and ``history_reader`` skips a
stored version that misfits (written before this check), so no page reads one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import date
from functools import cache
from typing import Any

from collector.api_types import TYPES_FILE

# A misfit: the path to it, innermost step first (each step ".name" or "[i]"), and what is wrong.
Misfit = tuple[list[str], str]
Check = Callable[[Any], Misfit | None]

# YAML without quotes reads a time as a datetime (a date subclass), which is stored as its RFC 3339 text.
_TEXT: tuple[type, ...] = (str, date)


def _shown(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _text(expected: str) -> Check:
    def check(value: Any) -> Misfit | None:
        if type(value) is str or isinstance(value, _TEXT):
            return None
        return [], f"is {_shown(value)}, expected {expected}"

    return check


def _integer(value: Any) -> Misfit | None:
    if type(value) is int:
        return None
    return [], f"is {_shown(value)}, expected an integer"


def _number(value: Any) -> Misfit | None:
    if type(value) in (int, float):
        return None
    return [], f"is {_shown(value)}, expected a number"


def _boolean(value: Any) -> Misfit | None:
    if type(value) is bool:
        return None
    return [], f"is {_shown(value)}, expected a boolean"


_STRING = _text("a string")
_PRIMITIVES: dict[str, Check | None] = {
    "str": _STRING,
    "datetime": _text("a time (a string)"),
    "date": _text("a date (a string)"),
    "int": _integer,
    "float": _number,
    "bool": _boolean,
    "object": None,  # anything: an int-or-string, a driver's opaque parameters
}


def _list_of(item: Check | None, expected: str) -> Check:
    if item is _STRING:
        return _list_of_strings

    def check(value: Any) -> Misfit | None:
        if type(value) is not list:
            return [], f"is {_shown(value)}, expected a list"
        for i, element in enumerate(value):
            if element is None:
                return [f"[{i}]"], f"is null, expected {expected}"
            if item is not None:
                misfit = item(element)
                if misfit is not None:
                    misfit[0].append(f"[{i}]")
                    return misfit
        return None

    return check


def _list_of_strings(value: Any) -> Misfit | None:
    if type(value) is not list:
        return [], f"is {_shown(value)}, expected a list"
    for i, element in enumerate(value):
        if type(element) is not str:
            misfit = _STRING(element)
            if misfit is not None:
                misfit[0].append(f"[{i}]")
                return misfit
    return None


def _map_of_strings(value: Any) -> Misfit | None:
    if not isinstance(value, dict):
        return [], f"is {_shown(value)}, expected an object"
    for key, element in value.items():
        if type(key) is not str:
            return [], f"has a key that is {_shown(key)}, expected a string"
        if type(element) is not str:
            misfit = _STRING(element)
            if misfit is not None:
                misfit[0].append(f".{key}")
                return misfit
    return None


def _map_of(item: Check | None, expected: str) -> Check:
    if item is _STRING:
        return _map_of_strings

    def check(value: Any) -> Misfit | None:
        if not isinstance(value, dict):
            return [], f"is {_shown(value)}, expected an object"
        for key, element in value.items():
            if type(key) is not str:
                return [], f"has a key that is {_shown(key)}, expected a string"
            if element is None:
                return [f".{key}"], f"is null, expected {expected}"
            if item is not None:
                misfit = item(element)
                if misfit is not None:
                    misfit[0].append(f".{key}")
                    return misfit
        return None

    return check


def _model(fields: dict[str, Check | None]) -> Check:
    def check(value: Any) -> Misfit | None:
        if not isinstance(value, dict):
            return [], f"is {_shown(value)}, expected an object"
        for key, element in value.items():
            field = fields.get(key)
            # Most fields are strings: checked here, without a call.
            if field is None or element is None or (field is _STRING and type(element) is str):
                continue
            misfit = field(element)
            if misfit is not None:
                misfit[0].append(f".{key}")
                return misfit
        return None

    return check


_EXPECTED = {"str": "a string", "datetime": "a time (a string)", "int": "an integer", "bool": "a boolean"}


class _Compiler:
    """Checks built from the client's type names: ``V1Pod``, ``List[V1Container]``, ``Dict[str, str]``."""

    def __init__(self, models: dict[str, dict[str, str]]) -> None:
        self.models = models
        self.fields: dict[str, dict[str, Check | None]] = {}

    def model(self, name: str) -> Check:
        fields = self.fields.get(name)
        if fields is None:
            # Registered before it is filled: models refer to each other.
            fields = self.fields[name] = {}
            fields.update({key: self.type(kind) for key, kind in self.models[name].items()})
        return _model(fields)

    def type(self, kind: str) -> Check | None:
        kind = kind.strip()
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind]
        inner = _container(kind, ("List[", "list["), "]")
        if inner is not None:
            return _list_of(self.type(inner), self.expected(inner))
        inner = _container(kind, ("Dict[str,", "dict(str,"), "])")
        if inner is not None:
            return _map_of(self.type(inner), self.expected(inner))
        if kind in self.models:
            return self.model(kind)
        return None  # a type this file does not describe: not checked

    def expected(self, kind: str) -> str:
        kind = kind.strip()
        if kind in _EXPECTED:
            return _EXPECTED[kind]
        if kind.lower().startswith("list["):
            return "a list"
        return "an object" if kind in self.models or kind.lower().startswith("dict") else "a value"


def _container(kind: str, prefixes: tuple[str, ...], closers: str) -> str | None:
    for prefix in prefixes:
        if kind.startswith(prefix) and kind[-1] in closers:
            return kind[len(prefix) : -1]
    return None


@cache
def _checks() -> dict[str, Check]:
    types = json.loads(TYPES_FILE.read_text())
    compiler = _Compiler(types["models"])
    return {kind: compiler.model(model) for kind, model in types["kinds"].items()}


def _where(steps: list[str]) -> str:
    return "".join(reversed(steps)).removeprefix(".")


# This check's own version: bump it with a change here that accepts or refuses other values, so that
# versions checked at the door by the code before are checked again when read.
CHECK_VERSION = 1


@cache
def door_mark() -> int:
    """What a version checked at the door carries (``ObjectVersion.shapes_checked``): this check's
    version and its type table's, as a 31-bit number. Readers trust a version with today's mark and
    check again one with another mark or none (stored before the door checked, or by other code)."""
    table = TYPES_FILE.read_bytes() + f"/{CHECK_VERSION}".encode()
    return int.from_bytes(hashlib.blake2b(table, digest_size=4).digest(), "big") & 0x7FFFFFFF


def shape_problem(kind: str, obj: dict[str, Any]) -> str | None:
    """The first field of ``obj`` whose type is not the one the API defines, described; None if all fit."""
    check = _checks().get(kind)
    if check is None:
        return None
    misfit = check(obj)
    if misfit is None:
        return None
    steps, problem = misfit
    where = _where(steps)
    return f"{where} {problem}" if where else f"the object {problem}"
