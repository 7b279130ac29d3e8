"""The cluster as the domain sees it: objects as of a time, and their history.

Domain modules (lifecycle, verdicts, leaks, audit) take a ``HistoryView`` and
never touch the database: ``collector.history_reader`` builds one from stored
versions, ``MemoryHistory`` from snapshots in memory (tests, imports).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from domain.cluster.events import EventSubjects

Object = dict[str, Any]


@dataclass(frozen=True)
class Version:
    """One stored state of an object: ``obj`` is None for a deletion."""

    at: datetime
    obj: Object | None


def meta(obj: Object) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def spec_of(obj: Object) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def status_of(obj: Object) -> dict[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, dict) else {}


def uid_of(obj: Object) -> str:
    return str(meta(obj).get("uid") or "")


def ns_name(obj: Object) -> tuple[str, str]:
    m = meta(obj)
    return (str(m.get("namespace") or ""), str(m.get("name") or ""))


@dataclass
class ClusterState:
    """Every live object as of ``as_of``, by kind and UID."""

    as_of: datetime
    objects: dict[str, dict[str, Object]] = field(default_factory=dict)
    _by_name: dict[tuple[str, str, str], Object] | None = field(default=None, repr=False)
    # What the domain derives from the whole state once (the inventory), kept with it: a state
    # never changes once built, and one cached history serves many pages and reports.
    derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def of_kind(self, kind: str) -> list[Object]:
        return list(self.objects.get(kind, {}).values())

    def get(self, kind: str, uid: str) -> Object | None:
        return self.objects.get(kind, {}).get(uid)

    def find(self, kind: str, namespace: str, name: str) -> Object | None:
        """The live object of ``kind`` named ``namespace/name`` (namespace "" for cluster-scoped)."""
        if self._by_name is None:
            self._by_name = {
                (k, *ns_name(o)): o for k, by_uid in self.objects.items() for o in by_uid.values()
            }
        return self._by_name.get((kind, namespace, name))


class HistoryView(Protocol):
    """What the domain may ask of stored history, all as of one time."""

    @property
    def as_of(self) -> datetime: ...

    @property
    def state(self) -> ClusterState: ...

    def versions(self, kind: str, uid: str) -> list[Version]:
        """The object's versions up to ``as_of``, oldest first (deletions included)."""
        ...

    def uids_named(self, kind: str, namespace: str, name: str) -> list[str]:
        """Every UID that had this name up to ``as_of``, oldest first (a Pod's incarnations)."""
        ...

    def before(self, t: datetime) -> HistoryView:
        """The same history as of just before ``t`` (e.g. the last moment a deleted Pod existed)."""
        ...

    def all_versions(self, kind: str, since: datetime | None = None) -> dict[str, list[Version]]:
        """Versions of every object of ``kind`` up to ``as_of`` by UID, oldest first.

        With ``since``, only objects with a version valid at or after ``since``
        (each object's list still starts with the version valid at ``since``).
        """
        ...

    def deleted(self, kind: str) -> dict[str, tuple[datetime, Object]]:
        """Every object of ``kind`` deleted by ``as_of``, by UID: when, and how it last was (what
        ``deleted_of(all_versions(kind))`` says, without the versions of the objects still live)."""
        ...

    def events_about(self, uids: Collection[str], pod_names: Collection[tuple[str, str]]) -> list[list[Version]]:
        """The versions up to ``as_of`` of the Events about one of ``uids`` (their involved object's
        UID) or, naming no UID, about a Pod of ``pod_names`` (namespace, name), in no set order.

        What an Event is about is what its newest content up to ``as_of`` says; Events about
        other objects may come too (the caller checks, ``event_subjects.subject_key``).
        """
        ...


class MemoryHistory:
    """A ``HistoryView`` over snapshots held in memory: ``[(at, [objects…]), …]`` in time order.

    Like stored history, it keeps a version only when an object changes and
    records a deletion when it disappears from a later snapshot.
    """

    def __init__(self, snapshots: Iterable[tuple[datetime, Iterable[Object]]], as_of: datetime | None = None):
        snapshots = [(at, list(objects)) for at, objects in snapshots]
        self._snapshots = snapshots
        self._versions: dict[tuple[str, str], list[Version]] = {}
        self._names: dict[tuple[str, str, str], list[str]] = {}
        live: dict[tuple[str, str], Object] = {}
        last_at: datetime | None = None
        for at, objects in snapshots:
            if as_of is not None and at > as_of:
                break
            last_at = at
            seen: set[tuple[str, str]] = set()
            for obj in objects:
                key = (str(obj.get("kind")), uid_of(obj))
                seen.add(key)
                if live.get(key) != obj:
                    self._versions.setdefault(key, []).append(Version(at, obj))
                    live[key] = obj
                    names = self._names.setdefault((key[0], *ns_name(obj)), [])
                    if key[1] not in names:
                        names.append(key[1])
            for key in [k for k in live if k not in seen]:
                self._versions[key].append(Version(at, None))
                del live[key]
        if last_at is None:
            raise ValueError("MemoryHistory needs at least one snapshot at or before as_of")
        self._as_of = as_of or last_at
        objects_by_kind: dict[str, dict[str, Object]] = {}
        for (kind, uid), obj in live.items():
            objects_by_kind.setdefault(kind, {})[uid] = obj
        self._state = ClusterState(self._as_of, objects_by_kind)
        self._events: EventSubjects[Version] | None = None

    @property
    def as_of(self) -> datetime:
        return self._as_of

    @property
    def state(self) -> ClusterState:
        return self._state

    def versions(self, kind: str, uid: str) -> list[Version]:
        return list(self._versions.get((kind, uid), []))

    def uids_named(self, kind: str, namespace: str, name: str) -> list[str]:
        return list(self._names.get((kind, namespace, name), []))

    def before(self, t: datetime) -> MemoryHistory:
        earlier = [(at, objects) for at, objects in self._snapshots if at < t]
        return MemoryHistory(earlier) if earlier else self

    def all_versions(self, kind: str, since: datetime | None = None) -> dict[str, list[Version]]:
        result: dict[str, list[Version]] = {}
        for (k, uid), versions in self._versions.items():
            if k != kind:
                continue
            if since is not None:
                start = 0
                for i, v in enumerate(versions):
                    if v.at <= since:
                        start = i
                versions = versions[start:]
                if versions[-1].obj is None and versions[-1].at < since:
                    continue
            result[uid] = list(versions)
        return result

    def deleted(self, kind: str) -> dict[str, tuple[datetime, Object]]:
        return deleted_of(self.all_versions(kind))

    def events_about(self, uids: Collection[str], pod_names: Collection[tuple[str, str]]) -> list[list[Version]]:
        if self._events is None:
            self._events = EventSubjects(self.all_versions("Event").values())
        return self._events.about(uids, pod_names)


def deleted_of(versions_by_uid: Mapping[str, Sequence[Version]]) -> dict[str, tuple[datetime, Object]]:
    """Of objects' versions, those whose newest is a deletion: when, and their last live content."""
    out: dict[str, tuple[datetime, Object]] = {}
    for uid, versions in versions_by_uid.items():
        if not versions or versions[-1].obj is not None:
            continue
        last = next((v.obj for v in reversed(versions) if v.obj is not None), None)
        if last is not None:
            out[uid] = (versions[-1].at, last)
    return out


def iter_live(history: HistoryView, kind: str) -> Iterator[Object]:
    yield from history.state.objects.get(kind, {}).values()
