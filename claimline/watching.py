"""The long-running watch of a cluster: ``collector.watch`` writes batches, then each is derived and told
to notices, as a collection is (``claimline.pipeline``).

Storing never waits for derivation: every batch is stored when due (a transition is in history within
about ``CLAIMLINE_WATCH_BATCH_SECONDS`` of its arrival), and the derivation behind it is coalesced:
each covers every batch stored since the last one (``derived.pipeline.derive_backlog``), so a burst
costs one derivation. In process (``CLAIMLINE_SCHEDULER=in-process``: ``serve``) a thread of this
process derives; with Celery a ``derived.tasks.derive_cluster`` task does.

Across replicas one watcher holds a cluster: a lease in Redis (the collection lock's key, so Celery
beat's fallback collection skips the cluster meanwhile), renewed every third of its time; a replica
that loses it stops without writing and waits as a standby. A file per cluster is touched on every
event, bookmark and list page, and while standing by, for a liveness probe.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import redis
from django.conf import settings
from django.db import close_old_connections, connections

from claimline.pipeline import collect_and_derive
from collector.collect import configured_cluster
from collector.kinds import RESOURCE_TYPES
from collector.kube import CollectionError, api_client_for
from collector.locks import REDIS_TIMEOUT
from collector.models import Snapshot
from collector.watch import Watcher, WatchSettings
from demo.source import demo_kubeconfig, replay_demo_history
from derived.pipeline import derive_after_write, derive_backlog
from notify.hooks import in_process
from notify.tasks import enqueue_scan

log = logging.getLogger("claimline.watch")


def lease_key(name: str) -> str:
    return f"claimline:collect:{name}"  # collector.locks.collection_lock's: a poll and a watch exclude each other


class Lease:
    """One process's hold on a cluster, in Redis, kept while renewed."""

    def __init__(self, name: str, ttl: float) -> None:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT
        )
        self.ttl = ttl
        self.lock = client.lock(lease_key(name), timeout=ttl)
        self.renewed = 0.0

    def acquire(self) -> bool:
        try:
            got = bool(self.lock.acquire(blocking=False))
        except redis.exceptions.RedisError as exc:
            log.warning("cannot reach Redis for the watch lease: %s", exc)
            return False
        if got:
            self.renewed = time.monotonic()
        return got

    def due_in(self) -> float:
        """Seconds until ``keep`` renews."""
        return max(0.0, self.renewed + self.ttl / 3 - time.monotonic())

    def keep(self) -> bool:
        """Renew when a third of the lease has passed; False once it is lost."""
        if time.monotonic() - self.renewed < self.ttl / 3:
            return True
        try:
            self.lock.reacquire()
        except redis.exceptions.LockError:
            return False
        except redis.exceptions.RedisError as exc:
            # Redis unreachable: held until the lease would have run out, then given up
            log.warning("cannot renew the watch lease: %s", exc)
            return time.monotonic() - self.renewed < self.ttl
        self.renewed = time.monotonic()
        return True

    def release(self) -> None:
        with contextlib.suppress(redis.exceptions.RedisError):  # expired, or Redis gone: it runs out by itself
            self.lock.release()


