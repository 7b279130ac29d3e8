"""Opening stored history for a command or a request: which cluster, as of when."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from collector.models import Cluster
from collector.timeparse import parse_rfc3339
from dashboard.domain.leaks import Thresholds
from dashboard.history import NoSnapshot, StoredHistory


class ReadError(LookupError):
    """The asked cluster or time has no history; the message says which."""


def open_history(cluster_name: str | None, as_of: str | datetime | None) -> StoredHistory:
    name = cluster_name or settings.CLAIMLINE_CLUSTERS[0].name
    try:
        cluster = Cluster.objects.get(name=name)
    except Cluster.DoesNotExist:
        raise ReadError(f"no history for cluster {name!r}: run collect or import-snapshot first") from None
    try:
        when = parse_rfc3339(as_of, "--as-of") if isinstance(as_of, str) else as_of
    except ValueError as exc:
        raise ReadError(str(exc)) from None
    try:
        return StoredHistory(cluster, when)
    except NoSnapshot as exc:
        raise ReadError(str(exc)) from None


def leak_thresholds() -> Thresholds:
    return Thresholds(
        orphaned=settings.CLAIMLINE_ORPHANED_AFTER,
        stuck_deletion=settings.CLAIMLINE_STUCK_DELETION_AFTER,
        unreserved=settings.CLAIMLINE_UNRESERVED_AFTER,
        held_by_failing_pod=settings.CLAIMLINE_FAILING_POD_AFTER,
    )
