"""Where collection hands over to notices: after the write transaction, never failing the collection."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings

from collector.models import Snapshot
from notify import delivery, detection

log = logging.getLogger("claimline.notify")


def in_process(snapshot: Snapshot, clock: Callable[[], datetime]) -> None:
    """The embedded scheduler's notice step: scan, queue, send what is due, in the collection's loop."""
    try:
        detection.scan_after(snapshot, clock())
        delivery.dispatch(clock())
        delivery.deliver_due(clock())
    except Exception:  # a notice problem must never stop the next collection
        log.exception("notices after snapshot %s failed", snapshot.pk)


def after_snapshot(snapshot: Snapshot, clock: Callable[[], datetime]) -> None:
    """For writers outside the scheduler (import-snapshot): Celery's worker scans, else this process."""
    if settings.CLAIMLINE_SCHEDULER == "celery":
        from notify.tasks import enqueue_scan

        enqueue_scan(snapshot)
    else:
        in_process(snapshot, clock)
