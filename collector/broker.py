"""Queueing a Celery task from the collection and import path, within a bound.

Every Redis call there has a timeout (``CELERY_BROKER_TRANSPORT_OPTIONS`` and the publish retry
policy, claimline/settings.py), and a caller that cannot queue falls back (derives in process, or
leaves the backlog for the next run) and says so. After one failure the broker is not tried again
for ``PAUSE`` seconds: an import queues several tasks, and each would wait out the timeout again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import current_app
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

log = logging.getLogger("claimline.broker")

PAUSE = 30.0
_unavailable: tuple[float, str] | None = None  # (monotonic time of the failure, why)


def queue(task: str, *args: Any, countdown: float | None = None) -> str:
    """Queue ``task(*args)`` (to run in ``countdown`` seconds); empty when queued, else why not (the
    caller falls back)."""
    global _unavailable
    if _unavailable is not None:
        since, why = _unavailable
        if time.monotonic() - since < PAUSE:
            return f"the broker failed {time.monotonic() - since:.0f}s ago ({why})"
        _unavailable = None
    started = time.monotonic()
    try:
        # The project's app, loaded with Django's settings (``claimline/__init__.py``), in a command too.
        current_app.send_task(task, args=args, countdown=countdown)
    except (OperationalError, RedisError, OSError) as exc:
        why = f"{type(exc).__name__}: {exc} (after {time.monotonic() - started:.1f}s)"
        _unavailable = (time.monotonic(), why)
        return why
    return ""
