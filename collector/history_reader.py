"""A ``HistoryView`` over stored versions: the bridge from the database to the domain.

Every stored version is read through ``readable``: one whose fields do not have the types the API
defines (history written before ``collector.shapes`` checked them at the door) is skipped with a
warning in the log, read as if it had never been stored: the version before it lasts until the one
after it. So one bad object never breaks a page, and once a corrected object is stored, it is read.
A version the door checked carries the check's mark (``ObjectVersion.shapes_checked``): with
today's, it is only decoded; only versions without it (or checked against other types) are checked
again, on every read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
from django.db import connection
from django.db.models import Q

from collector.kinds import KINDS
from collector.models import Cluster, ObjectVersion, Snapshot
from collector.shapes import door_mark, shape_problem
from domain.cluster.events import EventSubjects
from domain.cluster.state import ClusterState, Object, Version, ns_name
from domain.reports.metrics import CollectionHealth

T = TypeVar("T")

log = logging.getLogger("claimline.history")


class NoSnapshot(LookupError):
    """The cluster has no usable snapshot at or before the asked time."""


# Versions already warned about in this process, so a page read again does not repeat the warning.
_WARNED: set[tuple[str, str, datetime]] = set()
_WARNED_MAX = 10_000


def decode_stored(kind: str, content: str, checked: int | None = None) -> tuple[Object | None, str | None]:
    """A stored version's object, or None and why it cannot be read: not a JSON object, or a field
    whose type is not the one the API defines (``collector.shapes``), which the domain would trip over.
    ``checked``: the version's ``shapes_checked``; with today's mark the door has checked it already."""
    if checked is not None and checked == door_mark():
        return orjson.loads(content), None
    try:
        obj = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        return None, f"not JSON ({exc})"
    if not isinstance(obj, dict):
        return None, f"a {type(obj).__name__}, not an object"
    problem = shape_problem(kind, obj)
    return (None, problem) if problem else (obj, None)


def readable(kind: str, uid: str, valid_from: datetime, content: str, checked: int | None = None) -> Object | None:
    """The stored version of ``kind`` ``uid`` from ``valid_from`` decoded, or None if it cannot be read
    (``decode_stored``; ``checked``: its ``shapes_checked``), warned about once per process."""
    obj, problem = decode_stored(kind, content, checked)
    if obj is not None:
        return obj
    key = (kind, uid, valid_from)
    if key not in _WARNED:
        if len(_WARNED) >= _WARNED_MAX:
            _WARNED.clear()
        _WARNED.add(key)
        log.warning(
            "skipping the stored version of %s %s from %s, which cannot be read: %s",
            kind, uid, valid_from.isoformat(), problem,
        )
    return None


# What a reader selects of a live version to decode it: (uid, valid_from, content, shapes_checked).
STORED = ("uid", "valid_from", "content", "shapes_checked")


def latest_snapshot(cluster: Cluster, as_of: datetime | None = None) -> tuple[int, datetime]:
    """The primary key and time of the newest usable snapshot at or before ``as_of``."""
    runs = Snapshot.objects.usable().filter(cluster=cluster)
    if as_of is not None:
        runs = runs.filter(at__lte=as_of)
    found = runs.order_by("-at").values_list("pk", "at").first()
    if found is None:
        when = f" at or before {as_of.isoformat()}" if as_of else ""
        raise NoSnapshot(f"cluster {cluster.name} has no snapshot{when}")
    return found


def collection_health(cluster: Cluster, usable_at: datetime) -> CollectionHealth:
    """The newest finished run, and how many runs failed since ``usable_at`` (the newest usable snapshot)."""
    finished = Snapshot.objects.filter(cluster=cluster).exclude(status=Snapshot.Status.RUNNING)
    last = finished.order_by("-at", "-pk").values_list("at", "status").first()
    failures = finished.filter(status=Snapshot.Status.FAILED, at__gt=usable_at).count()
    return CollectionHealth(
        last_run_at=last[0] if last else None,
        last_run_status=last[1] if last else None,
        failures_since_success=failures,
    )


def latest_snapshot_time(cluster: Cluster, as_of: datetime | None = None) -> datetime:
    return latest_snapshot(cluster, as_of)[1]


class _KindsLoadedOnDemand(dict[str, dict[str, Object]]):
    """Loads one kind's live objects the first time a domain function asks for it."""

    def __init__(self, loader: Any) -> None:
        super().__init__()
        self._loader = loader

    def __missing__(self, kind: str) -> dict[str, Object]:
        value = self._loader(kind)
        self[kind] = value
        return value

    def get(self, kind: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[kind] if kind in KINDS else super().get(kind, default)

    def _load_all(self) -> None:
        for kind in KINDS:
            self[kind]  # noqa: B018 - loads it

    def items(self) -> Any:
        self._load_all()
        return super().items()

    def values(self) -> Any:
        self._load_all()
        return super().values()

    def keys(self) -> Any:
        self._load_all()
        return super().keys()

    def __iter__(self) -> Iterator[str]:
        self._load_all()
        return super().__iter__()


@dataclass
class _StoredState(ClusterState):
    """``find`` indexes only the kind asked for.

    The base class indexes every kind at the first lookup, which here would load and
    decode the whole cluster (every Pod and Event) to resolve one claim by name.
    """

    _names: dict[str, dict[tuple[str, str], Object]] = field(default_factory=dict, repr=False)

    def find(self, kind: str, namespace: str, name: str) -> Object | None:
        names = self._names.get(kind)
        if names is None:
            names = self._names[kind] = {ns_name(o): o for o in self.objects.get(kind, {}).values()}
        return names.get((namespace, name))


# Reports walk thousands of objects one ``versions`` call at a time; past this many calls
# for one kind, its whole history comes in one query instead of one query per object.
# Pages ask about a handful of objects and stay on the per-object query; a caller that knows
# which objects it will ask about (a derivation) names them with ``prefetch`` instead.
BULK_AFTER = 32
# UIDs per ``uid__in`` query of ``prefetch``.
PREFETCH_BATCH = 2000

# One object's versions, undecoded: (valid_from, deleted, content, shapes_checked).
_Rows = list[tuple[datetime, bool, str, int | None]]


def _as_of_filter(as_of: datetime) -> Q:
    return Q(valid_from__lte=as_of) & (Q(valid_to__isnull=True) | Q(valid_to__gt=as_of))


class StoredHistory:
    """History of one cluster as of a time, read from ``ObjectVersion`` rows."""

    def __init__(self, cluster: Cluster, as_of: datetime | None = None) -> None:
        self.cluster = cluster
        # The snapshot read: derived rows are keyed by it.
        self.snapshot_pk, self._as_of = latest_snapshot(cluster, as_of)
        self._state: ClusterState = _StoredState(self._as_of, _KindsLoadedOnDemand(self._load_kind))
        self._lookups: dict[str, int] = {}
        self._histories: dict[str, dict[str, _Rows]] = {}
        self._prefetched: dict[str, dict[str, _Rows]] = {}
        self._derived: dict[Hashable, Any] = {}
        self._events: EventSubjects[Version] | None = None

    @property
    def as_of(self) -> datetime:
        return self._as_of

    @property
    def state(self) -> ClusterState:
        return self._state

    def _rows(self) -> Any:
        return ObjectVersion.objects.filter(cluster=self.cluster)

    def _load_kind(self, kind: str) -> dict[str, Object]:
        rows = self._rows().filter(_as_of_filter(self._as_of), kind=kind, deleted=False)
        out: dict[str, Object] = {}
        unreadable: dict[str, datetime] = {}
        for uid, at, content, checked in rows.values_list(*STORED).iterator(2000):
            obj = readable(kind, uid, at, content, checked)
            if obj is None:
                unreadable[uid] = at
            else:
                out[uid] = obj
        out.update(standing_in(self._rows(), kind, unreadable))
        return out

    def versions(self, kind: str, uid: str) -> list[Version]:
        by_uid = self._histories.get(kind)
        if by_uid is None:
            prefetched = self._prefetched.get(kind)
            if prefetched is not None and uid in prefetched:
                return _decoded(kind, uid, prefetched[uid])
            # Objects a caller named with ``prefetch`` do not count: a derivation that names what it
            # judges stays on batched and per-object queries, whatever the number of Pods.
            self._lookups[kind] = looked_up = self._lookups.get(kind, 0) + 1
            if looked_up <= BULK_AFTER:
                rows = (
                    self._rows()
                    .filter(kind=kind, uid=uid, valid_from__lte=self._as_of)
                    .order_by("valid_from")
                    .values_list("valid_from", "deleted", "content", "shapes_checked")
                )
                return _decoded(kind, uid, list(rows))
            by_uid = self._histories[kind] = self._history_of(kind)[kind]
        # Decoded per call, as from the database: callers get objects of their own.
        return _decoded(kind, uid, by_uid.get(uid, ()))

    def prefetch(self, kind: str, uids: Iterable[str]) -> None:
        """Load the versions of these objects of ``kind`` now, in batched ``uid__in`` queries.

        A derivation judging N Pods asks about their Pods and claims one at a time, far past
        ``BULK_AFTER``: named here, they cost queries in proportion to N, where the whole kind's
        history would grow with the history kept.
        """
        held = self._prefetched.setdefault(kind, {})
        if kind in self._histories:
            return
        missing = sorted(set(uids).difference(held))
        for start in range(0, len(missing), PREFETCH_BATCH):
            batch = missing[start : start + PREFETCH_BATCH]
            rows = (
                self._rows()
                .filter(kind=kind, uid__in=batch, valid_from__lte=self._as_of)
                .order_by("uid", "valid_from")
                .values_list("uid", "valid_from", "deleted", "content", "shapes_checked")
            )
            for uid in batch:
                held[uid] = []
            for uid, at, deleted, content, checked in rows.iterator(PREFETCH_BATCH):
                held[uid].append((at, deleted, content, checked))

    def release(self) -> None:
        """Drop what this history decoded, now. Its state, the state's inventory and what they
        derived refer to each other (and the state back to this history), so unreleased they wait
        for a full GC collection: ~2.4 s at 5,000 nodes, against ~0.5 s to free them here.
        Asked again afterwards, a kind is loaded again."""
        dict.clear(self._state.objects)
        self._state.derived.clear()
        self._state._by_name = None
        if isinstance(self._state, _StoredState):
            self._state._names.clear()
        self._histories.clear()
        self._prefetched.clear()
        self._derived.clear()
        self._events = None

    def preload(self, *kinds: str) -> None:
        """Load every version of ``kinds`` now, in one query: for reports about every claim of the cluster."""
        missing = [kind for kind in kinds if kind not in self._histories]
        if missing:
            self._histories.update(self._history_of(*missing))

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, once per history: a report about one snapshot never changes (see reading.py)."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]  # type: ignore[no-any-return]

    def _history_of(self, *kinds: str) -> dict[str, dict[str, _Rows]]:
        """Every version of every object of ``kinds`` up to ``as_of``, undecoded, by kind and UID."""
        out: dict[str, dict[str, _Rows]] = {kind: {} for kind in kinds}
        rows = (
            self._rows()
            .filter(kind__in=kinds, valid_from__lte=self._as_of)
            .order_by("kind", "uid", "valid_from")
            .values_list("kind", "uid", "valid_from", "deleted", "content", "shapes_checked")
        )
        for kind, uid, at, deleted, content, checked in rows.iterator(2000):
            out[kind].setdefault(uid, []).append((at, deleted, content, checked))
        return out

    def before(self, t: datetime) -> StoredHistory:
        try:
            earlier = StoredHistory(self.cluster, t - timedelta(microseconds=1))
        except NoSnapshot:
            return self
        if t == self._as_of:
            earlier._rewind_from(self)
        return earlier

    def _rewind_from(self, later: StoredHistory) -> None:
        """Start with the kinds ``later`` decoded already, rewound to this history's snapshot.

        A Pod deleted by a snapshot is judged just before it, and deriving a churned snapshot
        judges every Pod it deleted: decoding the whole cluster a second time would cost as
        much as the first. The two states differ only by the versions the snapshots between
        them wrote, so those are undone instead.
        """
        loaded = [kind for kind in dict.keys(later._state.objects)]
        if not loaded:
            return
        between = Snapshot.objects.filter(cluster=self.cluster, at__gt=self._as_of, at__lte=later._as_of)
        rows = self._rows().filter(kind__in=loaded)
        started = rows.filter(snapshot__in=between).values_list("kind", "uid")
        # Visible here but no longer there: ended after this snapshot, at or before the later one.
        ended = rows.filter(
            valid_from__lte=self._as_of, valid_to__gt=self._as_of, valid_to__lte=later._as_of, deleted=False
        ).values_list("kind", *STORED)
        rewound = {kind: dict(later._state.objects[kind]) for kind in loaded}
        for kind, uid in started.iterator(2000):
            rewound[kind].pop(uid, None)
        unreadable: dict[str, dict[str, datetime]] = {}
        for kind, uid, at, content, checked in ended.iterator(2000):
            obj = readable(kind, uid, at, content, checked)
            if obj is None:
                unreadable.setdefault(kind, {})[uid] = at
            else:
                rewound[kind][uid] = obj
        for kind, gone in unreadable.items():
            rewound[kind].update(standing_in(self._rows(), kind, gone))
        self._state.objects.update(rewound)

    def uids_named(self, kind: str, namespace: str, name: str) -> list[str]:
        return uids_named(self.cluster, kind, namespace, name, self._as_of)

    def deleted(self, kind: str) -> dict[str, tuple[datetime, Object]]:
        return _deleted(self._rows().filter(valid_from__lte=self._as_of), kind, self._as_of)

    def all_versions(self, kind: str, since: datetime | None = None) -> dict[str, list[Version]]:
        rows = self._rows().filter(kind=kind, valid_from__lte=self._as_of)
        if since is not None:
            rows = rows.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=since)).exclude(
                deleted=True, valid_from__lt=since
            )
        result: dict[str, list[Version]] = {}
        for uid, at, deleted, content, checked in (
            rows.order_by("uid", "valid_from")
            .values_list("uid", "valid_from", "deleted", "content", "shapes_checked")
            .iterator(2000)
        ):
            obj = None if deleted else readable(kind, uid, at, content, checked)
            if deleted or obj is not None:
                result.setdefault(uid, []).append(Version(at, obj))
        return result

    def events_about(self, uids: Collection[str], pod_names: Collection[tuple[str, str]]) -> list[list[Version]]:
        # Every Event read once per history: a page judges one Pod, a report thousands. Only the
        # derivation, which keeps lookup rows of what each Event is about, reads fewer.
        if self._events is None:
            self._events = EventSubjects(self.all_versions("Event").values())
        return self._events.about(uids, pod_names)


