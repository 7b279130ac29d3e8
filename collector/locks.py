"""Locks that keep one writer at a time on a cluster's history, and one worker on its derivation.

``HistoryLease`` is the lock every writer of a cluster's history takes: a collection (the embedded
scheduler, ``collect``, Celery's task) and ``import-snapshot``. It is a row in the database, so it
works the same on SQLite without Redis and on PostgreSQL with Celery, across processes and hosts.
Celery's collection task also keeps its Redis lock (``collection_lock``), which skips an overlapping
task before it touches the database.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from collector.models import WriterLease

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


class HistoryLease:
    """The right to write cluster ``name``'s history, for at most CLAIMLINE_COLLECT_LOCK_TIMEOUT seconds.

    ``what`` says what holds it (``collection``, ``import a.json``): a writer that finds the lease
    taken can tell whom it waits for (``held_by``).
    """

    def __init__(self, name: str, what: str) -> None:
        self.name = name
        self.what = f"{what} ({socket.gethostname()}, pid {os.getpid()})"[:200]
        self.token = uuid.uuid4().hex
        self.held_by = ""
        self.held_since: datetime | None = None

    def _try(self) -> bool:
        now = timezone.now()
        WriterLease.objects.bulk_create([WriterLease(cluster=self.name)], ignore_conflicts=True)
        # One UPDATE decides: atomic on PostgreSQL and SQLite alike.
        taken = (
            WriterLease.objects.filter(cluster=self.name)
            .filter(Q(expires__isnull=True) | Q(expires__lte=now))
            .update(
                token=self.token, holder=self.what, since=now,
                expires=now + timedelta(seconds=settings.CLAIMLINE_COLLECT_LOCK_TIMEOUT),
            )
        )
        if taken:
            return True
        current = WriterLease.objects.filter(cluster=self.name).values_list("holder", "since").first()
        self.held_by, self.held_since = current if current is not None else ("", None)
        return False

    def acquire(self, wait: float = 0.0, poll: float = 0.5) -> bool:
        """Take the lease, waiting up to ``wait`` seconds for its holder to finish; whether it was taken."""
        deadline = time.monotonic() + wait
        while not self._try():
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(poll, max(deadline - time.monotonic(), 0.01)))
        return True

    def release(self) -> None:
        try:
            freed = WriterLease.objects.filter(cluster=self.name, token=self.token).update(
                token="", holder="", since=None, expires=None
            )
        except DatabaseError as exc:
            # The database went away mid-run: the lease frees itself when it expires.
            log.warning("cannot free the history lease of %s (it expires by itself): %s", self.name, exc)
            return
        if not freed:
            log.warning("history lease of %s expired before the %s ended", self.name, self.what)

    def describe_holder(self) -> str:
        since = f" since {self.held_since.isoformat()}" if self.held_since is not None else ""
        return f"{self.held_by or 'another writer'}{since}"
