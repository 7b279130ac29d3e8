"""Reading `kubectl get … -o json|yaml` output into objects to store, streamed.

Dumps are refused whole on the first problem: an import either stores a complete, well-formed
snapshot or nothing (``import-snapshot`` writes what a ``DumpReader`` yields in one transaction,
rolled back when it raises).

Memory follows what is kept, not the dump: a JSON List's items are parsed one at a time (``ijson``),
YAML documents one at a time; each kept object is normalized at once (compact canonical bytes) and
handed on, the rest let go. As a collection does (``collector.relevance``), only the Pods that use
DRA and the Events about them and their claims are kept; whether a Pod without claims is reserved by
a claim, or asks for a DeviceClass's extended resource, is known only once the whole dump is read, so
such Pods (and Events about objects not seen yet) wait as compact bytes until then.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ijson
import orjson
import yaml

from collector.kinds import BY_KIND, LIST_KINDS
from collector.normalize import InvalidObject, NormalizedObject, normalize
from collector.relevance import (
    FILTERED_BY,
    claim_keys,
    is_about,
    pods_reserved_or_using_claims,
    reserved_pod_uids,
    uid_of,
    uses_extended_resources,
)
from domain.cluster.extended_resources import explicit_resource_names

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


# What bytes.strip() strips.
_FIRST_NON_BLANK = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_SCALARS = frozenset({"string", "number", "boolean", "null"})
_CHUNK = 64 * 1024


@dataclass(slots=True)
class _Waiting:
    """An object whose relevance is known only at the end of the dump, kept compact until then."""

    kind: str
    path: Path
    position: int | None
    # Its JSON compressed against the first waiting object of its kind (most wait only to be left
    # out; alike, a Pod's ~1.6 KB shrinks to tens of bytes); the object itself when it cannot be
    # encoded (then reported if kept).
    body: bytes | dict[str, Any]
    uid: str = ""
    about: dict[str, Any] | None = None  # an Event's involvedObject

    def item(self, zdict: bytes) -> Any:
        if not isinstance(self.body, bytes):
            return self.body
        inflate = zlib.decompressobj(zdict=zdict)
        return orjson.loads(inflate.decompress(self.body) + inflate.flush())


@dataclass
class _ListHead:
    """A JSON document's top-level scalars read before its ``items`` (or all of them, without items)."""

    scalars: dict[str, Any] = field(default_factory=dict)
    items: str | None = None  # the parse event that starts ``items``: start_array, null, …


