"""In-process scheduling for the embedded default (no Celery, no Redis)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime

from django.db import DatabaseError, close_old_connections

from claimline.pipeline import run_collection
from collector.kube import CollectionError
from collector.models import Snapshot
from notify.hooks import after_snapshot

log = logging.getLogger("claimline.scheduler")


def collect_all(names: Iterable[str], clock: Callable[[], datetime]) -> list[Snapshot]:
    """One collection of each cluster; one cluster's failure does not stop the others."""
    snapshots = []
    for name in names:
        try:
            snapshot = run_collection(name, clock(), clock)
            snapshots.append(snapshot)
            after_snapshot(snapshot, clock)
        except (CollectionError, DatabaseError) as exc:
            log.error("collection of %s failed: %s", name, exc)
        finally:
            close_old_connections()
    return snapshots


def run_forever(
    names: list[str], interval: float, clock: Callable[[], datetime], stop: threading.Event
) -> None:
    while not stop.is_set():
        collect_all(names, clock)
        stop.wait(interval)


def start_in_background(
    names: list[str], interval: float, clock: Callable[[], datetime], mode: str = "poll"
) -> threading.Event:
    """Collect ``names`` in background threads: every ``interval`` (``poll``), or by watching each (``watch``:
    one thread per cluster, no lease: this process is the only one)."""
    stop = threading.Event()
    if mode == "watch":
        from claimline.watching import watch_cluster

        for name in names:
            threading.Thread(
                target=watch_cluster, args=(name, clock, stop, False, None), name=f"claimline-watch-{name}", daemon=True
            ).start()
        return stop
    thread = threading.Thread(
        target=run_forever, args=(names, interval, clock, stop), name="claimline-scheduler", daemon=True
    )
    thread.start()
    return stop
