"""Deriving notices when a snapshot is written: the domain lists subjects, this stores the new ones.

A notice is stored once while its condition lasts (``notice_open_once``); when a
scan no longer finds it, it is marked resolved, so the same condition coming
back later is a new notice. Sending happens elsewhere, from these rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from collector.history_reader import NoSnapshot, StoredHistory
from collector.models import Cluster, Snapshot
from derived.reading import waiting_verdicts
from derived.thresholds import leak_thresholds
from domain.reports.notices import (
    COLLECTION_FAILING,
    DEVICE_HEALTH,
    LEAK,
    NODE_PREPARATION,
    PENDING_POD,
    NoticeThresholds,
    Run,
    Subject,
    detect,
)
from notify.models import Notice, Scan

log = logging.getLogger("claimline.notify")


def thresholds() -> NoticeThresholds:
    return NoticeThresholds(
        leaks=leak_thresholds(),
        pending_after=settings.CLAIMLINE_NOTIFY_PENDING_AFTER,
        failed_collections=settings.CLAIMLINE_NOTIFY_FAILED_COLLECTIONS,
    )


def absolute(path: str) -> str:
    """``path`` (from the site's root) under CLAIMLINE_BASE_URL: absolute when it is set."""
    return settings.CLAIMLINE_BASE_URL + path


def link_for(cluster: str, subject: Subject) -> str:
    ref = subject.ref
    if subject.kind == LEAK:
        path = reverse("claim", kwargs={"cluster": cluster, "uid": ref["claim"]})
    elif subject.kind in (PENDING_POD, DEVICE_HEALTH):
        path = reverse("pod", kwargs={"cluster": cluster, "namespace": ref["namespace"], "name": ref["pod_name"]})
        path += f"?uid={ref['pod']}"
    elif subject.kind == NODE_PREPARATION:
        path = reverse("inventory", kwargs={"cluster": cluster})
    elif subject.kind == COLLECTION_FAILING:
        path = reverse("snapshots", kwargs={"cluster": cluster})
    else:
        path = reverse("notices", kwargs={"cluster": cluster})
    return absolute(path)


def _runs(cluster: Cluster, count: int) -> list[Run]:
    rows = (
        Snapshot.objects.filter(cluster=cluster)
        .exclude(status=Snapshot.Status.RUNNING)
        .order_by("-at")
        .values_list("at", "status", "error")[:count]
    )
    return [Run(at, status == Snapshot.Status.FAILED, error) for at, status, error in rows]


@dataclass
class ScanResult:
    cluster: str
    at: datetime
    new: list[int]
    resolved: int

    def describe(self) -> str:
        return f"{self.cluster} as of {self.at.isoformat()}: {len(self.new)} new notices, {self.resolved} resolved"


def scan(cluster: Cluster, finished: datetime, include_history: bool = True) -> ScanResult:
    """Store the cluster's new notices as of its latest snapshot; resolve those no longer found.

    ``include_history`` False (the latest collection failed) checks collection
    failures only: the stored history is the same as at the last scan.
    """
    th = thresholds()
    runs = _runs(cluster, th.failed_collections)
    history = None
    if include_history:
        try:
            history = StoredHistory(cluster)
        except NoSnapshot:
            history = None
    at = history.as_of if history is not None else (runs[0].at if runs else finished)
    known = dict(
        Notice.objects.filter(cluster=cluster, kind=PENDING_POD, resolved__isnull=True).values_list("subject", "reason")
    )
    # The waiting Pods' verdicts as derived with the snapshot: no Pod is judged here when they are.
    stored = waiting_verdicts(history) if history is not None else None
    found = detect(cluster.name, history, runs, th, known, stored)
    with transaction.atomic():
        open_notices = {
            (n.kind, n.subject, n.reason): n.pk
            for n in Notice.objects.filter(cluster=cluster, resolved__isnull=True, kind__in=found.checked)
        }
        current = {s.identity: s for s in found.subjects}
        gone = [pk for identity, pk in open_notices.items() if identity not in current]
        resolved = Notice.objects.filter(pk__in=gone).update(resolved=at)
        fresh = [s for identity, s in current.items() if identity not in open_notices]
        # A concurrent scan may have stored the same notice first: the open-once constraint keeps one.
        Notice.objects.bulk_create(
            [
                Notice(
                    cluster=cluster,
                    kind=s.kind,
                    subject=s.key,
                    reason=s.reason,
                    namespace=s.namespace,
                    name=s.name,
                    message=s.message,
                    link=link_for(cluster.name, s),
                    first_seen=at,
                )
                for s in fresh
            ],
            ignore_conflicts=True,
        )
        new = list(
            Notice.objects.filter(
                cluster=cluster, resolved__isnull=True, first_seen=at, dispatched__isnull=True
            ).values_list("pk", flat=True)
        )
        if include_history:
            Scan.objects.update_or_create(cluster=cluster, defaults={"at": at, "finished": finished})
    return ScanResult(cluster.name, at, new, resolved)


def worth_scanning(snapshot: Snapshot) -> bool:
    """A snapshot that changed something, failed, or is the first one past the rescan interval."""
    if snapshot.status == Snapshot.Status.FAILED:
        return True
    if not snapshot.usable:
        return False
    if snapshot.changed:
        return True
    last = Scan.objects.filter(cluster_id=snapshot.cluster_id).values_list("at", flat=True).first()
    return last is None or snapshot.at - last >= timedelta(seconds=settings.CLAIMLINE_NOTIFY_RESCAN_AFTER)


def scan_after(snapshot: Snapshot, finished: datetime) -> ScanResult | None:
    """Scan after ``snapshot`` was written, if it is the cluster's newest and worth it."""
    snapshot.refresh_from_db()  # a failed run is recorded by an update, not on this instance
    newer = Snapshot.objects.filter(cluster_id=snapshot.cluster_id, at__gt=snapshot.at).exists()
    if newer or not worth_scanning(snapshot):
        return None
    failed = snapshot.status == Snapshot.Status.FAILED
    return scan(snapshot.cluster, finished, include_history=not failed)
