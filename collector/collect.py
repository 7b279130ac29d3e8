"""One collection of one cluster: read it completely, then write its history."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError

from collector import history_writer as history
from collector.kube import ClusterReader, CollectionError, api_client_for
from collector.models import Snapshot
from collector.sources import ClusterSource

log = logging.getLogger("claimline.collector")


def configured_cluster(name: str) -> ClusterSource:
    for source in settings.CLAIMLINE_CLUSTERS:
        if source.name == name:
            return source
    raise CollectionError(f"no cluster named {name!r} in CLAIMLINE_CLUSTERS")


def reader_for(source: ClusterSource, kubeconfig: str | None = None) -> tuple[ClusterReader, str]:
    """A reader for ``source`` (through ``kubeconfig`` when given: the demo's) and a description of where
    it reads from."""
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
    kubeconfig: str | None = None,
) -> Snapshot:
    """Snapshot ``source`` as of ``now``; a failed run is recorded and stores nothing.

    ``clock`` stamps when the run finished (tests pass a fixed one). What follows a stored snapshot
    (derivation, notices) is the pipeline's business (``claimline.pipeline``), not collection's.
    """
    cluster = history.get_cluster(source.name)
    description = source.describe()
    try:
        if reader is None:
            reader, description = reader_for(source, kubeconfig)
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
    except history.SnapshotOrderError as exc:
        # Another writer stored a later snapshot while this run read (its lease had lapsed).
        log.error("snapshot of %s not stored: %s", source.name, exc)
        history.fail_snapshot(snapshot, f"not stored: {exc}", clock(), len(result.objects))
    except DatabaseError as exc:
        # The write transaction rolled back; record the failure if the database lets us.
        log.error("storing the snapshot of %s failed: %s", source.name, exc)
        try:
            history.fail_snapshot(snapshot, f"storing the snapshot failed: {exc}", clock(), len(result.objects))
        except DatabaseError:
            log.exception("cannot record the failed snapshot of %s", source.name)
        raise
    return snapshot
