"""Background collection through a real Celery worker and beat on Redis."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from claimline.celery import beat_schedule
from claimline.tasks import collect_cluster, collection_lock
from collector.models import Snapshot
from collector.sources import ClusterSource
from demo.fake_apiserver import FakeApiServer
from derived.models import DerivedSnapshot, MetricsText, ReviewDocument
from tests.workers import celery_worker, worker_env


def test_beat_has_one_expiring_entry_per_cluster() -> None:
    schedule = beat_schedule([ClusterSource("a", "demo"), ClusterSource("b", "in-cluster")], 30)
    assert sorted(schedule) == ["collect-a", "collect-b"]
    assert schedule["collect-a"]["schedule"] == 30.0
    assert schedule["collect-a"]["args"] == ("a",)
    assert schedule["collect-a"]["options"]["expires"] < 30


@pytest.mark.django_db
def test_a_run_already_holding_the_lock_is_not_overlapped() -> None:
    lock = collection_lock("demo")
    redis.Redis.from_url(settings.REDIS_URL).delete(lock.name)
    assert lock.acquire(blocking=False)
    try:
        assert collect_cluster.run("demo") == "skipped"
        assert not Snapshot.objects.exists()
    finally:
        lock.release()


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_worker_and_beat_land_a_snapshot(tmp_path: Path, fake_api: FakeApiServer) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    env = worker_env(
        CLAIMLINE_CLUSTERS=f"itest=kubeconfig:{kubeconfig}",
        CLAIMLINE_COLLECT_INTERVAL="1",
        CLAIMLINE_REQUEST_TIMEOUT="5",
        CLAIMLINE_SCHEDULER="celery",  # the derivation, then the renderings, run as tasks of their own
    )
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    with celery_worker(env, "--beat", "--schedule", str(tmp_path / "beat-schedule")) as worker:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if Snapshot.objects.filter(cluster__name="itest", status="ok").count() >= 2:
                break
            assert worker.poll() is None, worker.stdout.read() if worker.stdout else ""
            time.sleep(0.5)
        runs = list(Snapshot.objects.filter(cluster__name="itest").order_by("at"))
        assert [r.status for r in runs][:2] == ["ok", "ok"], [(r.status, r.error) for r in runs]
        assert runs[0].versions_written > 0
        assert runs[1].versions_written == 0  # unchanged cluster, nothing new
        while time.monotonic() < deadline and not (MetricsText.objects.exists() and ReviewDocument.objects.exists()):
            assert worker.poll() is None, worker.stdout.read() if worker.stdout else ""
            time.sleep(0.5)
        assert DerivedSnapshot.objects.filter(snapshot=runs[0]).exists()
        assert ReviewDocument.objects.get().cluster.name == "itest" and MetricsText.objects.exists()
