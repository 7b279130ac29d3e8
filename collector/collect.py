"""One collection of one cluster: read it completely, then write its history."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError

from collector import history
from collector.kube import ClusterReader, CollectionError, api_client_for
from collector.models import Snapshot
from dashboard.config import ClusterSource
from derived.pipeline import derive_after_write

log = logging.getLogger("claimline.collector")


def configured_cluster(name: str) -> ClusterSource:
    for source in settings.CLAIMLINE_CLUSTERS:
        if source.name == name:
            return source
    raise CollectionError(f"no cluster named {name!r} in CLAIMLINE_CLUSTERS")


def reader_for(source: ClusterSource) -> tuple[ClusterReader, str]:
    """A reader for ``source`` and a description of where it reads from."""
    kubeconfig = None
    if source.kind == "demo":
        from collector.demo_source import demo_kubeconfig

        kubeconfig = demo_kubeconfig()
    api = api_client_for(source, kubeconfig)
    reader = ClusterReader(
        api,
        page_size=settings.CLAIMLINE_PAGE_SIZE,
        timeout=settings.CLAIMLINE_REQUEST_TIMEOUT,
        max_retries=settings.CLAIMLINE_MAX_RETRIES,
    )
    return reader, f"api {api.configuration.host} ({source.describe()})"


def collect(
    source: ClusterSource,
    now: datetime,
    clock: Callable[[], datetime],
    reader: ClusterReader | None = None,
) -> Snapshot:
    """Snapshot ``source`` as of ``now``; a failed run is recorded and stores nothing.

    ``clock`` stamps when the run finished (tests pass a fixed one).
    """
    cluster = history.get_cluster(source.name)
    description = source.describe()
    try:
        if reader is None:
            reader, description = reader_for(source)
    except CollectionError as exc:
        snapshot = history.start_snapshot(cluster, now, f"api ({description})", started=now)
        history.fail_snapshot(snapshot, str(exc), clock())
        return snapshot
    snapshot = history.start_snapshot(cluster, now, description, started=now)
    try:
        result = reader.read()
    except CollectionError as exc:
        log.warning("collection of %s failed: %s", source.name, exc)
        history.fail_snapshot(snapshot, str(exc), clock())
        return snapshot
    try:
        history.write_snapshot(
            snapshot, result.objects, result.complete_kinds, finished=clock(), problems=result.problems
        )
    except DatabaseError as exc:
        # The write transaction rolled back; record the failure if the database lets us.
        log.error("storing the snapshot of %s failed: %s", source.name, exc)
        try:
            history.fail_snapshot(snapshot, f"storing the snapshot failed: {exc}", clock(), len(result.objects))
        except DatabaseError:
            log.exception("cannot record the failed snapshot of %s", source.name)
        raise
    # Celery derives in a task of its own, so the next collection need not wait for it.
    derive_after_write(snapshot, inline=settings.CLAIMLINE_SCHEDULER != "celery")
    return snapshot


def run_collection(name: str, now: datetime, clock: Callable[[], datetime]) -> Snapshot:
    """The entry point the scheduler, Celery and ``collect`` share."""
    source = configured_cluster(name)
    if source.kind == "demo":
        from collector.demo_source import replay_demo_history

        replayed = replay_demo_history(source, now, clock)
        if replayed is not None:
            return replayed
    return collect(source, now, clock)
