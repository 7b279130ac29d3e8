"""Fault tolerance: the database lost mid-write, Redis down, a worker killed mid-run, odd objects.

The API server faults a collection meets (401/403, 410, 429, 5xx, timeouts,
truncated or wrongly shaped bodies) are in test_collect.py; these are the rest.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import redis
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection
from django.test import Client, override_settings
from django.utils import timezone

from claimline.pipeline import collect_and_derive
from claimline.tasks import collect_cluster, collection_lock
from collector import history_writer as history
from collector import locks
from collector.models import ObjectVersion, Snapshot
from collector.sources import ClusterSource, parse_clusters
from demo import builders as b
from demo.fake_apiserver import FakeApiServer, Fault
from tests.clusters import T0, small_cluster
from tests.test_collect import PODS, SLICES, run, stored_state

ROOT = Path(__file__).resolve().parents[1]

# --- the database lost in the middle of writing a snapshot ------------------------------------------


@contextlib.contextmanager
def admin_connection() -> Iterator[psycopg.Connection[Any]]:
    """A second connection to the server, outside Django, to act on Django's."""
    db = connection.settings_dict
    # To the maintenance database: a session in the test database would stop ALTER DATABASE.
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname="postgres", autocommit=True
    ) as conn:
        yield conn


def kill_backend_on_insert(admin: psycopg.Connection[Any], nth: int) -> Callable[..., Any]:
    """An execute wrapper that terminates Django's server process before its ``nth`` version INSERT."""
    inserts = 0

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        nonlocal inserts
        if sql.startswith('INSERT INTO "collector_objectversion"'):
            inserts += 1
            if inserts == nth:
                pid = context["connection"].connection.info.backend_pid
                # Waits (up to 5 s) until the backend is gone, so the INSERT below meets a dead connection.
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        return execute(sql, params, many, context)

    return wrapper


@contextlib.contextmanager
def database_refusing_connections(admin: psycopg.Connection[Any]) -> Iterator[None]:
    name = connection.settings_dict["NAME"]
    admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
    try:
        yield
    finally:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')


def changed_cluster(fake_api: FakeApiServer) -> None:
    """One claim gone and one Pod changed: a write that updates heads, inserts and deletes."""
    objects = [o for o in small_cluster() if not (o["kind"] == "ResourceClaim" and o["metadata"]["name"] == "train-0-gpu")]
    next(o for o in objects if o["kind"] == "Pod")["status"]["phase"] = "Failed"
    fake_api.cluster.replace_stage(0, objects)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("database_comes_back", [True, False], ids=["connection-dropped", "database-down"])
def test_database_lost_mid_write_leaves_nothing_half_written(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch,
    database_comes_back: bool,
) -> None:
    assert run(source, make_reader()).status == "ok"
    before, versions_before = stored_state(), ObjectVersion.objects.count()
    changed_cluster(fake_api)
    # Small batches: the heads are already superseded and some rows inserted when the connection dies.
    monkeypatch.setattr(history, "BATCH", 1)
    with admin_connection() as admin:
        # Django's connection is already open: refusing new ones only bites when it tries to reconnect.
        outage = contextlib.nullcontext() if database_comes_back else database_refusing_connections(admin)
        killer = connection.execute_wrapper(kill_backend_on_insert(admin, nth=2))
        with pytest.raises(OperationalError), killer, outage:
            run(source, make_reader(), hours=1)
    connection.close()  # what Celery's and the scheduler's per-run cleanup do

    assert ObjectVersion.objects.count() == versions_before
    assert stored_state() == before and not ObjectVersion.objects.filter(valid_to__isnull=False).exists()
    lost = Snapshot.objects.get(at=T0 + timedelta(hours=1))
    if database_comes_back:
        assert lost.status == "failed" and lost.error.startswith("storing the snapshot failed:")
        assert lost.objects_seen > 0
    else:
        assert lost.status == "running"  # nothing could record it; the next run does

    after = run(source, make_reader(), hours=2)
    assert (after.status, after.versions_written, after.deletions) == ("ok", 1, 1), after.error
    lost.refresh_from_db()
    assert lost.status == "failed"
    if not database_comes_back:
        assert lost.error.startswith("interrupted")


