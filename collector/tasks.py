"""Celery tasks: thin shells over collector.collect and collector.retention."""

from __future__ import annotations

import logging

import redis
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from collector import retention
from collector.collect import run_collection
from collector.models import Cluster
from notify.tasks import enqueue_scan

log = logging.getLogger("claimline.collector")

# Without these, a Redis that accepts connections but never answers (a partition,
# a stopped VM) blocks the task forever; with them the lock fails with a TimeoutError.
REDIS_TIMEOUT = 5.0


def redis_lock(key: str) -> redis.lock.Lock:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT
    )
    # The timeout frees the lock of a worker killed mid-run.
    return client.lock(key, timeout=settings.CLAIMLINE_COLLECT_LOCK_TIMEOUT)


def collection_lock(name: str) -> redis.lock.Lock:
    return redis_lock(f"claimline:collect:{name}")


@shared_task(name="collector.tasks.collect_cluster", ignore_result=True)
def collect_cluster(name: str) -> str:
    lock = collection_lock(name)
    if not lock.acquire(blocking=False):
        log.info("collection of %s skipped: the previous one is still running", name)
        return "skipped"
    try:
        snapshot = run_collection(name, timezone.now(), timezone.now)
        enqueue_scan(snapshot)  # notices: a task of their own, so they never hold up collection
        return snapshot.status
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            log.warning("collection lock of %s expired before the run ended", name)


@shared_task(name="collector.tasks.prune_history", ignore_result=True)
def prune_history() -> list[str]:
    """Drop every stored cluster's history older than CLAIMLINE_RETENTION_DAYS.

    No lock: a collection only writes rows that start now, each batch re-checks
    the rule before deleting, and a second prune running at once finds nothing left.
    """
    cutoff = retention.cutoff_for(timezone.now(), settings.CLAIMLINE_RETENTION_DAYS)
    return [retention.prune_history(cluster, cutoff).describe() for cluster in Cluster.objects.order_by("name")]