def _decoded(kind: str, uid: str, rows: Iterable[tuple[datetime, bool, str, int | None]]) -> list[Version]:
    """One object's versions; an unreadable one is left out (the one before it lasts until the next)."""
    out = []
    for at, deleted, content, checked in rows:
        if deleted:
            out.append(Version(at, None))
        else:
            obj = readable(kind, uid, at, content, checked)
            if obj is not None:
                out.append(Version(at, obj))
    return out


def standing_in(rows: Any, kind: str, unreadable: dict[str, datetime]) -> dict[str, Object]:
    """For objects whose version from the given time cannot be read, the readable version before it, which
    lasts as if the unreadable one had never been stored (none when a deletion or nothing came before).
    ``rows``: the cluster's versions. One query per such object: they are rare."""
    out: dict[str, Object] = {}
    for uid, before in unreadable.items():
        earlier = (
            rows.filter(kind=kind, uid=uid, valid_from__lt=before)
            .order_by("-valid_from")
            .values_list("valid_from", "deleted", "content", "shapes_checked")
        )
        for at, deleted, content, checked in earlier.iterator(50):
            if deleted:
                break
            obj = readable(kind, uid, at, content, checked)
            if obj is not None:
                out[uid] = obj
                break
    return out


def _deleted(rows: Any, kind: str, as_of: datetime) -> dict[str, tuple[datetime, Object]]:
    """``HistoryView.deleted`` over ``rows`` (one cluster's versions up to ``as_of``): the deletions
    valid at ``as_of`` (one an object's return ended later still counts before it), and only the
    version each one ended is decoded."""
    standing = Q(valid_to__isnull=True) | Q(valid_to__gt=as_of)
    gone = dict(rows.filter(standing, kind=kind, deleted=True).values_list("uid", "valid_from"))
    out: dict[str, tuple[datetime, Object]] = {}
    unreadable: dict[str, datetime] = {}
    uids = sorted(gone)
    for start in range(0, len(uids), 2000):
        ended = rows.filter(kind=kind, deleted=False, uid__in=uids[start : start + 2000], valid_to__isnull=False)
        stored = ended.values_list("uid", "valid_from", "valid_to", "content", "shapes_checked")
        for uid, valid_from, valid_to, content, checked in stored:
            if valid_to == gone[uid]:  # the version the deletion ended
                obj = readable(kind, uid, valid_from, content, checked)
                if obj is None:
                    unreadable[uid] = valid_from
                else:
                    out[uid] = (gone[uid], obj)
    for uid, obj in standing_in(rows, kind, unreadable).items():
        out[uid] = (gone[uid], obj)
    return dict(sorted(out.items()))


