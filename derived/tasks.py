"""Celery tasks: derivation, /metrics, the overview and the reviews (the current week's, and a week that ended) after a
collection, apart from it (each may outlast one)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from celery import shared_task

from collector.gcpause import release_snapshot
from collector.locks import redis_lock
from collector.models import Snapshot
from derived.overviews import render_latest_overview
from derived.past_reviews import render_reviews
from derived.pipeline import derive_backlog
from derived.rendered import render_latest_metrics

log = logging.getLogger("claimline.derived")


def _render(snapshot_id: int, render: Callable[[Snapshot], bool]) -> str:
    snapshot = Snapshot.objects.filter(pk=snapshot_id).first()
    if snapshot is None:
        return "gone"
    if not render(snapshot):
        return "skipped"
    release_snapshot()
    return "rendered"


@shared_task(name="derived.tasks.render_metrics", ignore_result=True)
def render_metrics(snapshot_id: int) -> str:
    return _render(snapshot_id, render_latest_metrics)


@shared_task(name="derived.tasks.render_review", ignore_result=True)
def render_review(snapshot_id: int) -> str:
    return _render(snapshot_id, render_reviews)


@shared_task(name="derived.tasks.render_overview", ignore_result=True)
def render_overview(snapshot_id: int) -> str:
    return _render(snapshot_id, render_latest_overview)


@shared_task(name="derived.tasks.derive_cluster", ignore_result=True)
def derive_cluster(cluster_id: int) -> str:
    """Derive the cluster's backlog; one worker at a time per cluster.

    A second task finding the lock held returns at once: the holder loops until the backlog is
    empty, and a snapshot it misses at the very end is taken by the next collection's task.
    """
    lock = redis_lock(f"claimline:derive:{cluster_id}")
    if not lock.acquire(blocking=False):
        return "skipped"
    try:
        done = derive_backlog(cluster_id)
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            log.warning("derivation lock of cluster id %s expired before the run ended", cluster_id)
    return f"derived {len(done)} snapshots"