# --- Redis down -------------------------------------------------------------------------------------

REDIS_REFUSING = "redis://127.0.0.1:1/0"


@pytest.mark.django_db
def test_pages_serve_while_redis_is_down(admin_client: Client, tmp_path: Path) -> None:
    dump = tmp_path / "a.json"
    dump.write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat(), stdout=StringIO())
    with override_settings(REDIS_URL=REDIS_REFUSING, CELERY_BROKER_URL=REDIS_REFUSING):
        for url in ("/c/demo/", "/c/demo/snapshots/", "/c/demo/retained/", "/api/snapshots", "/healthz"):
            response = admin_client.get(url)
            assert response.status_code == 200, url
        assert b"train-0-gpu" in admin_client.get("/c/demo/claims").content


@pytest.mark.django_db
@override_settings(REDIS_URL=REDIS_REFUSING)
def test_collection_lock_fails_at_once_when_redis_refuses() -> None:
    started = time.monotonic()
    with pytest.raises(redis.exceptions.ConnectionError, match="127.0.0.1:1"):
        collect_cluster.run("demo")
    assert time.monotonic() - started < 5
    assert not Snapshot.objects.exists()  # nothing ran without the lock


@pytest.fixture
def silent_redis() -> Iterator[str]:
    """A port that accepts connections and never answers, like Redis behind a partition."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"


@pytest.mark.django_db
def test_collection_lock_times_out_when_redis_never_answers(silent_redis: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locks, "REDIS_TIMEOUT", 0.5)
    started = time.monotonic()
    with override_settings(REDIS_URL=silent_redis), pytest.raises(redis.exceptions.TimeoutError):
        collect_cluster.run("demo")
    assert time.monotonic() - started < 5
    assert not Snapshot.objects.exists()


# --- a worker killed mid-collection --------------------------------------------------------------------


def wait_for(
    condition: Callable[[], bool], what: str, worker: subprocess.Popen[str] | None = None, timeout: float = 20
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if worker is not None and worker.poll() is not None:
            raise AssertionError(f"worker exited while waiting for {what}: {worker.stdout.read() if worker.stdout else ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_worker_killed_mid_collection_stores_nothing_and_the_next_run_recovers(
    tmp_path: Path, fake_api: FakeApiServer
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    clusters = f"itest=kubeconfig:{kubeconfig}"
    (source,) = parse_clusters(clusters)
    # History from an earlier run, then a cluster that lost a claim: the killed run must record neither.
    assert collect_and_derive(source, timezone.now() - timedelta(hours=1), timezone.now, reader=None).status == "ok"
    before, versions_before = stored_state(), ObjectVersion.objects.count()
    changed_cluster(fake_api)
    fake_api.inject(Fault(delay=60, path=PODS))  # the worker sits in the Pod list until killed

    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "CLAIMLINE_CLUSTERS": clusters,
        "CLAIMLINE_COLLECT_LOCK_TIMEOUT": "3",
        "CLAIMLINE_REQUEST_TIMEOUT": "90",
        "CLAIMLINE_MAX_RETRIES": "0",
    }
    broker = redis.Redis.from_url(settings.REDIS_URL)
    broker.flushdb()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "claimline", "worker", "--pool", "solo", "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        from claimline.celery import app

        seen = len(fake_api.requests)
        app.send_task("collector.tasks.collect_cluster", args=("itest",))
        wait_for(lambda: any(p == PODS for _m, p, _q in fake_api.requests[seen:]), "the Pod list", worker)
        running = Snapshot.objects.get(cluster__name="itest", status="running")
        assert broker.exists(collection_lock("itest").name)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        assert ObjectVersion.objects.count() == versions_before and stored_state() == before
        assert not ObjectVersion.objects.filter(snapshot=running).exists()
        running.refresh_from_db()
        assert running.status == "running"

        fake_api.clear_faults()
        lock = collection_lock("itest").name
        with override_settings(CLAIMLINE_CLUSTERS=[source]):
            if broker.pttl(lock) > 1000:  # the dead worker's lock still holds the next run off
                assert collect_cluster.run("itest") == "skipped"
            # It frees itself after CLAIMLINE_COLLECT_LOCK_TIMEOUT.
            wait_for(lambda: not broker.exists(lock), "the lock to expire", timeout=10)
            assert collect_cluster.run("itest") == "ok"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)
        broker.flushdb()  # the killed task's unacknowledged message, so no later worker replays it
    running.refresh_from_db()
    assert (running.status, running.error) == ("failed", "interrupted: the process running it stopped")
    latest = Snapshot.objects.filter(cluster__name="itest").order_by("-at").first()
    assert latest is not None and (latest.status, latest.deletions) == ("ok", 1)


# --- odd objects and list bodies ------------------------------------------------------------------------

def slice_list_body(items: list[dict[str, Any]], **metadata: Any) -> bytes:
    return orjson.dumps(
        {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "metadata": metadata, "items": items}
    )


def slice_items() -> list[dict[str, Any]]:
    return [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in small_cluster() if o["kind"] == "ResourceSlice"]


@pytest.mark.django_db
def test_huge_string_in_an_object_is_stored_whole(source: ClusterSource, make_reader: Any, fake_api: FakeApiServer) -> None:
    objects = small_cluster()
    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    claim["metadata"]["annotations"] = {"note": "x" * 5_000_000}
    fake_api.cluster.replace_stage(0, objects)
    snapshot = run(source, make_reader(page_size=50, timeout=10))
    assert snapshot.status == "ok", snapshot.error
    stored = ObjectVersion.objects.get(uid=claim["metadata"]["uid"])
    assert len(orjson.loads(stored.content)["metadata"]["annotations"]["note"]) == 5_000_000


@pytest.mark.django_db
def test_nesting_too_deep_to_store_is_reported_and_its_kind_not_deleted(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer
) -> None:
    assert run(source, make_reader()).status == "ok"
    before = stored_state()
    items = slice_items()
    deep = b'{"a":' * 300 + b"1" + b"}" * 300  # parses (the limit is 1024), but is too deep to store (255)
    body = slice_list_body(items).replace(b'"spec":{', b'"spec":{"deep":' + deep + b",", 1)
    fake_api.inject(Fault(body=body, path=SLICES, times=-1))
    snapshot = run(source, make_reader(page_size=50), hours=1)
    assert snapshot.status == "partial", snapshot.error
    assert "cannot be stored as JSON" in snapshot.error
    assert snapshot.deletions == 0 and stored_state() == before


def with_odd_types(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fields of the wrong type inside objects whose identity is intact."""
    objects = copy.deepcopy(objects)
    claims = [o for o in objects if o["kind"] == "ResourceClaim"]
    claims[2]["status"]["allocation"] = {"devices": {"results": [7, None, {"device": ["gpu-0"]}]}}
    pod = next(o for o in objects if o["kind"] == "Pod")
    pod["spec"]["resourceClaims"] = {"gpu": "train-0-gpu"}
    pod["metadata"]["labels"] = ["not", "a", "map"]
    event = next(o for o in objects if o["kind"] == "Event")
    event["involvedObject"]["uid"] = ["a", "list"]
    node = next(o for o in objects if o["kind"] == "Node")
    node["status"]["conditions"] = "Ready"
    next(o for o in objects if o["kind"] == "ResourceSlice")["spec"]["devices"] = {"gpu-0": 1}
    return objects


