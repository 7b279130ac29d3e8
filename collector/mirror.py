"""What a watch holds of a cluster between its batches, and which of it history keeps.

``Mirror`` keeps every object the watches report (each compressed, with what the relevance filter
reads of it: a Pod's claims and extended resources, a claim's reservedFor, an Event's subject) and,
at each batch, tells which of the objects history keeps changed since the last batch: the same
objects a complete listing would store at that moment (``collector.relevance``: DRA Pods and the
Events about them and their claims), normalized and hashed the same way. Only what a change can
affect is looked at again: the changed objects, the Pods a changed claim reserves or stops
reserving (every Pod when the classes' extended resources change), and the Events about a claim or
Pod that appeared, disappeared or entered or left the kept set.

Every change is stamped with when it arrived; a version is valid from the last arrival that
touched the object (a relist's time for what the relist changed or found gone).
"""

from __future__ import annotations

import threading
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from collector.history_writer import Change
from collector.kinds import BY_KIND, KINDS
from collector.normalize import InvalidObject, normalize
from collector.relevance import pods_reserved_or_using_claims, reserved_pod_uids, uses_extended_resources
from domain.cluster.extended_resources import explicit_resource_names

_Key = tuple[str, str]  # namespace, name: how the API names an object within its kind
_Subject = tuple[str, str, str]  # how an Event names a claim without its UID (relevance.claim_keys)


class _Packer:
    """zlib with a preset dictionary per kind: the first object of the kind seen. Objects of a kind
    share most of their keys and values, so each compresses to about half of what it does alone
    (a Pod: ~290 bytes against ~650), and the mirror holds every watched object."""

    def __init__(self) -> None:
        self._dictionaries: dict[str, bytes] = {}
        self._lock = threading.Lock()  # streams hold their kinds' objects in threads of their own

    def pack(self, kind: str, raw: bytes) -> tuple[bytes, bytes]:
        """``raw`` compressed, and the dictionary it needs to be read again."""
        dictionary = self._dictionaries.get(kind)
        if dictionary is None:
            with self._lock:
                dictionary = self._dictionaries.setdefault(kind, raw[-_WINDOW:])
        packer = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, dictionary)
        return packer.compress(raw) + packer.flush(), dictionary


_WINDOW = 32768  # zlib reads no more of a dictionary than this


@dataclass(slots=True)
class _Held:
    uid: str
    packed: bytes  # the object as the API served it, zlib-compressed JSON (with ``dictionary``)
    dictionary: bytes  # its kind's preset dictionary (one object shared by all of the kind)
    base: bool = False  # Pod: kept whatever claims reserve it (it uses claims, is malformed, has no UID)
    extended: bool = False  # Pod: asks for an extended resource the current DeviceClasses serve
    reserves: frozenset[str] = frozenset()  # ResourceClaim: the Pod UIDs in status.reservedFor
    serves: frozenset[str] = frozenset()  # DeviceClass: its explicit extended resource name
    about_uid: str | None = None  # Event: involvedObject.uid (when a string)
    about_key: _Subject | None = None  # Event: involvedObject (kind, namespace, name), when strings
    extended_of: frozenset[str] | None = None  # Pod: the classes' extended resources ``extended`` was told for

    def unpack(self) -> Any:
        return orjson.loads(zlib.decompressobj(zdict=self.dictionary).decompress(self.packed))


@dataclass
class Batch:
    """The changes history keeps since the last committed batch, and where they came from."""

    changes: list[Change] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    at: datetime | None = None  # the newest arrival among them
    keys: dict[tuple[str, str], datetime] = field(default_factory=dict)  # what was looked at, and when


def api_key(kind: str, obj: Any) -> _Key:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return ("", "")
    namespace = meta.get("namespace") if BY_KIND[kind].namespaced else ""
    return (str(namespace or ""), str(meta.get("name") or ""))


