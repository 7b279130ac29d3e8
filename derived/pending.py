"""The changes one derivation covers: what every usable snapshot after the last derived one stored,
up to the snapshot being derived.

A watcher stores a batch a second; deriving each in turn falls behind on a big cluster, where a
churned snapshot's derivation takes seconds. So a derivation covers every batch stored since the
last one (``derived.pipeline.derive_backlog`` derives the newest of the backlog): the batches
between are left underived, and a page asking about one of them reads it from history, as it
does history from before the layer (``derived.reports.covers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from collector.models import ObjectVersion, Snapshot


@dataclass(frozen=True)
class PendingChanges:
    """The stored snapshots one derivation covers (``snapshot_ids``, oldest first, ``snapshot`` last)."""

    snapshot: Snapshot  # the one derived: the rows it writes are valid from its time
    snapshot_ids: tuple[int, ...]
    since: datetime | None  # the time of the snapshot derived before (None: none is)
    changed: bool  # any of them stored a version or a deletion

    def versions(self, **filters: Any) -> Any:
        """The versions (and deletions) these snapshots stored, filtered by ``filters``."""
        if len(self.snapshot_ids) == 1:
            return ObjectVersion.objects.filter(snapshot_id=self.snapshot_ids[0], **filters)
        return ObjectVersion.objects.filter(
            cluster_id=self.snapshot.cluster_id, snapshot_id__in=self.snapshot_ids, **filters
        )

    @property
    def coalesced(self) -> int:
        """How many stored snapshots this derivation covers besides its own."""
        return len(self.snapshot_ids) - 1


def pending_since(snapshot: Snapshot, since: datetime | None) -> PendingChanges:
    """The usable snapshots after ``since`` up to ``snapshot`` (only ``snapshot`` without ``since``)."""
    if since is None:
        return PendingChanges(snapshot, (snapshot.pk,), None, snapshot.changed)
    runs = (
        Snapshot.objects.usable()
        .filter(cluster_id=snapshot.cluster_id, at__gt=since, at__lte=snapshot.at)
        .order_by("at")
    )
    ids = tuple(runs.values_list("pk", flat=True))
    if snapshot.pk not in ids:  # not usable (a caller's mistake): it alone, as before
        return PendingChanges(snapshot, (snapshot.pk,), since, snapshot.changed)
    changed = snapshot.changed or runs.filter(Q(versions_written__gt=0) | Q(deletions__gt=0)).exists()
    return PendingChanges(snapshot, ids, since, changed)


def pending_for(snapshot: Snapshot) -> PendingChanges:
    """``snapshot``'s own changes, after the usable snapshot before it (what a per-snapshot derivation covers)."""
    before = (
        Snapshot.objects.usable()
        .filter(cluster_id=snapshot.cluster_id, at__lt=snapshot.at)
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )
    return PendingChanges(snapshot, (snapshot.pk,), before, snapshot.changed)