class DumpReader:
    """The objects of dump files, yielded by ``objects()`` as they are read.

    ``kinds`` (the kinds the dump lists: objects of those kinds missing from it were deleted) and
    ``ignored`` (what was left out, by kind) are complete once ``objects()`` is exhausted.
    """

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.kinds: set[str] = set()
        self.ignored: dict[str, int] = {}
        self._stored = 0
        # What the Pod and Event filters need (collector.relevance), gathered as objects stream by.
        self._reserved: set[str] = set()
        self._claim_uids: set[str] = set()
        self._claim_keys: set[tuple[str, str, str]] = set()
        self._extended: set[str] = set()
        self._pod_uids: set[str] = set()
        self._waiting: list[_Waiting] = []
        self._zdicts: dict[str, bytes] = {}  # what each kind's waiting objects are compressed against
        # Hashes of the (kind, uid) stored so far: a dump holds each object once. Hashes, not keys, keep a
        # million objects' worth small; a match is confirmed (and both places named) by reading again.
        self._seen: set[int] = set()

    def check(self) -> None:
        """Refuse files that cannot be read at all, before anything is written."""
        for path in self.paths:
            _first_byte(path)

    def objects(self) -> Iterator[NormalizedObject]:
        for path in self.paths:
            for kind, item, position in self._entries(path):
                yield from self._route(kind, item, path, position)
        yield from self._settle()
        if not self._stored and not self.kinds:
            raise DumpError(
                "no Kubernetes objects Claimline reads were found in "
                + ", ".join(str(p) for p in self.paths)
                + (f" (ignored kinds: {', '.join(sorted(self.ignored))})" if self.ignored else "")
            )

    # --- reading ---------------------------------------------------------------------------------

    def _entries(self, path: Path) -> Iterator[tuple[str, Any, int | None]]:
        first = _first_byte(path)
        if first in (b"{", b"["):
            yield from self._json_entries(path, first)
            return
        try:
            with path.open("rb") as f:
                for doc in yaml.load_all(f, Loader=_NoAliasLoader):  # noqa: S506 - a SafeLoader subclass
                    if doc is not None:
                        yield from self._doc_entries(path, doc)
        except yaml.YAMLError as exc:
            raise DumpError(f"{path}: not valid YAML ({exc})") from None
        except DumpError:
            raise
        except ValueError as exc:
            # PyYAML builds dates itself: an unquoted 2001-13-01 raises ValueError, not a YAMLError.
            raise DumpError(f"{path}: not valid YAML ({exc})") from None
        except RecursionError:
            raise DumpError(f"{path}: nested too deeply") from None

    def _json_entries(self, path: Path, first: bytes) -> Iterator[tuple[str, Any, int | None]]:
        try:
            if first == b"[":
                with path.open("rb") as f:
                    for i, element in enumerate(ijson.items(f, "item", use_float=True)):
                        yield from self._doc_entries(path, element, i) if _is_list(element) else self._single(
                            path, element, i, None
                        )
                return
            head = _list_head(path)
            # kubectl writes a List's kind after its items: then only a second pass over the file tells it.
            kind = head.scalars.get("kind") if "kind" in head.scalars or head.items is None else _scalar(path, "kind")
            if head.items is None or not _is_list_kind(kind):
                # An object, or a List without items: parsed whole (and to its end, trailing bytes refused).
                with path.open("rb") as f:
                    (doc,) = ijson.items(f, "", use_float=True)
                yield from self._doc_entries(path, doc)
                return
            api_version = head.scalars.get("apiVersion")
            if "apiVersion" not in head.scalars:
                api_version = _scalar(path, "apiVersion")
            assert isinstance(kind, str)  # a List kind
            self._list_kind(path, kind, api_version)
            if head.items == "null":
                return
            if head.items != "start_array":
                raise DumpError(f"{path}: {kind}.items is not a list")
            with path.open("rb") as f:
                for i, item in enumerate(ijson.items(f, "items.item", use_float=True)):
                    yield from self._single(path, item, i, (kind, api_version))
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            raise DumpError(f"{path}: not valid JSON ({_first_line(exc)})") from None

    def _doc_entries(self, path: Path, doc: Any, position: int | None = None) -> Iterator[tuple[str, Any, int | None]]:
        """The objects of one whole document: a List, a list of objects (or Lists), or an object."""
        if isinstance(doc, list):
            for i, item in enumerate(doc):
                yield from self._doc_entries(path, item) if _is_list(item) else self._single(path, item, i, None)
            return
        if not isinstance(doc, dict):
            raise DumpError(f"{path}: expected a Kubernetes object or List, got {type(doc).__name__}")
        kind = doc.get("kind")
        if not isinstance(kind, str):
            raise DumpError(f"{path}: document has no kind")
        if _is_list_kind(kind):
            items = doc.get("items")
            if items is None:
                items = []
            if not isinstance(items, list):
                raise DumpError(f"{path}: {kind}.items is not a list")
            self._list_kind(path, kind, doc.get("apiVersion"))
            for i, item in enumerate(items):
                yield from self._single(path, item, i, (kind, doc.get("apiVersion")))
            return
        yield from self._single(path, doc, position, None)

    def _list_kind(self, path: Path, kind: Any, api_version: Any) -> None:
        """A typed List (``ResourceClaimList``) lists its kind completely, even empty: of its version only."""
        if not isinstance(kind, str):
            raise DumpError(f"{path}: document has no kind")
        if kind in LIST_KINDS:
            listed = LIST_KINDS[kind]
            versions = BY_KIND[listed].api_versions
            if api_version is not None and api_version not in versions:
                raise DumpError(
                    f"{path}: {kind} {_shown(api_version)}; Claimline reads {listed} {' or '.join(versions)}"
                )
            self.kinds.add(listed)

    def _single(
        self, path: Path, item: Any, position: int | None, listed: tuple[str, Any] | None
    ) -> Iterator[tuple[str, Any, int | None]]:
        """One object, from a List (``listed``: its kind and apiVersion, which items without theirs take, as
        kubectl reads a List) or on its own."""
        where = f"item {position}" if position is not None else "document"
        if not isinstance(item, dict):
            raise DumpError(f"{path}: {where} is a {type(item).__name__}, not a Kubernetes object")
        kind = item.get("kind")
        if kind is None and listed is not None and listed[0] in LIST_KINDS:
            kind = LIST_KINDS[listed[0]]
        if not isinstance(kind, str) or not kind:
            raise DumpError(f"{path}: {where} has no kind")
        if kind not in BY_KIND:
            self.ignored[kind] = self.ignored.get(kind, 0) + 1
            return
        api_version = item.get("apiVersion")
        versions = BY_KIND[kind].api_versions
        if api_version is None and listed is not None:
            api_version = listed[1]
            if api_version in versions[1:]:
                item = {**item, "apiVersion": api_version}  # a typed List of an older version: its items are too
        if api_version is not None and api_version not in versions:
            raise DumpError(
                f"{path}: {where} is {kind} {_shown(api_version)}; Claimline reads {kind} {' or '.join(versions)}"
            )
        self.kinds.add(kind)
        yield kind, item, position

    # --- what is kept ----------------------------------------------------------------------------

    def _route(self, kind: str, item: dict[str, Any], path: Path, position: int | None) -> Iterator[NormalizedObject]:
        if kind == "DeviceClass":
            self._extended.update(explicit_resource_names([item]))
        elif kind == "ResourceClaim":
            self._reserved.update(reserved_pod_uids([item]))
            self._claim_uids.add(uid_of(item))
            self._claim_keys.update(claim_keys([item]))
        elif kind == "Pod":
            if not pods_reserved_or_using_claims([item], self._reserved, self._extended):
                self._wait(kind, item, path, position, uid=uid_of(item))
                return
            self._pod_uids.add(uid_of(item))
        elif kind == "Event" and not is_about(item, (self._pod_uids, self._claim_uids), self._claim_keys):
            involved = item.get("involvedObject")
            self._wait(kind, item, path, position, about=involved if isinstance(involved, dict) else None)
            return
        yield self._normalized(kind, item, path, position)

    def _wait(self, kind: str, item: dict[str, Any], path: Path, position: int | None, **facts: Any) -> None:
        try:
            raw = orjson.dumps(item)
            deflate = zlib.compressobj(1, zdict=self._zdicts.setdefault(kind, raw[-32768:]))
            body: bytes | dict[str, Any] = deflate.compress(raw) + deflate.flush()
        except (TypeError, orjson.JSONEncodeError):
            body = item
        self._waiting.append(_Waiting(kind, path, position, body, **facts))

    def _settle(self) -> Iterator[NormalizedObject]:
        """The waiting Pods and Events, kept or left out now that the whole dump is known."""
        narrow = {kind: self.kinds.issuperset(FILTERED_BY[kind]) for kind in FILTERED_BY}
        waiting, self._waiting = self._waiting, []
        for kind in ("Pod", "Event"):
            left_out = 0
            for entry in waiting:
                if entry.kind != kind:
                    continue
                item = None
                if not narrow[kind]:
                    keep = True
                elif kind == "Pod":
                    keep = entry.uid in self._reserved
                    if not keep and self._extended:
                        item = entry.item(self._zdicts.get(kind, b""))
                        keep = uses_extended_resources(item, self._extended)
                else:
                    about = {"involvedObject": entry.about} if entry.about is not None else {}
                    keep = is_about(about, (self._pod_uids, self._claim_uids), self._claim_keys)
                if not keep:
                    left_out += 1
                    continue
                item = entry.item(self._zdicts.get(kind, b"")) if item is None else item
                if kind == "Pod":
                    self._pod_uids.add(entry.uid)
                yield self._normalized(kind, item, entry.path, entry.position)
            if left_out:
                self.ignored[f"{kind} not using DRA"] = left_out

    def _normalized(self, kind: str, item: Any, path: Path, position: int | None) -> NormalizedObject:
        try:
            obj = normalize(kind, item, position)
        except InvalidObject as exc:
            raise DumpError(f"{path}: {exc}") from None
        digest = hash(obj.key)
        if digest in self._seen:
            self._refuse_twice(obj, path, position)
        self._seen.add(digest)
        self._stored += 1
        return obj

    def _refuse_twice(self, obj: NormalizedObject, path: Path, position: int | None) -> None:
        """Two states of one object: which one the cluster was in cannot be told, so the dump is refused."""
        again = DumpReader(self.paths)  # reads the files from the start; only on a matching hash
        for first_path in self.paths:
            for kind, item, first_position in again._entries(first_path):
                if kind != obj.kind or not isinstance(item, dict) or uid_of(item) != obj.uid:
                    continue
                if (first_path, first_position) == (path, position):
                    return  # only the hashes met: this is the object's first appearance
                first = normalize(kind, item, first_position)  # stored already, so it normalizes
                raise DumpError(
                    f"two {obj.kind} objects with uid {obj.uid}: {first_path}: item {first_position or 0} "
                    f"({_named(first)}) and {path}: item {position or 0} ({_named(obj)}); a dump holds each object once"
                )


