"""Celery tasks: thin shells over collector.collect."""

from __future__ import annotations

import logging

import redis
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from collector.collect import run_collection

log = logging.getLogger("claimline.collector")


def collection_lock(name: str) -> redis.lock.Lock:
    client = redis.Redis.from_url(settings.REDIS_URL)
    # The timeout frees the lock of a worker killed mid-run.
    return client.lock(f"claimline:collect:{name}", timeout=settings.CLAIMLINE_COLLECT_LOCK_TIMEOUT)


@shared_task(name="collector.tasks.collect_cluster", ignore_result=True)
def collect_cluster(name: str) -> str:
    lock = collection_lock(name)
    if not lock.acquire(blocking=False):
        log.info("collection of %s skipped: the previous one is still running", name)
        return "skipped"
    try:
        snapshot = run_collection(name, timezone.now(), timezone.now)
        return snapshot.status
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            log.warning("collection lock of %s expired before the run ended", name)