class Liveness:
    """A file touched (at most once a second) whenever the watch hears from the API server."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.touched = 0.0
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self) -> None:
        now = time.monotonic()
        if self.path is None or now - self.touched < 1.0:
            return
        self.touched = now
        try:
            self.path.touch()
        except OSError as exc:
            log.warning("cannot touch %s: %s", self.path, exc)


class StopSignal(threading.Event):
    """The watch's stop, which also wakes every watcher blocked on its streams (they sleep until a
    message, a checkpoint or a batch is due, so a plain Event would be seen only then)."""

    def __init__(self) -> None:
        super().__init__()
        self._wakers: list[Callable[[], None]] = []
        self._wakers_lock = threading.Lock()

    def add_waker(self, wake: Callable[[], None]) -> None:
        with self._wakers_lock:
            self._wakers.append(wake)

    def remove_waker(self, wake: Callable[[], None]) -> None:
        with self._wakers_lock, contextlib.suppress(ValueError):
            self._wakers.remove(wake)

    def set(self) -> None:
        super().set()
        with self._wakers_lock:
            wakers = list(self._wakers)
        for wake in wakers:
            wake()


def quiet(snapshot: Snapshot) -> bool:
    """A checkpoint: the watch saw nothing change (no version, no deletion, not failed)."""
    return snapshot.status == Snapshot.Status.OK and not snapshot.changed


class QuietNotices:
    """Whether a quiet checkpoint is worth telling to notices in this process: only once a rescan is
    due (``CLAIMLINE_NOTIFY_RESCAN_AFTER``), for the notices that age with time (a Pod pending too long,
    a claim leaking). Nothing else about notices changes while nothing changes."""

    def __init__(self) -> None:
        self.told = time.monotonic()

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.told < settings.CLAIMLINE_NOTIFY_RESCAN_AFTER:
            return False
        self.told = now
        return True


class DerivationLane:
    """This process's derivation of one cluster's batches, in a thread: each ``submit`` asks for the
    backlog to be derived (one derivation covers every batch written meanwhile), then notices."""

    def __init__(self, cluster_id: int, clock: Callable[[], datetime]) -> None:
        self.cluster_id = cluster_id
        self.clock = clock
        self._notices = QuietNotices()
        self._tell = False  # the notices step is wanted after this run
        self._wanted = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._latest: Snapshot | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"derive-{cluster_id}", daemon=True)
        self._thread.start()

    def submit(self, snapshot: Snapshot) -> None:
        """Derive ``snapshot`` (with what came before it) and tell notices; a quiet checkpoint only
        when derivation is on (its row is derived like any), and tells notices only when a rescan is due."""
        tell = not quiet(snapshot) or self._notices.due()
        if not tell and not settings.CLAIMLINE_DERIVE:
            return  # nothing to do: the checkpoint's row is all it costs
        self._latest = snapshot
        self._tell = self._tell or tell
        self._idle.clear()
        self._wanted.set()

    @property
    def idle(self) -> bool:
        return self._idle.is_set()

    def wait(self, timeout: float) -> bool:
        return self._idle.wait(timeout)

    def close(self, timeout: float = 60.0) -> None:
        """Finish what was submitted, then stop."""
        self._idle.wait(timeout)
        self._stop.set()
        self._wanted.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            connections.close_all()  # this thread's

    def _loop(self) -> None:
        while True:
            self._wanted.wait()
            if self._stop.is_set():
                return
            self._wanted.clear()
            snapshot, tell, self._tell = self._latest, self._tell, False
            try:
                if settings.CLAIMLINE_DERIVE and snapshot is not None and snapshot.status != Snapshot.Status.FAILED:
                    derive_backlog(self.cluster_id)
                if snapshot is not None and tell:
                    in_process(snapshot, self.clock)
            except Exception:
                log.exception("deriving the watched batches of cluster %s failed", self.cluster_id)
            finally:
                close_old_connections()
                if not self._wanted.is_set():
                    self._idle.set()


def celery_after_write(snapshot: Snapshot) -> None:
    """With Celery: queue the backlog's derivation (a worker already deriving it takes this batch in its
    next round) and the notices of a batch that changed something."""
    if snapshot.status != Snapshot.Status.FAILED and settings.CLAIMLINE_DERIVE:
        derive_after_write(snapshot, inline=False)
    if not quiet(snapshot):
        # A quiet checkpoint changes no notice but those that age with time, which beat's periodic
        # collection task has scanned (claimline.tasks.collect_cluster) while a watcher holds the cluster.
        enqueue_scan(snapshot)


def watch_settings() -> WatchSettings:
    return WatchSettings(
        timeout=float(settings.CLAIMLINE_WATCH_TIMEOUT),
        request_timeout=settings.CLAIMLINE_REQUEST_TIMEOUT,
        page_size=settings.CLAIMLINE_PAGE_SIZE,
        max_retries=settings.CLAIMLINE_MAX_RETRIES,
        batch_seconds=settings.CLAIMLINE_WATCH_BATCH_SECONDS,
        batch_events=settings.CLAIMLINE_WATCH_BATCH_EVENTS,
        checkpoint=float(settings.CLAIMLINE_COLLECT_INTERVAL),
    )


def make_watcher(
    name: str, clock: Callable[[], datetime], alive: Callable[[], None]
) -> tuple[Watcher, Callable[[], None]]:
    """A watcher of cluster ``name`` wired to this process's derivation and notices, and what closes them.

    A demo cluster without history replays its story first (as its first collection does)."""
    source = configured_cluster(name)
    kubeconfig = None
    if source.kind == "demo":
        replay_demo_history(source, clock(), clock, collect_and_derive)
        kubeconfig = demo_kubeconfig(name, clock())
    api = api_client_for(source, kubeconfig, pool_size=2 * len(RESOURCE_TYPES))
    where = f"api {api.configuration.host} ({source.describe()})"
    if settings.CLAIMLINE_SCHEDULER == "celery":
        watcher = Watcher(name, api, where, clock, watch_settings(), celery_after_write, alive)
        return watcher, lambda: None
    holder: dict[str, DerivationLane] = {}

    def after_write(snapshot: Snapshot) -> None:
        if "lane" not in holder:
            holder["lane"] = DerivationLane(snapshot.cluster_id, clock)
        holder["lane"].submit(snapshot)

    def close() -> None:
        if "lane" in holder:
            holder["lane"].close()

    return Watcher(name, api, where, clock, watch_settings(), after_write, alive), close


def watch_cluster(
    name: str,
    clock: Callable[[], datetime],
    stop: threading.Event,
    lease: bool = True,
    alive_dir: Path | None = None,
) -> None:
    """Watch cluster ``name`` until ``stop`` is set; with ``lease``, only while this process holds it.

    On ``stop`` (SIGTERM) what arrived is stored and derived before returning."""
    alive = Liveness(alive_dir / name if alive_dir is not None else None)
    hold = Lease(name, settings.CLAIMLINE_WATCH_LEASE) if lease else None
    while not stop.is_set():
        if hold is not None and not hold.acquire():
            alive()  # a standby is alive too
            stop.wait(min(5.0, hold.ttl / 3))
            continue
        try:
            watcher, close = make_watcher(name, clock, alive)
        except CollectionError as exc:
            log.error("cannot watch %s: %s", name, exc)
            if hold is not None:
                hold.release()
            stop.wait(10.0)
            continue
        log.info("watching %s (%s)", name, watcher.source)
        failed = False
        # Blocked on the streams while quiet: a StopSignal wakes the loop; a plain Event is looked at each second.
        add_waker = getattr(stop, "add_waker", None)
        if add_waker is not None:
            add_waker(watcher.wake)
        cap = 30.0 if add_waker is not None else 1.0
        try:
            watcher.start()
            while not stop.is_set():
                idle = watcher.idle_for(cap)
                if hold is not None:
                    idle = min(idle, hold.due_in() + 0.01)
                watcher.pump(idle)
                if hold is not None and not hold.keep():
                    log.error("lost the watch lease of %s: another replica watches it; standing by", name)
                    watcher.abandon()
                    break
                watcher.step()
        except Exception:  # the database gone, a bug: start over (and list again) rather than stop watching
            log.exception("watching %s failed; starting over", name)
            failed = True
        finally:
            if add_waker is not None:
                stop.remove_waker(watcher.wake)  # type: ignore[attr-defined]
            try:
                watcher.stop(commit=not watcher.abandoned and not failed)
            except Exception:
                log.exception("stopping the watch of %s failed", name)
            close()
            if hold is not None and not watcher.abandoned:
                hold.release()
            close_old_connections()
        if failed:
            stop.wait(10.0)
    connections.close_all()  # this thread's: it ends here
