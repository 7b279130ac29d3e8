"""Celery tasks of the pipeline: thin shells over ``claimline.pipeline`` (collect, derive, prune).

Their names keep the ``collector.tasks.`` prefix they were queued and scheduled under before the
pipeline moved here, so messages already queued and beat entries still route."""

from __future__ import annotations

import logging

import redis
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from claimline.pipeline import prune_cluster, run_collection
from collector import retention
from collector.locks import HistoryLease, collection_lock
from collector.models import Cluster, Snapshot
from notify.tasks import enqueue_scan

log = logging.getLogger("claimline.collector")


@shared_task(name="collector.tasks.collect_cluster", ignore_result=True)
def collect_cluster(name: str) -> str:
    # The history lease first: every writer of the cluster takes it, imports too (collector/locks.py).
    # Taken before the Redis lock, it also expires before it when a killed worker leaves both behind.
    lease = HistoryLease(name, "collection")
    if not lease.acquire():
        log.info("collection of %s skipped: %s is writing its history", name, lease.describe_holder())
        return "skipped"
    try:
        lock = collection_lock(name)
        if not lock.acquire(blocking=False):
            # The previous collection still runs, or a watcher holds the cluster (claimline.watching): this
            # periodic collection is then only a fallback for when no watcher runs.
            log.info("collection of %s skipped: a collection or a watch of it is running", name)
            _scan_newest(name)
            return "skipped"
        try:
            snapshot = run_collection(name, timezone.now(), timezone.now)
        finally:
            try:
                lock.release()
            except redis.exceptions.LockError:
                log.warning("collection lock of %s expired before the run ended", name)
            except redis.exceptions.RedisError as exc:
                log.warning("cannot release the collection lock of %s (it expires by itself): %s", name, exc)
    finally:
        lease.release()
    enqueue_scan(snapshot)  # notices: a task of their own, so they never hold up collection
    return snapshot.status


def _scan_newest(name: str) -> None:
    """Notices that age with time (a Pod pending too long, a leak) are due even while nothing changes:
    a watcher tells notices only what changed, so the periodic task queues the scan of the newest
    snapshot, which scans when a rescan is due (``notify.detection.worth_scanning``)."""
    newest = Snapshot.objects.filter(cluster__name=name).exclude(status=Snapshot.Status.RUNNING).order_by("-at").first()
    if newest is not None:
        enqueue_scan(newest)


@shared_task(name="collector.tasks.prune_history", ignore_result=True)
def prune_history() -> list[str]:
    """Drop every stored cluster's history older than CLAIMLINE_RETENTION_DAYS.

    No lock: a collection only writes rows that start now, each batch re-checks
    the rule before deleting, and a second prune running at once finds nothing left.
    """
    cutoff = retention.cutoff_for(timezone.now(), settings.CLAIMLINE_RETENTION_DAYS)
    return [prune_cluster(cluster, cutoff).describe() for cluster in Cluster.objects.order_by("name")]