def uids_named(cluster: Cluster, kind: str, namespace: str, name: str, as_of: datetime) -> list[str]:
    """Every UID that had this name up to ``as_of``, oldest first (a Pod's incarnations)."""
    rows = (
        ObjectVersion.objects.filter(cluster=cluster, kind=kind, namespace=namespace, name=name, valid_from__lte=as_of)
        .order_by("valid_from")
        .values_list("uid", flat=True)
    )
    return list(dict.fromkeys(rows))


def live_containing(cluster: Cluster, as_of: datetime, kind: str, text: str) -> list[Object]:
    """The objects of ``kind`` live as of ``as_of`` whose stored JSON contains ``text``: the database
    picks the few a caller looks for (Events of one reason) instead of every one being decoded."""
    rows = ObjectVersion.objects.filter(
        _as_of_filter(as_of), cluster=cluster, kind=kind, deleted=False, content__contains=text
    )
    stored = rows.values_list(*STORED).iterator(2000)
    found = (readable(kind, uid, at, content, checked) for uid, at, content, checked in stored)
    return [obj for obj in found if obj is not None]


def group_member_versions(cluster_id: int, namespace: str, name: str, as_of: datetime | None = None) -> Any:
    """The versions (as of ``as_of``, the newest by default) of the live Pods naming PodGroup ``namespace/name``
    in ``spec.schedulingGroup``, found by the name in their canonical content: a query of one namespace."""
    rows = ObjectVersion.objects.filter(cluster_id=cluster_id, kind="Pod", namespace=namespace, deleted=False)
    rows = rows.filter(_as_of_filter(as_of)) if as_of is not None else rows.filter(valid_to__isnull=True)
    return rows.filter(content__contains='"podGroupName":' + orjson.dumps(name).decode())


