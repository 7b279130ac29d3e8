"""The derived layer's lookup of what each Event was about (``EventSubject``), written as snapshots
are derived and read where only a few objects' Events matter: the Pods a derivation judges
(``SubjectEvents``) and the consumers of a device's claims (``failure_event_versions``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from collector.history_reader import STORED, StoredHistory, readable
from collector.models import ObjectVersion, Snapshot
from derived.models import EventSubject
from derived.pending import PendingChanges, pending_for
from domain.cluster.events import PodName, involved_of, subject_key
from domain.cluster.state import Version
from domain.inventory.device_history import failing_pod

BATCH = 2000
T = TypeVar("T")


def write_event_subjects(
    snapshot: Snapshot,
    every_version: Mapping[str, list[Version]] | None = None,
    changes: PendingChanges | None = None,
) -> dict[str, Mapping[str, Any]]:
    """Rows for what the snapshot's Event versions are about, or, for a full derivation, what
    ``every_version`` up to the snapshot was about (as its history decoded them: read once).

    A row is never removed by a later version: the lookup keeps every object an Event was ever
    about, and the Event's version as of the asked time decides on read. Returns what the newest
    version of each Event read here is about, by Event UID, for ``writer.affected_pods``.
    """
    if every_version is None:
        changes = changes or pending_for(snapshot)
        if not changes.changed:
            return {}
        # Oldest first, each Event's newest version last (several when the derivation covers several batches).
        rows = changes.versions(kind="Event", deleted=False).order_by("valid_from", "pk")
        stored = rows.values_list(*STORED).iterator(BATCH)
        decoded: Iterable[tuple[str, Version]] = (
            (u, Version(t, readable("Event", u, t, c, checked))) for u, t, c, checked in stored
        )
    else:
        decoded = ((uid, version) for uid, versions in every_version.items() for version in versions)
    new: dict[bytes, EventSubject] = {}
    involved_by_event: dict[str, Mapping[str, Any]] = {}
    for uid, version in decoded:
        at, event = version.at, version.obj
        if event is None:
            continue  # a deletion is about nothing new
        involved = involved_of(event)
        if involved is None:
            continue
        involved_by_event[uid] = involved  # versions come oldest first: the newest stays
        key = subject_key(involved)
        if key is None:
            continue
        failure = failing_pod(event) is not None
        digest = subject_digest(snapshot.cluster_id, uid, key, failure)
        if digest in new and new[digest].seen <= at:
            continue  # an earlier version was about it already: its row stays
        about, (namespace, name) = (key, ("", "")) if isinstance(key, str) else ("", key)
        new[digest] = EventSubject(
            cluster_id=snapshot.cluster_id,
            event_uid=uid,
            uid=about,
            namespace=namespace,
            name=name,
            preparation_failure=failure,
            seen=at,
            subject=digest,
        )
    # A row an earlier snapshot wrote keeps its first time: the new one is ignored.
    EventSubject.objects.bulk_create(new.values(), batch_size=BATCH, ignore_conflicts=True)
    return involved_by_event


def subject_digest(cluster_id: int, event_uid: str, key: str | PodName, preparation_failure: bool) -> bytes:
    """A row's identity: which cluster's Event, about what (a UID or a Pod's name), marked how."""
    about = key if isinstance(key, str) else "\0".join(("Pod", *key))
    parts = (str(cluster_id), event_uid, about, "1" if preparation_failure else "0")
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).digest()


def forget_event_subjects_from(cluster_id: int, at: datetime) -> None:
    """The lookup as it was before ``at``."""
    EventSubject.objects.filter(cluster_id=cluster_id, seen__gte=at).delete()


def failure_event_versions(cluster_id: int, pods: Iterable[str], as_of: datetime) -> list[list[Version]]:
    """Every version up to ``as_of`` of the Events that were a preparation failure about ``pods``,
    in UID order as ``HistoryView.all_versions`` gives them."""
    events: set[str] = set()
    for batch in _batches(sorted(pods)):
        events.update(
            EventSubject.objects.filter(
                cluster_id=cluster_id, uid__in=batch, preparation_failure=True, seen__lte=as_of
            ).values_list("event_uid", flat=True)
        )
    out: dict[str, list[Version]] = {}
    for batch in _batches(sorted(events)):
        rows = ObjectVersion.objects.filter(cluster_id=cluster_id, kind="Event", uid__in=batch, valid_from__lte=as_of)
        for uid, at, deleted, content, checked in rows.order_by("uid", "valid_from").values_list(
            "uid", "valid_from", "deleted", "content", "shapes_checked"
        ):
            obj = None if deleted else readable("Event", uid, at, content, checked)
            if deleted or obj is not None:  # an unreadable version is left out
                out.setdefault(uid, []).append(Version(at, obj))
    return [out[uid] for uid in sorted(out)]


class SubjectEvents:
    """``HistoryView.events_about`` for a derived snapshot: the Events the lookup says were about the
    asked objects, their versions read through ``history`` (batched by ``prefetch``).

    Valid only when every Event version up to the snapshot has its rows, as at a derivation after a
    derived snapshot or a full one (both write the snapshot's rows before judging). Each subject is
    looked up once: ``prefetch`` the ones a derivation will ask about, in batched queries.
    """

    def __init__(self, history: StoredHistory) -> None:
        self._history = history
        self._rows = EventSubject.objects.filter(cluster_id=history.cluster.pk, seen__lte=history.as_of)
        self._events_of: dict[str | PodName, set[str]] = {}

    def prefetch(self, uids: Iterable[str], pod_names: Iterable[PodName]) -> None:
        found: set[str] = set()
        asked_uids = sorted(set(uids).difference(self._events_of))
        for batch in _batches(asked_uids):
            for uid in batch:
                self._events_of[uid] = set()
            for uid, event in self._rows.filter(uid__in=batch).values_list("uid", "event_uid"):
                self._events_of[uid].add(event)
                found.add(event)
        asked_names: list[PodName] = sorted(set(pod_names).difference(self._events_of))
        for names in _batches(asked_names):
            wanted = set(names)
            for pod_name in names:
                self._events_of[pod_name] = set()
            by_name = self._rows.filter(uid="", namespace__in={ns for ns, _ in names}, name__in={n for _, n in names})
            for namespace, name, event in by_name.values_list("namespace", "name", "event_uid"):
                if (namespace, name) in wanted:
                    self._events_of[(namespace, name)].add(event)
                    found.add(event)
        self._history.prefetch("Event", found)

    def about(self, uids: Collection[str], pod_names: Collection[PodName]) -> list[list[Version]]:
        self.prefetch(uids, pod_names)
        keys: list[str | PodName] = [*uids, *pod_names]
        events = sorted({event for key in keys for event in self._events_of[key]})
        return [versions for event in events if (versions := self._history.versions("Event", event))]


def _batches(items: list[T]) -> list[list[T]]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]