PAGES = ("/c/demo/", "/c/demo/retained/", "/c/demo/inventory/", "/c/demo/audit/", "/c/demo/review/",
         "/c/demo/pods/team-a/train-1/", "/api/leaks", "/api/audit", "/metrics")


@pytest.mark.django_db
def test_unexpected_types_inside_objects_are_reported_and_pages_still_serve(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer, admin_client: Client
) -> None:
    fake_api.cluster.replace_stage(0, with_odd_types(small_cluster()))
    snapshot = collect_and_derive(ClusterSource("demo", "kubeconfig", source.path), T0, lambda: T0, reader=make_reader())
    # The misshapen objects are named and left out; the rest of the snapshot lands.
    assert snapshot.status == "partial"
    for problem in (
        "status.allocation.devices.results[0] is int, expected an object",
        "metadata.labels is list, expected an object",
        "status.conditions is str, expected a list",
        "spec.devices is dict, expected a list",
    ):
        assert problem in snapshot.error
    assert snapshot.deletions == 0 and snapshot.objects_seen > 0
    for url in PAGES:
        assert admin_client.get(url).status_code == 200, url


def claim_with(field: str, value: Any) -> list[dict[str, Any]]:
    objects = small_cluster()
    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    where, name = field.split(".")
    claim[where][name] = value
    return objects


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["status.reservedFor", "spec.devices"])
def test_claims_with_wrongly_typed_fields_are_reported(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer, field: str
) -> None:
    assert run(source, make_reader()).status == "ok"
    before = stored_state()
    fake_api.cluster.replace_stage(0, claim_with(field, 5))
    snapshot = run(source, make_reader(), hours=1)
    assert snapshot.status == "partial"
    assert f"{field} is int, expected" in snapshot.error
    assert snapshot.deletions == 0
    assert stored_state() == before


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["status.reservedFor", "spec.devices"])
def test_a_dump_with_wrongly_typed_fields_is_refused_and_pages_serve(
    admin_client: Client, tmp_path: Path, field: str
) -> None:
    (tmp_path / "good.json").write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(tmp_path / "good.json"), "--at", T0.isoformat(), stdout=StringIO())
    dump = tmp_path / "odd.json"
    dump.write_bytes(b.dump_json(claim_with(field, 5)))
    with pytest.raises(CommandError, match=f"{field} is int, expected"):
        call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(hours=1)).isoformat())
    for url in PAGES:
        assert admin_client.get(url).status_code == 200, url