def namespaces_in_use(cluster: Cluster, as_of: datetime, among: Iterable[str] | None = None) -> set[str]:
    """The names of live Namespaces and the namespaces of live claims and Pods, as of ``as_of``.

    What ``domain.reports.redaction.known_namespaces`` reads from a state, asked of the database
    instead: a page that reads derived rows never loads the cluster's Pods. ``among`` limits
    the answer to those names (what a document refers to), so its cost follows the document.
    """
    if among is not None:
        return _live_namespaces_among(cluster, as_of, sorted(set(among)))
    live = ObjectVersion.objects.filter(_as_of_filter(as_of), cluster=cluster, deleted=False)
    names = set(live.filter(kind="Namespace").values_list("name", flat=True))
    names.update(live.filter(kind__in=["ResourceClaim", "Pod"]).values_list("namespace", flat=True).distinct())
    return names


# Each asked name is two probes of ``objectversion_by_name`` that stop at the first matching row,
# where a DISTINCT over the namespace would visit every Pod of it. VALUES (column1) reads the
# same on PostgreSQL and SQLite.
_AMONG = """
    SELECT asked.column1 FROM (VALUES {values}) AS asked WHERE EXISTS (
        SELECT 1 FROM {table} o WHERE o.cluster_id = %s AND o.kind IN ({owners})
        AND o.namespace = asked.column1 {when}
    ) OR EXISTS (
        SELECT 1 FROM {table} o WHERE o.cluster_id = %s AND o.kind = 'Namespace' AND o.namespace = ''
        AND o.name = asked.column1 {when}
    )
"""
_LIVE = "AND NOT o.deleted AND o.valid_from <= %s AND (o.valid_to IS NULL OR o.valid_to > %s)"
_NAMES_PER_QUERY = 500


