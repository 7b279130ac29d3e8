"""In-process scheduling for the embedded default (no Celery, no Redis)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, close_old_connections, connections

from claimline.pipeline import run_collection
from collector.history_writer import SnapshotOrderError
from collector.kube import CollectionError
from collector.locks import HistoryLease
from collector.models import Snapshot
from notify.hooks import after_snapshot

log = logging.getLogger("claimline.scheduler")


@dataclass(frozen=True)
class Outcome:
    """One cluster's collection in a round: its snapshot, or why there is none (``error``, ``skipped``)."""

    name: str
    snapshot: Snapshot | None = None
    error: str = ""
    skipped: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.error) or (self.snapshot is not None and self.snapshot.status == Snapshot.Status.FAILED)


def collect_one(name: str, clock: Callable[[], datetime], wait: float = 0.0) -> Outcome:
    """One collection of ``name`` holding its history lease; never raises (a scheduler must go on)."""
    try:
        lease = HistoryLease(name, "collection")
        if not lease.acquire(wait=wait):
            log.info("collection of %s skipped: %s is writing its history", name, lease.describe_holder())
            return Outcome(name, skipped=f"{lease.describe_holder()} is writing its history")
        try:
            snapshot = run_collection(name, clock(), clock)
        finally:
            lease.release()
        after_snapshot(snapshot, clock)
        return Outcome(name, snapshot)
    except (CollectionError, DatabaseError, SnapshotOrderError) as exc:
        log.error("collection of %s failed: %s", name, exc)
        return Outcome(name, error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # a bug or an odd failure must not end the loop
        log.exception("collection of %s failed", name)
        return Outcome(name, error=f"{type(exc).__name__}: {exc}")
    finally:
        close_old_connections()


def collect_all(names: Iterable[str], clock: Callable[[], datetime], wait: float = 0.0) -> list[Outcome]:
    """One collection of each cluster; one cluster's failure does not stop the others.

    ``wait``: how long a collection waits for another writer of the cluster (an import) to finish
    instead of skipping the round.
    """
    return [collect_one(name, clock, wait) for name in names]


def run_forever(
    names: list[str], interval: float, clock: Callable[[], datetime], stop: threading.Event
) -> None:
    """Collect every ``interval`` seconds until ``stop``; whatever one round raises is logged, and the
    next round runs."""
    try:
        while not stop.is_set():
            try:
                collect_all(names, clock)
            except Exception:
                log.exception("a collection round failed; the next one starts in %ss", interval)
            stop.wait(interval)
    finally:
        connections.close_all()


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
