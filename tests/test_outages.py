"""Outages of what Claimline runs on: Redis silent or restarted, PostgreSQL restarted under the web workers.

Each runs the real processes (manage.py, gunicorn, a Celery worker, redis-server) against the test database.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
import redis
import yaml
from celery import Celery
from django.core.management import call_command
from django.db import connection

from collector.models import Snapshot
from demo import builders as b
from demo.control_plane import terminate
from derived.models import DerivedSnapshot, MetricsText
from tests import test_faults
from tests.clusters import T0, small_cluster
from tests.test_faults import admin_connection, wait_for
from tests.workers import worker_env

ROOT = Path(__file__).resolve().parents[1]
silent_redis = test_faults.silent_redis  # a port that accepts connections and never answers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[str]]:
    with log.open("w") as out:
        process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            yield process
        finally:
            terminate(process, grace=20)


# --- Redis that accepts connections and never answers ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_import_finishes_with_a_silent_redis_and_says_how(silent_redis: str, tmp_path: Path) -> None:
    """Queueing the renderings and the notice scan times out; both are done in the process instead."""
    dump = tmp_path / "a.json"
    dump.write_bytes(b.dump_json(small_cluster()))
    env = worker_env(REDIS_URL=silent_redis, CLAIMLINE_SCHEDULER="celery", CLAIMLINE_REDIS_TIMEOUT="2")
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", "import-snapshot", str(dump), "--at", T0.isoformat()],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("import-snapshot still hangs on a Redis that never answers after 60 s") from None
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert took < 45, f"{took:.1f}s"  # ~10 s; the rest is room for a loaded machine
    waited = re.search(r"cannot queue derived\.tasks\.render_metrics\(\d+\): OperationalError: Timeout .*"
                       r"\(after ([0-9.]+)s\); rendering in this process instead", done.stderr)
    assert waited is not None, done.stderr
    assert float(waited[1]) <= 2 * 2 + 1.5  # two tries of CLAIMLINE_REDIS_TIMEOUT
    # The scan does not wait out the timeout again: the broker failed a moment ago.
    assert "the broker failed" in done.stderr and "scanning in this process instead" in done.stderr
    snapshot = Snapshot.objects.get()
    assert snapshot.status == "ok"
    assert DerivedSnapshot.objects.filter(snapshot=snapshot).exists()
    assert MetricsText.objects.exists()  # rendered here, not by a worker that never got the task


# --- PostgreSQL restarted under gunicorn ------------------------------------------------------------------


def get(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.django_db(transaction=True)
def test_web_workers_reconnect_after_the_database_drops_their_connections(tmp_path: Path) -> None:
    """A gunicorn worker keeps its connection between requests (CONN_MAX_AGE); after a PostgreSQL restart
    it must check it (CONN_HEALTH_CHECKS) rather than answer a 500 on it."""
    dump = tmp_path / "a.json"
    dump.write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat(), stdout=StringIO())
    port = free_port()
    env = worker_env(CLAIMLINE_METRICS_TOKEN="scrape", CLAIMLINE_SCHEDULER="celery")
    url = f"http://127.0.0.1:{port}/metrics?cluster=demo"
    args = [sys.executable, "-m", "gunicorn", "claimline.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"]
    with running(args, env, tmp_path / "gunicorn.log") as web:

        def answers() -> bool:
            with contextlib.suppress(OSError):
                return get(url, "scrape") == 200
            return False

        wait_for(answers, "gunicorn", web)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            ours = cursor.fetchone()[0]
        with admin_connection() as admin:
            dropped = admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                [connection.settings_dict["NAME"], ours],
            ).fetchall()
        assert dropped, "gunicorn's worker held no connection"
        statuses = [get(url, "scrape") for _ in range(2)]
    assert statuses == [200, 200], (tmp_path / "gunicorn.log").read_text()[-3000:]


# --- Redis restarted under a worker -----------------------------------------------------------------------


@contextlib.contextmanager
def redis_server(port: int, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        client = redis.Redis(port=port, socket_timeout=1)

        def pings() -> bool:
            with contextlib.suppress(redis.exceptions.RedisError):
                return bool(client.ping())
            return False

        wait_for(pings, "redis-server", server, timeout=10)
        yield server
    finally:
        server.kill()
        server.wait(timeout=10)


def test_the_worker_retries_the_broker_forever() -> None:
    from claimline.celery import app

    conf = app.conf
    assert conf.broker_connection_retry_on_startup and conf.broker_connection_retry
    assert conf.broker_connection_max_retries is None  # Celery's default gives up after 100 (~50 minutes)
    assert conf.broker_transport_options["socket_timeout"] == conf.broker_transport_options["socket_connect_timeout"] == 5
    assert conf.task_publish_retry_policy["max_retries"] == 1


def test_compose_restarts_what_stops() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("web", "worker", "beat"):
        assert services[name]["restart"] == "unless-stopped", name
    assert services["migrate"]["restart"] == "no"


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_a_worker_outlives_a_redis_restart(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    log = tmp_path / "worker.log"
    args = [sys.executable, "-m", "celery", "-A", "claimline", "worker", "--loglevel", "INFO", "--concurrency", "1"]
    probe = Celery("probe", broker=url, set_as_current=False)  # the tests after this one keep the project's
    with running(args, worker_env(REDIS_URL=url), log) as worker:
        with redis_server(port, tmp_path):
            wait_for(lambda: "ready." in log.read_text(), "the worker", worker, timeout=60)
        time.sleep(3)  # Redis down: the worker keeps trying to reconnect
        assert worker.poll() is None, log.read_text()
        with redis_server(port, tmp_path):
            wait_for(lambda: log.read_text().count("Connected to redis") >= 2, "the reconnection", worker, timeout=60)
            probe.send_task("collector.tasks.prune_history")
            wait_for(lambda: "collector.tasks.prune_history" in log.read_text() and "succeeded" in log.read_text(),
                     "the task sent after the restart", worker, timeout=60)
            assert worker.poll() is None
