"""Retention: dropping history older than a cutoff without changing what is seen after it.

The rule, for one cluster and a cutoff C:

1. A version whose ``valid_to`` is at or before C is deleted: it describes the
   object only at times before C.
2. A deletion marker that starts before C and was never superseded (the object
   has no later version) is deleted too. With rule 1 that removes the object
   entirely: it was gone before C.
3. Except: a Pod or PodGroup that a kept ResourceClaim version names by UID (a
   consumer in ``status.reservedFor`` or the owner in ``metadata.ownerReferences``)
   keeps its last state and its deletion marker. A claim that outlives its Pods
   (or its PodGroup) by more than the retention period is a leak, and the leak
   report describes it from that last state (Succeeded at …, owned by Job/…).
4. Everything else is kept, in particular each object's version valid at C,
   with its real ``valid_from``.
5. A snapshot row older than C is deleted once no remaining version references
   it (``ObjectVersion.snapshot`` is PROTECT), except the latest successful
   snapshot at or before C, and except ``running`` rows (the next run marks
   them failed; a later prune takes them).

The guarantee: for every time T >= C, ``collector.history_reader.StoredHistory(cluster, T)``
answers exactly as before pruning. It resolves to the same ``as_of`` snapshot
(rule 5 keeps the one a T between C and the next snapshot needs), finds the same
objects of every kind (a version valid at any T >= C has ``valid_to`` after C or
none), and ``all_versions(kind, since)`` for every ``since >= C`` returns the same
versions (that query already ignores versions that ended by ``since`` and deletion
markers older than it), which is what a weekly review reads when its series starts
on or after C: the current review's eight weeks reach 63 days back, so keep
``CLAIMLINE_RETENTION_DAYS`` well above that (the default 90 is). Rule 3's rows
change none of this: both lie before C.

What pruning gives up is the part of each object's past that ended at or before C:
``versions(kind, uid)`` now starts at the version valid at C, and incarnations
gone before C drop out of ``uids_named`` (and so out of a Pod's incarnation list).
Facts timelines do not need more: the times they report (``creationTimestamp``,
``allocationTimestamp``, conditions' ``lastTransitionTime``, events' first/last
timestamps, container ``startedAt``) live in the object content itself, which the
version valid at C carries. Only a fact with no timestamp of its own that is older
than C (e.g. a claim without ``allocationTimestamp``) is then dated by the oldest
kept version instead. As-of queries before C are not answered faithfully: a kept
old snapshot row still resolves, but objects that changed since show only later.

Why not also keep each object's first version for its allocation evidence: a
version kept across a gap would read as valid all through the gap to anything
that walks versions (allocation stretches, timeline diffs), so the kept versions
of an object are always a contiguous tail of its history, and the evidence comes
from the content as above.

Deletes run in batches of ``BATCH`` rows, one transaction per batch, so a long
prune never holds locks for long and can be stopped and rerun at any point. Each
batch re-applies the rule inside its delete, so a collection writing meanwhile
cannot make it delete anything the rule keeps. The cutoff is passed in: nothing
here reads the clock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q

from collector.models import Cluster, ObjectVersion, Snapshot

log = logging.getLogger("claimline.retention")

BATCH = 2000


@dataclass(frozen=True)
class PruneResult:
    cluster: str
    cutoff: datetime
    versions: int  # superseded versions that ended at or before the cutoff
    deletion_markers: int
    snapshots: int
    dry_run: bool = False

    def describe(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return (
            f"{self.cluster}: history before {self.cutoff.isoformat()}: {verb} {self.versions} versions, "
            f"{self.deletion_markers} deletion markers, {self.snapshots} snapshots"
        )


def cutoff_for(now: datetime, days: int) -> datetime:
    return now - timedelta(days=days)


@dataclass(frozen=True)
class _Rule:
    cutoff: datetime
    kept_tails: frozenset[int]  # rule 3: rows kept although rules 1-2 match them

    def _spare(self, q: Q) -> Q:
        return q & ~Q(pk__in=self.kept_tails) if self.kept_tails else q

    def ended(self) -> Q:
        return self._spare(Q(valid_to__lte=self.cutoff))

    def old_markers(self) -> Q:
        return self._spare(Q(deleted=True, valid_to__isnull=True, valid_from__lt=self.cutoff))

    def pruned(self) -> Q:
        return self.ended() | self.old_markers()


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _named_consumers(contents: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``(kind, UID)`` of the Pods and PodGroups claims name as consumers or owner (stored content is only
    checked at the top)."""
    for content in contents:
        claim = orjson.loads(content)
        status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
        for ref in _list(status.get("reservedFor")) + _list(claim["metadata"].get("ownerReferences")):
            uid = ref.get("uid") if isinstance(ref, dict) else None
            if not isinstance(uid, str):
                continue
            if ref.get("resource") == "pods" or ref.get("kind") == "Pod":
                yield "Pod", uid
            elif ref.get("resource") == "podgroups" or ref.get("kind") == "PodGroup":
                yield "PodGroup", uid


