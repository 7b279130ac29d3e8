"""Writing snapshots into change-only history.

A snapshot is written in one transaction: compare every object's hash with
its head version, insert only changed objects, and record deletions for kinds
the snapshot saw completely. Nothing is written for a snapshot that fails.

A watch writes its batches with ``write_changes``: a snapshot that covers only the objects it names
(their new content, or their deletion), each valid from when its change arrived, so nothing else
is recorded deleted, and only those objects' heads are read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from collector.models import Cluster, ObjectVersion, Snapshot
from collector.normalize import NormalizedObject

log = logging.getLogger("claimline.history")

BATCH = 2000
_TICK = timedelta(microseconds=1)


class SnapshotOrderError(ValueError):
    """A snapshot older than one already stored: history only moves forward."""


@dataclass(frozen=True)
class WriteResult:
    objects_seen: int
    versions_written: int
    deletions: int


def get_cluster(name: str) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(name=name)
    return cluster


def _check_order(cluster_id: int, name: str, at: datetime, exclude: int | None = None) -> None:
    stored = Snapshot.objects.usable().filter(cluster_id=cluster_id)
    if exclude is not None:
        stored = stored.exclude(pk=exclude)
    latest = stored.order_by("-at").values_list("at", flat=True).first()
    if latest is not None and at <= latest:
        raise SnapshotOrderError(
            f"cluster {name} already has a snapshot at {latest.isoformat()}; "
            f"a new snapshot must be later than that (got {at.isoformat()})"
        )


def start_snapshot(cluster: Cluster, at: datetime, source: str, started: datetime) -> Snapshot:
    """Record a run before it reads anything, so a crash leaves a trace."""
    _check_order(cluster.pk, cluster.name, at)
    # A run that was killed mid-way never finished; say so instead of leaving it "running".
    Snapshot.objects.filter(cluster=cluster, status=Snapshot.Status.RUNNING).update(
        status=Snapshot.Status.FAILED, error="interrupted: the process running it stopped", finished=started
    )
    return Snapshot.objects.create(cluster=cluster, at=at, started=started, source=source[:500])


def write_checkpoint(cluster: Cluster, at: datetime, source: str, objects_seen: int) -> Snapshot:
    """A watch's word that nothing changed up to ``at``: one finished snapshot row that stores nothing
    (pages and alerts read the newest snapshot's time as the data's age); ``SnapshotOrderError`` when a
    later snapshot was stored meanwhile."""
    _check_order(cluster.pk, cluster.name, at)
    return Snapshot.objects.create(
        cluster=cluster, at=at, started=at, finished=at, source=source[:500], status=Snapshot.Status.OK,
        objects_seen=objects_seen,
    )


def fail_snapshot(snapshot: Snapshot, error: str, finished: datetime, objects_seen: int = 0) -> None:
    Snapshot.objects.filter(pk=snapshot.pk).update(
        status=Snapshot.Status.FAILED, error=error[:10000], finished=finished, objects_seen=objects_seen
    )
    snapshot.refresh_from_db()


def write_snapshot(
    snapshot: Snapshot,
    objects: Iterable[NormalizedObject],
    complete_kinds: Collection[str],
    finished: datetime | Callable[[], datetime],
    problems: Collection[str] = (),
) -> WriteResult:
    """Store ``objects`` as the content of ``snapshot``; ``SnapshotOrderError`` (nothing written) when
    a later snapshot was stored since it started.

    ``objects`` may be a stream (an import's): new versions are written a batch at a time as it is
    consumed, and whatever it raises rolls everything back. ``complete_kinds``: kinds listed
    completely, so their absent objects are deleted; it is read once ``objects`` is exhausted.
    ``problems``: objects that could not be read; the run is recorded as partial. ``finished``: when
    the run ended, or what tells it once the objects are written.
    """
    at = snapshot.at
    cluster_id = snapshot.cluster_id
    with transaction.atomic():
        # Writers of one cluster take turns (collector.locks.HistoryLease); should a lease have lapsed
        # meanwhile, the cluster's row serializes the writes and history still only moves forward.
        cluster_name = Cluster.objects.select_for_update().values_list("name", flat=True).get(pk=cluster_id)
        _check_order(cluster_id, cluster_name, at, exclude=snapshot.pk)
        heads: dict[tuple[str, str], tuple[int, str, bool]] = {
            (kind, uid): (pk, digest, deleted)
            for pk, kind, uid, digest, deleted in ObjectVersion.objects.filter(
                cluster_id=cluster_id, valid_to__isnull=True
            ).values_list("pk", "kind", "uid", "content_hash", "deleted")
        }
        new_rows: list[ObjectVersion] = []
        superseded: list[int] = []
        # The UIDs seen, by kind (a set of (kind, uid) pairs would cost a tuple per object).
        seen: dict[str, set[str]] = {}
        seen_count = versions_written = 0
        for obj in objects:
            key = obj.key
            uids = seen.get(obj.kind)
            if uids is None:
                uids = seen[obj.kind] = set()
            if obj.uid in uids:
                continue  # a list that repeats an object (paging across a change) stores it once
            uids.add(obj.uid)
            seen_count += 1
            head = heads.get(key)
            if head is not None and not head[2] and head[1] == obj.content_hash:
                continue
            if head is not None:
                superseded.append(head[0])
            new_rows.append(
                ObjectVersion(
                    cluster_id=cluster_id,
                    kind=obj.kind,
                    uid=obj.uid,
                    namespace=obj.namespace,
                    name=obj.name,
                    content_hash=obj.content_hash,
                    content=obj.content.decode(),
                    shapes_checked=obj.checked,
                    snapshot_id=snapshot.pk,
                    valid_from=at,
                )
            )
            if len(new_rows) >= BATCH:
                versions_written += len(new_rows)
                ObjectVersion.objects.bulk_create(new_rows, batch_size=BATCH)
                new_rows = []
        versions_written += len(new_rows)
        deletions = 0
        complete = set(complete_kinds)
        if complete:
            names = _head_names(cluster_id, heads, seen, complete)
            for (kind, uid), (pk, _digest, deleted) in heads.items():
                if deleted or kind not in complete or uid in seen.get(kind, ()):
                    continue
                namespace, name = names[pk]
                superseded.append(pk)
                new_rows.append(
                    ObjectVersion(
                        cluster_id=cluster_id,
                        kind=kind,
                        uid=uid,
                        namespace=namespace,
                        name=name,
                        deleted=True,
                        snapshot_id=snapshot.pk,
                        valid_from=at,
                    )
                )
                deletions += 1
        for start in range(0, len(superseded), BATCH):
            ObjectVersion.objects.filter(pk__in=superseded[start : start + BATCH]).update(valid_to=at)
        ObjectVersion.objects.bulk_create(new_rows, batch_size=BATCH)
        Snapshot.objects.filter(pk=snapshot.pk).update(
            status=Snapshot.Status.PARTIAL if problems else Snapshot.Status.OK,
            error="\n".join(problems)[:10000],
            finished=finished() if callable(finished) else finished,
            objects_seen=seen_count,
            versions_written=versions_written,
            deletions=deletions,
        )
    snapshot.refresh_from_db()
    log.info(
        "snapshot %s of cluster %s: %d objects, %d versions, %d deletions",
        snapshot.pk, cluster_name, seen_count, versions_written, deletions,
    )
    return WriteResult(seen_count, versions_written, deletions)


def _head_names(
    cluster_id: int,
    heads: dict[tuple[str, str], tuple[int, str, bool]],
    seen: dict[str, set[str]],
    complete: set[str],
) -> dict[int, tuple[str, str]]:
    """Namespace and name of the heads about to be deleted, fetched only for those."""
    gone = [
        pk for (kind, uid), (pk, _d, deleted) in heads.items()
        if not deleted and kind in complete and uid not in seen.get(kind, ())
    ]
    names: dict[int, tuple[str, str]] = {}
    for start in range(0, len(gone), BATCH):
        for pk, namespace, name in ObjectVersion.objects.filter(pk__in=gone[start : start + BATCH]).values_list(
            "pk", "namespace", "name"
        ):
            names[pk] = (namespace, name)
    return names


@dataclass(frozen=True)
class Change:
    """One object's change for ``write_changes``: its new content, or ``None`` for its deletion."""

    kind: str
    uid: str
    at: datetime
    obj: NormalizedObject | None = None


def write_changes(
    snapshot: Snapshot,
    changes: Sequence[Change],
    finished: datetime,
    problems: Collection[str] = (),
    objects_seen: int = 0,
) -> WriteResult:
    """Store ``changes`` as the content of ``snapshot``, which covers only them.

    Each version is valid from its change's ``at``, kept after its head's start and no later than the
    snapshot's time; a change equal to its head (the same content, or the deletion of an object
    already deleted or never stored) writes nothing, so a change told twice is stored once.
    """
    cluster_id = snapshot.cluster_id
    # start_snapshot's Snapshot holds its Cluster: no query for the log line below.
    cluster_name = snapshot.cluster.name
    with transaction.atomic():
        wanted: dict[str, set[str]] = {}
        for change in changes:
            wanted.setdefault(change.kind, set()).add(change.uid)
        heads: dict[tuple[str, str], tuple[int, str, bool, str, str, datetime]] = {}
        for kind, uids in wanted.items():
            listed = sorted(uids)
            for start in range(0, len(listed), BATCH):
                rows = ObjectVersion.objects.filter(
                    cluster_id=cluster_id, valid_to__isnull=True, kind=kind, uid__in=listed[start : start + BATCH]
                ).values_list("pk", "uid", "content_hash", "deleted", "namespace", "name", "valid_from")
                for pk, uid, digest, deleted, namespace, name, valid_from in rows:
                    heads[(kind, uid)] = (pk, digest, deleted, namespace, name, valid_from)
        new_rows: list[ObjectVersion] = []
        superseded: dict[datetime, list[int]] = {}
        versions_written = deletions = 0
        for change in changes:
            key = (change.kind, change.uid)
            head = heads.get(key)
            obj = change.obj
            if obj is None and (head is None or head[2]):
                continue
            if obj is not None and head is not None and not head[2] and head[1] == obj.content_hash:
                continue
            at = min(max(change.at, head[5] + _TICK), snapshot.at) if head is not None else min(change.at, snapshot.at)
            if head is not None:
                superseded.setdefault(at, []).append(head[0])
            if obj is None:
                assert head is not None
                row = ObjectVersion(
                    cluster_id=cluster_id, kind=change.kind, uid=change.uid, namespace=head[3], name=head[4],
                    deleted=True, snapshot_id=snapshot.pk, valid_from=at,
                )
                deletions += 1
                heads[key] = (0, "", True, head[3], head[4], at)
            else:
                row = ObjectVersion(
                    cluster_id=cluster_id, kind=obj.kind, uid=obj.uid, namespace=obj.namespace, name=obj.name,
                    content_hash=obj.content_hash, content=obj.content.decode(), shapes_checked=obj.checked,
                    snapshot_id=snapshot.pk, valid_from=at,
                )
                versions_written += 1
                heads[key] = (0, obj.content_hash, False, obj.namespace, obj.name, at)
            new_rows.append(row)
        for at, pks in superseded.items():
            for start in range(0, len(pks), BATCH):
                ObjectVersion.objects.filter(pk__in=[p for p in pks[start : start + BATCH] if p]).update(valid_to=at)
        _supersede_within(new_rows)
        ObjectVersion.objects.bulk_create(new_rows, batch_size=BATCH)
        Snapshot.objects.filter(pk=snapshot.pk).update(
            status=Snapshot.Status.PARTIAL if problems else Snapshot.Status.OK,
            error="\n".join(problems)[:10000],
            finished=finished,
            objects_seen=objects_seen,
            versions_written=versions_written,
            deletions=deletions,
        )
    snapshot.refresh_from_db()
    log.info(
        "watched changes %s of cluster %s: %d versions, %d deletions",
        snapshot.pk, cluster_name, versions_written, deletions,
    )
    return WriteResult(objects_seen, versions_written, deletions)


def _supersede_within(rows: list[ObjectVersion]) -> None:
    """Close the rows a later row of the same batch supersedes (an object changed twice in one batch)."""
    last: dict[tuple[str, str], ObjectVersion] = {}
    for row in rows:
        earlier = last.get((row.kind, row.uid))
        if earlier is not None:
            earlier.valid_to = row.valid_from
        last[(row.kind, row.uid)] = row
