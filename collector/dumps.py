"""Reading `kubectl get … -o json|yaml` output into objects to store.

Dumps are refused whole on the first problem: an import either stores a
complete, well-formed snapshot or nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from collector.gcpause import gc_paused
from collector.kinds import BY_KIND, LIST_KINDS
from collector.normalize import InvalidObject, NormalizedObject, normalize
from collector.relevance import keep_relevant

MAX_DUMP_BYTES = 512 * 1024 * 1024


class DumpError(ValueError):
    """A dump that cannot be imported; the message names the file and the problem."""


class _NoAliasLoader(yaml.SafeLoader):
    """kubectl never writes YAML aliases; refusing them defuses alias bombs."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "YAML aliases are not accepted in a Kubernetes dump", event.start_mark
            )
        return super().compose_node(parent, index)


@dataclass
class ParsedDump:
    objects: list[NormalizedObject] = field(default_factory=list)
    # Kinds the dump lists, so objects of that kind missing from it were deleted.
    kinds: set[str] = field(default_factory=set)
    ignored: dict[str, int] = field(default_factory=dict)


# What bytes.strip() strips; searched for rather than stripped, which would copy a dump of hundreds of MB.
_FIRST_NON_BLANK = re.compile(rb"[^ \t\n\r\x0b\x0c]")


def _documents(path: Path, data: bytes) -> Iterator[Any]:
    first = _FIRST_NON_BLANK.search(data)
    if first is not None and first.group() in (b"{", b"["):
        try:
            yield orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise DumpError(f"{path}: not valid JSON ({exc})") from None
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DumpError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        for doc in yaml.load_all(text, Loader=_NoAliasLoader):  # noqa: S506 - a SafeLoader subclass
            if doc is not None:
                yield doc
    except yaml.YAMLError as exc:
        raise DumpError(f"{path}: not valid YAML ({exc})") from None
    except ValueError as exc:
        # PyYAML builds dates itself: an unquoted 2001-13-01 raises ValueError, not a YAMLError.
        raise DumpError(f"{path}: not valid YAML ({exc})") from None
    except RecursionError:
        raise DumpError(f"{path}: nested too deeply") from None


def _is_list(item: Any) -> bool:
    # kind may be anything in a malformed dump; only a string names a List.
    kind = item.get("kind") if isinstance(item, dict) else None
    return isinstance(kind, str) and kind.endswith("List")


def _items(path: Path, doc: Any, dump: ParsedDump) -> Iterator[tuple[str, Any, int]]:
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield from _items(path, item, dump) if _is_list(item) else _single(path, item, i, dump)
        return
    if not isinstance(doc, dict):
        raise DumpError(f"{path}: expected a Kubernetes object or List, got {type(doc).__name__}")
    kind = doc.get("kind")
    if not isinstance(kind, str):
        raise DumpError(f"{path}: document has no kind")
    if kind == "List" or kind in LIST_KINDS or kind.endswith("List"):
        items = doc.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise DumpError(f"{path}: {kind}.items is not a list")
        if kind in LIST_KINDS:
            dump.kinds.add(LIST_KINDS[kind])
        for i, item in enumerate(items):
            if isinstance(item, dict) and "kind" not in item and kind in LIST_KINDS:
                item = {**item, "kind": LIST_KINDS[kind]}
                if "apiVersion" not in item and doc.get("apiVersion") in BY_KIND[item["kind"]].api_versions:
                    item["apiVersion"] = doc["apiVersion"]  # a typed list of an older version: its items are too
            yield from _single(path, item, i, dump)
        return
    yield from _single(path, doc, None, dump)


def _single(path: Path, item: Any, position: int | None, dump: ParsedDump) -> Iterator[tuple[str, Any, int]]:
    where = f"item {position}" if position is not None else "document"
    if not isinstance(item, dict):
        raise DumpError(f"{path}: {where} is a {type(item).__name__}, not a Kubernetes object")
    kind = item.get("kind")
    if not isinstance(kind, str) or not kind:
        raise DumpError(f"{path}: {where} has no kind")
    if kind not in BY_KIND:
        dump.ignored[kind] = dump.ignored.get(kind, 0) + 1
        return
    versions = BY_KIND[kind].api_versions
    if item.get("apiVersion") not in (None, *versions):
        raise DumpError(
            f"{path}: {where} is {kind} {item.get('apiVersion')}; Claimline reads {kind} {' or '.join(versions)}"
        )
    yield kind, item, position if position is not None else 0


def _read(path: Path) -> list[Any]:
    """The documents of one file; its bytes are let go on return, before the objects are normalized."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DumpError(f"{path}: cannot read ({exc.strerror})") from None
    if size > MAX_DUMP_BYTES:
        raise DumpError(f"{path}: {size} bytes is larger than the {MAX_DUMP_BYTES} byte limit")
    data = path.read_bytes()
    if _FIRST_NON_BLANK.search(data) is None:
        raise DumpError(f"{path}: empty file")
    return list(_documents(path, data))


def parse_dump_files(paths: list[Path]) -> ParsedDump:
    # A whole dump is parsed at once: with the cyclic GC on, its hundreds of thousands of dicts are
    # rescanned again and again as they pile up, which took twice as long as the parse itself.
    with gc_paused():
        return _parse(paths)


def _parse(paths: list[Path]) -> ParsedDump:
    dump = ParsedDump()
    found: dict[str, list[Any]] = {}
    where: dict[int, tuple[Path, int]] = {}  # by id(): where an item was, for error messages
    for path in paths:
        for doc in _read(path):
            for kind, item, position in _items(path, doc, dump):
                dump.kinds.add(kind)
                found.setdefault(kind, []).append(item)
                where[id(item)] = (path, position)
    # What a collection of the cluster would store: a dump of every Pod holds mostly Pods DRA never sees.
    for kind, items in keep_relevant(found, dump.kinds).items():
        if len(items) < len(found[kind]):
            dump.ignored[f"{kind} not using DRA"] = len(found[kind]) - len(items)
        for item in items:
            path, position = where[id(item)]
            try:
                obj = normalize(kind, item, position)
            except InvalidObject as exc:
                raise DumpError(f"{path}: {exc}") from None
            dump.objects.append(obj)
    if not dump.objects and not dump.kinds:
        raise DumpError(
            "no Kubernetes objects Claimline reads were found in "
            + ", ".join(str(p) for p in paths)
            + (f" (ignored kinds: {', '.join(sorted(dump.ignored))})" if dump.ignored else "")
        )
    return dump