def _live_namespaces_among(cluster: Cluster, as_of: datetime, asked: list[str]) -> set[str]:
    at = connection.ops.adapt_datetimefield_value(as_of)
    return _namespaces_among(cluster.pk, asked, ("ResourceClaim", "Pod"), _LIVE, [at, at])


def namespaces_ever_known(cluster_id: int, among: Iterable[str]) -> set[str]:
    """Of ``among``, the names of Namespaces and the namespaces of claims the history ever held: what a
    notice may name (it outlives what it was about). One probe per name, not a pass over the history."""
    return _namespaces_among(cluster_id, sorted(set(among)), ("ResourceClaim",), "", [])


def _namespaces_among(
    cluster_id: int, asked: list[str], owners: tuple[str, ...], when: str, times: list[Any]
) -> set[str]:
    found: set[str] = set()
    kinds = ", ".join(f"'{kind}'" for kind in owners)  # the callers' fixed kind names
    with connection.cursor() as cursor:
        for i in range(0, len(asked), _NAMES_PER_QUERY):
            chunk = asked[i : i + _NAMES_PER_QUERY]
            values = ", ".join(["(%s)"] * len(chunk))
            sql = _AMONG.format(values=values, table=ObjectVersion._meta.db_table, owners=kinds, when=when)
            cursor.execute(sql, [*chunk, cluster_id, *times, cluster_id, *times])
            found.update(name for (name,) in cursor.fetchall())
    return found