def _named(obj: NormalizedObject) -> str:
    return f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name


@dataclass
class ParsedDump:
    objects: list[NormalizedObject] = field(default_factory=list)
    # Kinds the dump lists, so objects of that kind missing from it were deleted.
    kinds: set[str] = field(default_factory=set)
    ignored: dict[str, int] = field(default_factory=dict)


def parse_dump_files(paths: list[Path]) -> ParsedDump:
    """Every object of the dump at once (``DumpReader`` streams them)."""
    reader = DumpReader(paths)
    reader.check()
    objects = list(reader.objects())
    return ParsedDump(objects, reader.kinds, reader.ignored)


def _first_byte(path: Path) -> bytes:
    """The file's first non-blank byte, which tells JSON from YAML; refuses files too large or empty."""
    try:
        size = path.stat().st_size
        if size > MAX_DUMP_BYTES:
            raise DumpError(f"{path}: {size} bytes is larger than the {MAX_DUMP_BYTES} byte limit")
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                found = _FIRST_NON_BLANK.search(chunk)
                if found is not None:
                    return found.group()
    except OSError as exc:
        raise DumpError(f"{path}: cannot read ({exc.strerror})") from None
    raise DumpError(f"{path}: empty file")


def _list_head(path: Path) -> _ListHead:
    """The top-level scalars of a JSON object up to its ``items``, parsed no further than that."""
    head = _ListHead()
    key: str | None = None
    with path.open("rb") as f:
        for prefix, event, value in ijson.parse(f, use_float=True):
            if prefix != "" or event == "start_map":
                if key is not None and prefix == key:
                    if key == "items":
                        head.items = event
                        return head
                    if event in _SCALARS and key not in head.scalars:
                        head.scalars[key] = value
                    key = None
                continue
            if event == "map_key":
                key = value
            elif event == "end_map":
                return head
    return head


def _scalar(path: Path, key: str) -> Any:
    """A top-level field of a JSON object (after its items: kubectl writes ``kind`` there); None if absent."""
    with path.open("rb") as f:
        for value in ijson.items(f, key, use_float=True):
            return value
    return None


def _first_line(exc: BaseException) -> str:
    raw = exc.args[0] if exc.args else ""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)[:60]


def _is_list_kind(kind: Any) -> bool:
    return isinstance(kind, str) and (kind == "List" or kind in LIST_KINDS or kind.endswith("List"))


def _is_list(item: Any) -> bool:
    # kind may be anything in a malformed dump; only a string names a List.
    kind = item.get("kind") if isinstance(item, dict) else None
    return isinstance(kind, str) and kind.endswith("List")
