"""Pruning the derived layer with the history it was derived from (``collector.retention``'s cutoff).

Run after the history's prune: the lookups below keep only rows whose object still has a version.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef

from collector.models import Cluster, ObjectVersion
from collector.retention import BATCH, delete_in_batches
from derived.models import VERSIONED, AdminAccessResult, AllocationSpan, EventSubject


def prune_derived(cluster: Cluster, before: datetime, *, batch: int = BATCH) -> None:
    """Delete the derived rows of ``cluster`` that no as-of query at or after ``before`` reads."""
    # Derived documents that ended by the cutoff answer no as-of query at or after it either.
    for model in VERSIONED:
        delete_in_batches(model.objects.filter(cluster=cluster, valid_to__lte=before), batch)
    delete_in_batches(AllocationSpan.objects.filter(cluster=cluster, end__lte=before), batch)
    # The device pages' and the derivation's lookups only say which objects to read: those whose
    # object has no version left go.
    claims = ObjectVersion.objects.filter(cluster=cluster, kind="ResourceClaim", uid=OuterRef("claim_uid"))
    delete_in_batches(AdminAccessResult.objects.filter(cluster=cluster).exclude(Exists(claims)), batch)
    events = ObjectVersion.objects.filter(cluster=cluster, kind="Event", uid=OuterRef("event_uid"))
    delete_in_batches(EventSubject.objects.filter(cluster=cluster).exclude(Exists(events)), batch)