def _uid(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


class Mirror:
    """The objects of one cluster as its watches last reported them.

    ``stored``: what history holds (kind → UID → (content hash, namespace, name) of each live head),
    so the first batch after a start stores only what changed meanwhile and records as deleted what
    is gone.
    """

    def __init__(self, stored: dict[str, dict[str, tuple[str, str, str]]] | None = None) -> None:
        self.objects: dict[str, dict[_Key, _Held]] = {kind: {} for kind in KINDS}
        self._packer = _Packer()
        self._by_uid: dict[str, dict[str, _Key]] = {kind: {} for kind in KINDS}
        self.synced: set[str] = set()  # kinds listed at least once
        self.written: dict[str, dict[str, tuple[str, str, str]]] = {kind: {} for kind in KINDS}
        for kind, heads in (stored or {}).items():
            self.written[kind] = dict(heads)
        # What the relevance filter reads, kept up to date as objects come and go.
        self._reserved: Counter[str] = Counter()  # Pod UIDs claims reserve
        self._claim_uids: Counter[str] = Counter()
        self._claim_subjects: Counter[_Subject] = Counter()
        self._extended: frozenset[str] = frozenset()
        self._extended_at: datetime | None = None  # when a DeviceClass last changed, until settled
        self._kept_pods: Counter[str] = Counter()  # UIDs of the Pods kept now
        self._kept_uid: dict[_Key, str] = {}  # the kept Pods, by API key
        self._events_by_uid: dict[str, set[_Key]] = {}
        self._events_by_subject: dict[_Subject, set[_Key]] = {}
        # (kind, UID) → when the newest change that may alter what history keeps of it arrived
        self._pending: dict[tuple[str, str], datetime] = {}
        self._pending_pods: dict[_Key, datetime] = {}  # Pods whose kept state may have moved
        self.events_seen = 0  # events applied since the last committed batch

    # -------------------------------------------------------------------- what the watches report

    @property
    def pending(self) -> int:
        return len(self._pending) + len(self._pending_pods)

    def apply(self, kind: str, event_type: str, obj: Any, at: datetime) -> None:
        """One watch event: ADDED, MODIFIED or DELETED ``obj`` of ``kind``, arrived at ``at``."""
        key = api_key(kind, obj)
        held = None if event_type == "DELETED" else self._hold(kind, obj)
        self._replace(kind, key, held, at)
        self.events_seen += 1

    def replace(self, kind: str, items: Iterable[Any], at: datetime) -> None:
        """A complete list of ``kind`` finished at ``at``: what it lacks is gone, as of ``at``."""
        self.replace_held(kind, dict(self.hold(kind, item) for item in items), at)

    def hold(self, kind: str, obj: Any) -> tuple[_Key, _Held]:
        """``obj`` as the mirror keeps it, with its API key. Safe from another thread (a list being read
        converts each object as it arrives, so a kind's raw list never exists whole)."""
        return api_key(kind, obj), self._hold(kind, obj)

    def replace_held(self, kind: str, fresh: dict[_Key, _Held], at: datetime) -> None:
        """A complete list of ``kind`` (converted by ``hold``) finished at ``at``: what it lacks is gone,
        as of ``at``.

        Every object history holds of the kind is looked at again, so one stored but missing from
        the list is recorded as deleted (at ``at``, never earlier)."""
        current = self.objects[kind]
        for key in [k for k in current if k not in fresh]:
            self._replace(kind, key, None, at)
        for key, held in fresh.items():
            if kind == "Pod" and held.extended_of is not self._extended:  # classes changed meanwhile
                held.extended = self._asks_extended(held.unpack())
                held.extended_of = self._extended
            old = current.get(key)
            if old is not None and old.packed == held.packed:
                continue
            self._replace(kind, key, held, at)
        for uid in self.written[kind]:
            self._pending.setdefault((kind, uid), at)  # looked at again; a change pending keeps its time
        self.synced.add(kind)
        self.events_seen += 1

    def _hold(self, kind: str, obj: Any) -> _Held:
        held = _Held(_uid(obj), *self._packer.pack(kind, orjson.dumps(obj)))
        if kind == "Pod":
            held.base = bool(pods_reserved_or_using_claims([obj], set()))
            extended = self._extended
            held.extended, held.extended_of = self._asks_extended(obj, extended), extended
        elif kind == "ResourceClaim":
            held.reserves = frozenset(reserved_pod_uids([obj]))
        elif kind == "DeviceClass":
            held.serves = frozenset(explicit_resource_names([obj]))
        elif kind == "Event":
            involved = obj.get("involvedObject") if isinstance(obj, dict) else None
            if isinstance(involved, dict):
                uid = involved.get("uid")
                held.about_uid = uid if isinstance(uid, str) else None
                subject = (involved.get("kind"), involved.get("namespace") or "", involved.get("name") or "")
                if all(isinstance(part, str) for part in subject):
                    held.about_key = subject  # type: ignore[assignment]
        return held

    def _asks_extended(self, pod: Any, extended: frozenset[str] | None = None) -> bool:
        extended = self._extended if extended is None else extended
        spec = pod.get("spec") if isinstance(pod, dict) else None
        return isinstance(spec, dict) and bool(extended) and uses_extended_resources(pod, extended)

    def _replace(self, kind: str, key: _Key, held: _Held | None, at: datetime) -> None:
        objects, by_uid = self.objects[kind], self._by_uid[kind]
        old = objects.get(key)
        if old is not None:
            if by_uid.get(old.uid) == key:
                del by_uid[old.uid]
            self._touch(kind, old.uid, at)
            del objects[key]
        if held is not None:
            objects[key] = held
            by_uid[held.uid] = key
            self._touch(kind, held.uid, at)
        if kind == "ResourceClaim":
            self._claim_moved(key, old, held, at)
        elif kind == "DeviceClass":
            self._extended_at = at if self._extended_at is None else max(self._extended_at, at)
        elif kind == "Pod":
            self._pending_pods[key] = at
        elif kind == "Event":
            self._index_event(key, old, held)

    def _touch(self, kind: str, uid: str, at: datetime) -> None:
        known = self._pending.get((kind, uid))
        self._pending[(kind, uid)] = at if known is None else max(known, at)

    def _claim_moved(self, key: _Key, old: _Held | None, new: _Held | None, at: datetime) -> None:
        before, after = (old.reserves if old else frozenset()), (new.reserves if new else frozenset())
        self._reserved.subtract(before)
        self._reserved.update(after)
        for uid in before ^ after:  # Pods the claim starts or stops reserving
            pod = self._by_uid["Pod"].get(uid)
            if pod is not None:
                self._pending_pods[pod] = at
        subject = ("ResourceClaim", *key)
        for held, sign in ((old, -1), (new, 1)):
            if held is None:
                continue
            self._claim_uids[held.uid] += sign
            self._claim_subjects[subject] += sign
        appeared_or_gone = (old is None) != (new is None)
        if appeared_or_gone:
            self._events_about(subject=subject, at=at)
        if appeared_or_gone or (old is not None and new is not None and old.uid != new.uid):
            for held in (old, new):
                if held is not None:
                    self._events_about(uid=held.uid, at=at)

    def _index_event(self, key: _Key, old: _Held | None, new: _Held | None) -> None:
        if old is not None:
            _unindex(self._events_by_uid, old.about_uid, key)
            _unindex(self._events_by_subject, old.about_key, key)
        if new is not None:
            if new.about_uid is not None:
                self._events_by_uid.setdefault(new.about_uid, set()).add(key)
            if new.about_key is not None:
                self._events_by_subject.setdefault(new.about_key, set()).add(key)

    def _events_about(self, at: datetime, uid: str | None = None, subject: _Subject | None = None) -> None:
        keys = self._events_by_uid.get(uid, set()) if uid is not None else set()
        if subject is not None:
            keys = keys | self._events_by_subject.get(subject, set())
        events = self.objects["Event"]
        for key in keys:
            held = events.get(key)
            if held is not None:
                self._touch("Event", held.uid, at)

    # -------------------------------------------------------------------- what history keeps

    def _settle_pods(self) -> None:
        """Which Pods are kept now, for those whose answer may have moved; the Events about any Pod
        that entered or left the kept set are looked at again."""
        pods = self.objects["Pod"]
        if self._extended_at is not None:
            at, self._extended_at = self._extended_at, None
            extended = frozenset().union(*(h.serves for h in self.objects["DeviceClass"].values()))
            if extended != self._extended:
                self._extended = extended
                for key, pod in pods.items():  # rare: a class's extendedResourceName changed
                    asks = self._asks_extended(pod.unpack())
                    pod.extended_of = extended
                    if asks != pod.extended:
                        pod.extended = asks
                        self._pending_pods[key] = max(at, self._pending_pods.get(key, at))
        for key, at in self._pending_pods.items():
            held = pods.get(key)
            kept = held is not None and self._kept("Pod", held)
            before = self._kept_uid.get(key)
            now = held.uid if held is not None and kept else None
            if before == now:
                continue
            if held is not None:
                self._touch("Pod", held.uid, at)  # kept from now on, or no longer
            if before is not None:
                del self._kept_uid[key]
                self._kept_pods[before] -= 1
                if self._kept_pods[before] <= 0:
                    del self._kept_pods[before]
                self._events_about(uid=before, at=at)
            if now is not None:
                self._kept_uid[key] = now
                self._kept_pods[now] += 1
                self._events_about(uid=now, at=at)
        self._pending_pods.clear()

    def _kept(self, kind: str, held: _Held) -> bool:
        if kind == "Pod":
            return held.base or held.extended or self._reserved[held.uid] > 0
        if kind == "Event":
            uid = held.about_uid
            if uid is not None and (self._kept_pods[uid] > 0 or self._claim_uids[uid] > 0):
                return True
            return held.about_key is not None and self._claim_subjects[held.about_key] > 0
        return True

    def take(self) -> Batch:
        """The changes history keeps since the last committed batch (none before every kind is listed).

        Nothing is forgotten until ``committed``: a batch that fails to store is taken again, with
        whatever arrived meanwhile."""
        batch = Batch()
        if not self.synced.issuperset(KINDS):
            return batch
        self._settle_pods()
        for (kind, uid), at in self._pending.items():
            batch.keys[(kind, uid)] = at
            key = self._by_uid[kind].get(uid)
            held = self.objects[kind].get(key) if key is not None else None
            stored = self.written[kind].get(uid)
            if held is None or not self._kept(kind, held):
                if stored is not None:
                    batch.changes.append(Change(kind, uid, at))
                continue
            try:
                obj = normalize(kind, held.unpack())
            except InvalidObject as exc:
                batch.problems.append(str(exc))  # its stored head stays, as a listing leaves it
                continue
            if stored is None or stored[0] != obj.content_hash:
                batch.changes.append(Change(kind, uid, at, obj))
        for change in batch.changes:
            batch.at = change.at if batch.at is None else max(batch.at, change.at)
        return batch

    def committed(self, batch: Batch) -> None:
        """``batch`` is stored: what it wrote is history's now, and what it looked at is settled."""
        for change in batch.changes:
            if change.obj is None:
                self.written[change.kind].pop(change.uid, None)
            else:
                obj = change.obj
                self.written[change.kind][change.uid] = (obj.content_hash, obj.namespace, obj.name)
        for key, at in batch.keys.items():
            if self._pending.get(key) == at:
                del self._pending[key]
        self.events_seen = 0

    def kept_count(self) -> int:
        """How many objects history holds live now (a batch's ``objects_seen``)."""
        return sum(len(heads) for heads in self.written.values())



def _unindex(index: dict[Any, set[_Key]], by: Any, key: _Key) -> None:
    if by is None:
        return
    keys = index.get(by)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[by]
