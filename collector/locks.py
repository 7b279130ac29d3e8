"""Locks in Redis that keep one worker at a time on a cluster's collection or derivation."""

from __future__ import annotations

import redis
from django.conf import settings

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
