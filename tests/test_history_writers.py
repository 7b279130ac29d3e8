"""Writers of a cluster's history (collections, imports) and what must not stop them: a snapshot from the
future, two writers at once, a scheduler round that raises, the database lost mid-write, a dump naming one
object twice."""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from claimline import scheduler
from claimline.tasks import collect_cluster
from collector import history_writer as history
from collector.locks import HistoryLease
from collector.models import ObjectVersion, Snapshot, WriterLease
from collector.sources import ClusterSource
from demo import builders as b
from tests.clusters import T0, small_cluster
from tests.test_collect import run, stored_state
from tests.test_faults import admin_connection, database_refusing_connections, kill_backend_on_insert, wait_for


def dump(tmp_path: Path, objects: list[dict[str, Any]] | None = None, name: str = "a.json") -> str:
    path = tmp_path / name
    path.write_bytes(b.dump_json(small_cluster() if objects is None else objects))
    return str(path)


@pytest.fixture
def configured(source: ClusterSource) -> Iterator[ClusterSource]:
    """The fake API server's cluster ("test") as the only configured one."""
    with override_settings(CLAIMLINE_CLUSTERS=[source]):
        yield source


# --- a snapshot from the future -------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("ahead", [timedelta(days=365 * 73), timedelta(seconds=75)], ids=["2099", "75s"])
def test_an_import_from_the_future_is_refused(tmp_path: Path, ahead: timedelta) -> None:
    at = timezone.now() + ahead
    with pytest.raises(CommandError, match=r"nothing imported: --at .* in the future .*CLAIMLINE_CLOCK_SKEW=60s"):
        call_command("import-snapshot", dump(tmp_path), "--at", at.isoformat())
    assert not Snapshot.objects.exists()


@pytest.mark.django_db
def test_an_import_within_the_clock_skew_is_taken(tmp_path: Path) -> None:
    call_command("import-snapshot", dump(tmp_path), "--at", (timezone.now() + timedelta(seconds=30)).isoformat(),
                 stdout=StringIO())
    assert Snapshot.objects.get().status == "ok"
    with override_settings(CLAIMLINE_CLOCK_SKEW=0), pytest.raises(CommandError, match="in the future"):
        call_command("import-snapshot", dump(tmp_path), "--at", (timezone.now() + timedelta(minutes=1)).isoformat())


def scheduler_thread() -> threading.Thread:
    return next(t for t in threading.enumerate() if t.name == "claimline-scheduler")


