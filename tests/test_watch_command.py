"""``manage.py watch``: one watcher per cluster across processes (a Redis lease), a liveness file, a
clean stop on SIGTERM that stores what it holds; the in-process watch of ``serve`` on the demo cluster;
Celery's periodic collection standing aside while a cluster is watched."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from claimline.tasks import collect_cluster
from claimline.watching import Lease, lease_key, watch_cluster
from collector.models import ObjectVersion, Snapshot
from demo.fake_apiserver import FakeApiServer, FakeCluster
from derived.models import DerivedSnapshot
from tests.clusters import small_cluster
from tests.test_watch import churned
from tests.workers import ROOT, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clean_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(lease_key("w"), lease_key("demo"))
    yield client
    client.delete(lease_key("w"), lease_key("demo"))


@contextmanager
def watcher_process(kubeconfig: Path, alive: Path, log: Path, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "manage.py", "watch", "--cluster", "w", "--alive-dir", str(alive)],
        cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env=worker_env(
            CLAIMLINE_CLUSTERS=f"w=kubeconfig:{kubeconfig}", CLAIMLINE_SCHEDULER="in-process",
            CLAIMLINE_WATCH_LEASE="6", CLAIMLINE_WATCH_TIMEOUT="5", CLAIMLINE_COLLECT_INTERVAL="3600", **env,
        ),
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def until(condition: Any, timeout: float = 90.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def watching(log: Path) -> bool:
    return "watching w (api" in log.read_text(errors="replace")


def test_one_watcher_per_cluster_liveness_and_a_clean_stop(tmp_path: Path, clean_redis: redis.Redis) -> None:
    server = FakeApiServer(FakeCluster([small_cluster(), churned(), small_cluster()]), bookmark_interval=1.0)
    server.start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    alive = [tmp_path / "alive-a", tmp_path / "alive-b"]
    try:
        # changes are held for a minute before they are written: only a stop writes them sooner
        with watcher_process(kubeconfig, alive[0], logs[0], CLAIMLINE_WATCH_BATCH_SECONDS="60") as first, \
                watcher_process(kubeconfig, alive[1], logs[1], CLAIMLINE_WATCH_BATCH_SECONDS="60") as second:
            until(lambda: Snapshot.objects.filter(cluster__name="w", status="ok").exists(), what="the first batch")
            until(lambda: DerivedSnapshot.objects.filter(cluster__name="w").exists(), what="its derivation")
            active, standby = (first, second) if watching(logs[0]) else (second, first)
            active_log, standby_log = (logs[0], logs[1]) if active is first else (logs[1], logs[0])
            assert not watching(standby_log), "two processes watch the same cluster"
            # both are alive: the one watching hears bookmarks, the standby waits for the lease
            for path in alive:
                until(lambda p=path: (p / "w").exists(), what=f"{path} touched")
            # a change arrives; SIGTERM: it is stored (and derived) before the process ends
            before = timezone.now()
            server.cluster.advance()
            time.sleep(2.0)
            active.send_signal(signal.SIGTERM)
            assert active.wait(timeout=60) == 0, active_log.read_text()
            batch = Snapshot.objects.filter(cluster__name="w", status="ok").order_by("-at").first()
            assert batch is not None and batch.versions_written == 3 and batch.deletions == 3
            assert before <= batch.at <= timezone.now()
            assert DerivedSnapshot.objects.filter(snapshot=batch).exists()
            # the standby takes over within a third of the lease, writes nothing twice, then watches
            until(lambda: watching(standby_log), timeout=60, what="the standby to take over")
            versions = ObjectVersion.objects.count()
            time.sleep(2.0)
            assert ObjectVersion.objects.count() == versions
            server.cluster.advance()  # back to the first stage: what the churn removed comes back
            time.sleep(2.0)
            standby.send_signal(signal.SIGTERM)
            assert standby.wait(timeout=60) == 0, standby_log.read_text()
            latest = Snapshot.objects.filter(cluster__name="w", status="ok").order_by("-at").first()
            assert latest is not None and latest.pk != batch.pk
            assert (latest.versions_written, latest.deletions) == (4, 2)
        assert clean_redis.get(lease_key("w")) is None  # released on the way out
    finally:
        server.stop()


def test_the_periodic_collection_stands_aside_while_a_cluster_is_watched(clean_redis: redis.Redis) -> None:
    lease = Lease("demo", 30)
    assert lease.acquire()
    try:
        assert collect_cluster("demo") == "skipped"
        assert not Snapshot.objects.exists()
    finally:
        lease.release()


def test_serve_watches_the_demo_cluster_in_process(settings: Any, tmp_path: Path) -> None:
    settings.CLAIMLINE_SCHEDULER = "in-process"
    settings.CLAIMLINE_COLLECT_INTERVAL = 1  # a checkpoint every second while nothing changes
    stop = threading.Event()
    thread = threading.Thread(target=watch_cluster, args=("demo", timezone.now, stop, False, tmp_path))
    thread.start()
    try:
        # the story is replayed (its first collection's way), then watched: checkpoints, each derived
        until(lambda: Snapshot.objects.filter(source__startswith="watch ").exists(), what="a checkpoint")
        checkpoint = Snapshot.objects.filter(source__startswith="watch ").earliest("at")
        until(lambda: DerivedSnapshot.objects.filter(snapshot=checkpoint).exists(), what="its derivation")
        replayed = Snapshot.objects.filter(source__startswith="demo replay").count()
        assert replayed > 1 and checkpoint.versions_written == checkpoint.deletions == 0
        assert (tmp_path / "demo").exists()
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert timezone.now() - Snapshot.objects.latest("at").at < timedelta(minutes=1)


def test_a_watcher_that_loses_its_lease_stops_writing_and_stands_by(
    settings: Any, tmp_path: Path, clean_redis: redis.Redis
) -> None:
    from collector.sources import ClusterSource

    server = FakeApiServer(FakeCluster([small_cluster(), churned()]), bookmark_interval=0.2)
    server.start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    settings.CLAIMLINE_CLUSTERS = [ClusterSource("w", "kubeconfig", str(tmp_path / "kubeconfig"))]
    settings.CLAIMLINE_SCHEDULER = "in-process"
    settings.CLAIMLINE_WATCH_LEASE = 3
    settings.CLAIMLINE_WATCH_BATCH_SECONDS = 0.0
    stop = threading.Event()
    thread = threading.Thread(target=watch_cluster, args=("w", timezone.now, stop, True, tmp_path / "alive"))
    thread.start()
    try:
        until(lambda: Snapshot.objects.filter(cluster__name="w", status="ok").exists(), what="the first batch")
        versions = ObjectVersion.objects.count()
        # another replica holds the cluster now (its lease ran out here, say, during a long pause)
        clean_redis.set(lease_key("w"), b"someone-else", ex=30)
        time.sleep(2.5)  # past a renewal: this watcher has let go
        server.cluster.advance()
        time.sleep(2.0)
        assert ObjectVersion.objects.count() == versions, "a watcher without the lease wrote"
        # the other replica goes away: this one takes the cluster back and stores the change, once
        clean_redis.delete(lease_key("w"))
        until(lambda: ObjectVersion.objects.count() > versions, what="the change after taking over")
        time.sleep(1.0)
        assert ObjectVersion.objects.count() == versions + 3 + 3  # train-0, train-3, its claim; 3 deletions
    finally:
        stop.set()
        thread.join(timeout=60)
        server.stop()
    assert clean_redis.get(lease_key("w")) is None