@pytest.mark.django_db
@pytest.mark.parametrize("token", [7, {"key": "x"}, ["x"], True])
def test_continue_token_that_is_not_a_string_fails_the_run(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer, token: Any
) -> None:
    assert run(source, make_reader()).status == "ok"
    before = stored_state()
    fake_api.inject(Fault(body=slice_list_body(slice_items(), **{"continue": token}), path=SLICES, times=-1))
    snapshot = run(source, make_reader(page_size=50), hours=1)
    assert snapshot.status == "failed"
    assert "listing resourceslices.resource.k8s.io: response has a metadata.continue that is not a string" in snapshot.error
    assert stored_state() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{}", "not a Kubernetes list"),
        (b'{"kind": "ResourceSliceList", "items": null}', "not a Kubernetes list"),
        (b'{"kind": "Status", "items": []}', "not a ResourceSliceList (kind 'Status')"),
        (b'{"items": []}', "not a ResourceSliceList (kind None)"),
    ],
    ids=["empty-object", "null-items", "other-kind", "no-kind"],
)
def test_a_body_that_is_not_the_list_asked_for_deletes_nothing(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer, body: bytes, message: str
) -> None:
    assert run(source, make_reader()).status == "ok"
    before = stored_state()
    fake_api.inject(Fault(body=body, path=SLICES, times=-1))
    snapshot = run(source, make_reader(page_size=50), hours=1)
    assert snapshot.status == "failed" and message in snapshot.error, snapshot.error
    assert snapshot.deletions == 0 and stored_state() == before


@pytest.mark.django_db
def test_unreadable_pod_keeps_events_about_it_from_being_deleted(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer
) -> None:
    assert run(source, make_reader()).status == "ok"
    before = stored_state()
    objects = small_cluster()
    pod = next(o for o in objects if o["kind"] == "Pod")
    pod["metadata"]["uid"] = "\x00" + pod["metadata"]["uid"]  # unreadable, and no longer matches its events
    fake_api.cluster.replace_stage(0, objects)
    snapshot = run(source, make_reader(), hours=1)
    assert snapshot.status == "partial"
    assert "contains NUL" in snapshot.error and "\x00" not in snapshot.error
    assert snapshot.deletions == 0 and stored_state() == before