@pytest.mark.django_db(transaction=True)
def test_the_scheduler_goes_on_through_collections_refused_by_a_later_snapshot(
    configured: ClusterSource, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An import a little ahead (within the skew) refuses collections until its time; the loop goes on."""
    ahead = timezone.now() + timedelta(seconds=3)
    call_command("import-snapshot", dump(tmp_path), "--at", ahead.isoformat(), "--cluster", "test", stdout=StringIO())
    caplog.set_level(logging.ERROR, "claimline.scheduler")
    stop = scheduler.start_in_background(["test"], 0.2, timezone.now)
    thread = scheduler_thread()
    try:
        wait_for(lambda: Snapshot.objects.filter(source__startswith="api", status="ok").exists(), "a collection")
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(10)
    refused = [r.getMessage() for r in caplog.records if "already has a snapshot" in r.getMessage()]
    assert refused and refused[0].startswith("collection of test failed: cluster test already has a snapshot at")
    collected = Snapshot.objects.get(source__startswith="api", status="ok")
    assert collected.at > ahead


def test_the_scheduler_loop_survives_whatever_a_round_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds: list[int] = []

    def collect_all(names: list[str], clock: Any) -> list[Any]:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise RuntimeError("a bug in the first round")
        return []

    monkeypatch.setattr(scheduler, "collect_all", collect_all)
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run_forever, args=(["test"], 0.01, timezone.now, stop))
    thread.start()
    try:
        wait_for(lambda: len(rounds) >= 3, "more rounds", timeout=5)
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(5)


# --- one writer at a time ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_import_waits_for_a_collection_of_its_cluster_and_then_gives_up(tmp_path: Path) -> None:
    collection = HistoryLease("demo", "collection")
    assert collection.acquire()
    started = time.monotonic()
    with pytest.raises(CommandError, match=r"nothing imported: collection \(.*pid .*\) since .* is writing the history"):
        call_command("import-snapshot", dump(tmp_path), "--at", T0.isoformat(), "--wait", "0.5")
    assert 0.5 <= time.monotonic() - started < 5
    assert not Snapshot.objects.exists()
    collection.release()
    call_command("import-snapshot", dump(tmp_path), "--at", T0.isoformat(), "--wait", "0", stdout=StringIO())
    assert Snapshot.objects.get().status == "ok"
    assert WriterLease.objects.get(cluster="demo").holder == ""  # freed by the import


@pytest.mark.django_db
def test_the_lease_of_a_writer_killed_mid_run_expires(tmp_path: Path) -> None:
    assert HistoryLease("demo", "collection").acquire()  # never released: the process died
    WriterLease.objects.filter(cluster="demo").update(expires=timezone.now() - timedelta(seconds=1))
    call_command("import-snapshot", dump(tmp_path), "--at", T0.isoformat(), "--wait", "0", stdout=StringIO())
    assert Snapshot.objects.get().status == "ok"


@pytest.mark.django_db(transaction=True)  # the scheduler closes connections between clusters
def test_a_collection_is_skipped_while_an_import_writes(configured: ClusterSource) -> None:
    importing = HistoryLease("test", "import a.json")
    assert importing.acquire()
    try:
        assert collect_cluster.run("test") == "skipped"
        [outcome] = scheduler.collect_all(["test"], timezone.now)
        assert outcome.snapshot is None and "import a.json" in outcome.skipped
        assert not Snapshot.objects.exists()
    finally:
        importing.release()
    [outcome] = scheduler.collect_all(["test"], timezone.now)
    assert outcome.snapshot is not None and outcome.snapshot.status == "ok"


@pytest.mark.django_db
def test_a_collection_overtaken_by_a_later_snapshot_stores_nothing(
    source: ClusterSource, make_reader: Any, tmp_path: Path
) -> None:
    """Should a lease lapse, history still only moves forward: the write itself checks."""
    assert run(source, make_reader()).status == "ok"
    before = stored_state()
    reader = make_reader()
    read = reader.read

    def read_while_an_import_lands() -> Any:
        result = read()
        # A claim gone: a deletion the import records.
        objects = [o for o in small_cluster() if o["metadata"].get("name") != "train-0-gpu"]
        call_command("import-snapshot", dump(tmp_path, objects), "--at", (T0 + timedelta(hours=2)).isoformat(),
                     "--cluster", "test", stdout=StringIO())
        return result

    reader.read = read_while_an_import_lands  # type: ignore[method-assign]
    overtaken = run(source, reader, hours=1)
    assert overtaken.status == "failed"
    assert overtaken.error.startswith("not stored: cluster test already has a snapshot at 2026-11-20T14:00:00")
    assert not ObjectVersion.objects.filter(snapshot=overtaken).exists()
    assert stored_state() < before  # what the import stored (the claim deleted), nothing of the overtaken run


# --- collect --once when the database dies ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_collect_once_fails_when_the_database_dies_mid_write(
    configured: ClusterSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import connection

    monkeypatch.setattr(history, "BATCH", 1)
    out, err = StringIO(), StringIO()
    with admin_connection() as admin:
        killer = connection.execute_wrapper(kill_backend_on_insert(admin, nth=2))
        with pytest.raises(SystemExit) as exit_, killer, database_refusing_connections(admin):
            call_command("collect", "--once", "--cluster", "test", stdout=out, stderr=err)
    assert exit_.value.code == 1
    assert "test: failed: OperationalError:" in err.getvalue(), err.getvalue()
    connection.close()


# --- a dump naming one object twice ------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_dump_with_two_objects_of_one_uid_is_refused_naming_both(tmp_path: Path) -> None:
    objects = small_cluster()
    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    twin = copy.deepcopy(claim)
    twin["metadata"]["name"] = "other"
    uid = claim["metadata"]["uid"]
    first = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
    with pytest.raises(
        CommandError,
        match=rf"nothing imported: two ResourceClaim objects with uid {uid}: .*a\.json: item \d+ \({first}\) and "
        rf".*a\.json: item \d+ \({claim['metadata']['namespace']}/other\); a dump holds each object once",
    ):
        call_command("import-snapshot", dump(tmp_path, [*objects, twin]), "--at", T0.isoformat())
    # Across two files as well, the same object twice included.
    with pytest.raises(CommandError, match=rf"two ResourceClaim objects with uid {uid}: .*a\.json: item \d+ .* and "
                                           rf".*b\.json: item 0 \({first}\)"):
        call_command("import-snapshot", dump(tmp_path), dump(tmp_path, [claim], "b.json"), "--at", T0.isoformat())
    assert not Snapshot.objects.exists()
