"""Differences between two versions of an object, computed on read."""

from __future__ import annotations

from typing import Any

import orjson

Change = tuple[str, Any, Any]  # path, before, after ("" for absent)


def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _flatten(item, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        for i, item in enumerate(value):
            _flatten(item, f"{path}[{i}]", out)
    else:
        out[path] = value


def diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[Change]:
    """Changed leaf paths, sorted; scalars and lists of scalars compare whole."""
    old: dict[str, Any] = {}
    new: dict[str, Any] = {}
    _flatten(before or {}, "", old)
    _flatten(after or {}, "", new)
    changes = []
    for path in sorted(old.keys() | new.keys()):
        a, b = old.get(path, ""), new.get(path, "")
        if a != b:
            changes.append((path, _show(a), _show(b)))
    return changes


def _show(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) else orjson.dumps(value).decode()
