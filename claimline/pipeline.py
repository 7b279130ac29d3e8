"""The pipeline every stored snapshot goes through: collected (or imported), derived, then told to notices.

Collection (``collector``) knows nothing of what follows it; this module is the one place that
runs the steps in order, for the scheduler, the Celery tasks and the commands alike.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.conf import settings

from collector import retention
from collector.collect import collect, configured_cluster
from collector.kube import ClusterReader
from collector.models import Cluster, Snapshot
from collector.sources import ClusterSource
from demo.source import demo_kubeconfig, replay_demo_history
from derived.pipeline import derive_after_write
from derived.retention import prune_derived
from notify.hooks import after_snapshot


def collect_and_derive(
    source: ClusterSource,
    now: datetime,
    clock: Callable[[], datetime],
    reader: ClusterReader | None = None,
) -> Snapshot:
    """One collection of ``source``, then the derivation of what it stored (none after a failed run)."""
    kubeconfig = demo_kubeconfig(source.name, now) if source.kind == "demo" and reader is None else None
    snapshot = collect(source, now, clock, reader, kubeconfig=kubeconfig)
    if snapshot.status != Snapshot.Status.FAILED:
        # Celery derives in a task of its own, so the next collection need not wait for it.
        derive_after_write(snapshot, inline=settings.CLAIMLINE_SCHEDULER != "celery")
    return snapshot


def run_collection(name: str, now: datetime, clock: Callable[[], datetime]) -> Snapshot:
    """The entry point the scheduler, Celery and ``collect`` share; notices follow separately
    (in process, or as a task of their own)."""
    source = configured_cluster(name)
    if source.kind == "demo":
        replayed = replay_demo_history(source, now, clock, collect_and_derive)
        if replayed is not None:
            return replayed
    return collect_and_derive(source, now, clock)


def derive_import(snapshot: Snapshot) -> None:
    """What follows a snapshot written by ``import-snapshot``, with the cluster's history lease still
    held (as a collection derives): its derivation, in this process. Notices follow (``after_import``)."""
    derive_after_write(snapshot)


def after_import(snapshot: Snapshot, clock: Callable[[], datetime]) -> None:
    """Notices about an imported (and derived) snapshot: Celery's worker scans them, else this process."""
    after_snapshot(snapshot, clock)


def prune_cluster(
    cluster: Cluster, before: datetime, *, dry_run: bool = False, batch: int = retention.BATCH
) -> retention.PruneResult:
    """Drop the history (and the derived rows read from it) that no as-of query at or after ``before`` needs."""
    result = retention.prune_history(cluster, before, dry_run=dry_run, batch=batch)
    if not dry_run:
        prune_derived(cluster, before, batch=batch)
    return result