def _consumer_tails(cluster: Cluster, cutoff: datetime) -> frozenset[int]:
    """Rule 3: the last state and deletion marker of gone Pods and PodGroups that kept claims still name."""
    gone = {
        (kind, uid): (pk, at)
        for kind, uid, pk, at in ObjectVersion.objects.filter(
            cluster=cluster, kind__in=("Pod", "PodGroup"), deleted=True, valid_to__isnull=True, valid_from__lt=cutoff
        ).values_list("kind", "uid", "pk", "valid_from")
    }
    if not gone:
        return frozenset()
    claims = ObjectVersion.objects.filter(cluster=cluster, kind="ResourceClaim", deleted=False).filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=cutoff)
    )
    named = {key for key in _named_consumers(claims.values_list("content", flat=True).iterator(BATCH)) if key in gone}
    kept = {gone[key][0] for key in named}
    # The last state is the version the marker superseded: it ended when the marker began.
    for kind in ("Pod", "PodGroup"):
        uids = {uid for k, uid in named if k == kind}
        if not uids:
            continue
        candidates = ObjectVersion.objects.filter(
            cluster=cluster, kind=kind, uid__in=uids, deleted=False, valid_to__in={gone[(kind, u)][1] for u in uids}
        ).values_list("uid", "valid_to", "pk")
        kept.update(pk for uid, ended, pk in candidates if ended == gone[(kind, uid)][1])
    return frozenset(kept)


def _anchor_snapshot(cluster: Cluster, cutoff: datetime) -> int | None:
    """The snapshot an as-of query between the cutoff and the next snapshot resolves to."""
    return (
        Snapshot.objects.usable()
        .filter(cluster=cluster, at__lte=cutoff)
        .order_by("-at")
        .values_list("pk", flat=True)
        .first()
    )


def _snapshots_to_delete(cluster: Cluster, rule: _Rule) -> models.QuerySet[Snapshot]:
    # Judged by the versions that survive the rule, so a dry run counts what a real run deletes.
    survivors = ObjectVersion.objects.filter(snapshot=OuterRef("pk")).exclude(rule.pruned())
    runs = Snapshot.objects.filter(cluster=cluster, at__lt=rule.cutoff).exclude(status=Snapshot.Status.RUNNING)
    anchor = _anchor_snapshot(cluster, rule.cutoff)
    if anchor is not None:
        runs = runs.exclude(pk=anchor)
    return runs.filter(~Exists(survivors))


def delete_in_batches(queryset: models.QuerySet[Any], batch: int) -> int:
    """Delete ``queryset`` in primary-key order, ``batch`` rows per transaction."""
    deleted = 0
    after = 0
    while True:
        with transaction.atomic():
            ids = list(queryset.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:batch])
            if not ids:
                return deleted
            # The filter again, not just the ids: a row changed since the select is judged anew.
            _total, per_model = queryset.filter(pk__in=ids).delete()
        # Rows of other tables that go with them (a snapshot's derived marker) are not counted.
        count = per_model.get(queryset.model._meta.label, 0)
        deleted += count
        after = ids[-1]


def prune_history(cluster: Cluster, before: datetime, *, dry_run: bool = False, batch: int = BATCH) -> PruneResult:
    """Delete the history of ``cluster`` that no as-of query at or after ``before`` needs (see the module)."""
    if before.tzinfo is None:
        raise ValueError("the cutoff must be timezone-aware")
    rule = _Rule(before, _consumer_tails(cluster, before))
    versions = ObjectVersion.objects.filter(cluster=cluster)
    if dry_run:
        return PruneResult(
            cluster.name,
            before,
            versions.filter(rule.ended()).count(),
            versions.filter(rule.old_markers()).count(),
            _snapshots_to_delete(cluster, rule).count(),
            dry_run=True,
        )
    ended = delete_in_batches(versions.filter(rule.ended()), batch)
    markers = delete_in_batches(versions.filter(rule.old_markers()), batch)
    snapshots = delete_in_batches(_snapshots_to_delete(cluster, rule), batch)
    result = PruneResult(cluster.name, before, ended, markers, snapshots)
    log.info("%s", result.describe())
    return result
