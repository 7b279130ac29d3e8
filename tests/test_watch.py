"""List once, then watch: the collector's watches against the fake API server, into history."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from collector.collect import collect
from collector.kinds import RESOURCE_TYPES
from collector.kube import ClusterReader, api_client_for
from collector.models import ObjectVersion, Snapshot
from collector.sources import ClusterSource
from demo.fake_apiserver import FakeApiServer, FakeCluster, Fault
from tests.clusters import T0, small_cluster
from tests.watching import Clock, make_watcher, settle, wait_for, watching

pytestmark = pytest.mark.django_db

PODS = "/api/v1/pods"


def churned() -> list[dict[str, Any]]:
    """small_cluster an hour on: train-0 restarted, train-2 and its claim gone, a new Pod and claim."""
    objects = [o for o in small_cluster() if o["metadata"]["name"] not in ("train-2", "train-2-gpu")]
    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "train-0")
    pod["status"]["containerStatuses"][0]["restartCount"] = 1
    extra = copy.deepcopy([o for o in small_cluster(pods=4) if o["metadata"]["name"] in ("train-3", "train-3-gpu")])
    return objects + extra


@pytest.fixture
def server() -> Any:
    fake = FakeApiServer(FakeCluster([small_cluster(), churned()]), bookmark_interval=0.05)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def heads(cluster: str) -> set[tuple[str, str, str, bool]]:
    return set(
        ObjectVersion.objects.filter(cluster__name=cluster, valid_to__isnull=True)
        .values_list("kind", "uid", "content_hash", "deleted")
    )


def versions(cluster: str) -> set[tuple[Any, ...]]:
    return set(
        ObjectVersion.objects.filter(cluster__name=cluster).values_list(
            "kind", "uid", "content_hash", "deleted", "valid_from", "valid_to"
        )
    )


def poll(server: FakeApiServer, tmp_path: Path, at: Any, name: str = "polled") -> Snapshot:
    path = tmp_path / f"kubeconfig-{name}"
    server.write_kubeconfig(path)
    source = ClusterSource(name, "kubeconfig", str(path))
    reader = ClusterReader(api_client_for(source), page_size=3, sleep=lambda _s: None)
    return collect(source, at, lambda: at, reader=reader)


def test_the_first_batch_stores_what_a_collection_stores(server: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock(T0)
    watcher = make_watcher(server, tmp_path, clock)
    watcher.start()
    try:
        settle(watcher, server)
        snapshot = watcher.flush()
    finally:
        watcher.stop()
    assert snapshot is not None and snapshot.status == "ok" and snapshot.at == T0
    assert snapshot.source.startswith("watch ")
    # a streaming list: no plain list request at all, one watch per kind with sendInitialEvents
    paths = {rt.list_path for rt in RESOURCE_TYPES}
    assert [p for _m, p, q in server.requests if p in paths and q.get("watch") != "1"] == []
    watches = [q for _m, p, q in server.requests if p in paths]
    assert len(watches) == len(RESOURCE_TYPES) and {q.get("sendInitialEvents") for q in watches} == {"true"}
    poll(server, tmp_path, T0)
    assert versions("watched") == versions("polled")
    assert snapshot.objects_seen == Snapshot.objects.get(cluster__name="polled").objects_seen


def test_changes_are_valid_from_their_arrival(server: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock(T0)
    with watching(server, tmp_path, clock) as watcher:
        clock.now = T0 + timedelta(minutes=7)
        server.cluster.advance()
        settle(watcher, server)
        clock.now = T0 + timedelta(minutes=8)  # the batch is written later: versions keep their arrival
        snapshot = watcher.flush()
    assert snapshot is not None and snapshot.at == T0 + timedelta(minutes=7)
    assert (snapshot.versions_written, snapshot.deletions) == (3, 3)  # train-0, train-3 and its claim; train-2...
    written = ObjectVersion.objects.filter(snapshot=snapshot)
    assert {v.valid_from for v in written} == {T0 + timedelta(minutes=7)}
    assert {(v.kind, v.name) for v in written if v.deleted} >= {("Pod", "train-2"), ("ResourceClaim", "train-2-gpu")}
    # the same as a collection of each state at the same instants
    server.cluster.set_stage(0)
    poll(server, tmp_path, T0)
    server.cluster.set_stage(1)
    poll(server, tmp_path, T0 + timedelta(minutes=7))
    assert versions("watched") == versions("polled")


def test_a_restart_stores_what_changed_meanwhile_and_nothing_twice(server: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock(T0)
    first = make_watcher(server, tmp_path, clock)
    first.start()
    settle(first, server)
    first.flush()
    first.stop()
    before = ObjectVersion.objects.count()
    # unchanged cluster: a restart writes nothing
    again = make_watcher(server, tmp_path, clock)
    again.start()
    settle(again, server)
    assert again.flush() is None
    again.stop()
    assert ObjectVersion.objects.count() == before
    # changed while nobody watched: stored as of the restart's lists, deletions included
    server.cluster.advance()
    clock.now = T0 + timedelta(hours=1)
    third = make_watcher(server, tmp_path, clock)
    third.start()
    settle(third, server)
    snapshot = third.flush()
    third.stop()
    assert snapshot is not None and (snapshot.versions_written, snapshot.deletions) == (3, 3)
    server.cluster.set_stage(0)
    poll(server, tmp_path, T0)
    server.cluster.set_stage(1)
    poll(server, tmp_path, T0 + timedelta(hours=1))
    assert heads("watched") == heads("polled")


def test_410_after_a_drop_lists_again_and_records_deletions_at_the_relist(
    server: FakeApiServer, tmp_path: Path
) -> None:
    clock = Clock(T0)
    with watching(server, tmp_path, clock) as watcher:
        # the watches break and cannot come back for a while; meanwhile the cluster changes and
        # etcd compacts its history, so their resourceVersions are gone
        server.inject(Fault(status=503, watch=True, times=-1))
        server.drop_watches()
        wait_for(lambda: bool(watcher.failing), watcher)
        clock.now = T0 + timedelta(minutes=3)
        server.cluster.advance()
        server.cluster.compact()
        clock.now = T0 + timedelta(minutes=5)
        server.clear_faults()
        settle(watcher, server)
        snapshot = watcher.flush()
    assert snapshot is not None
    gone = ObjectVersion.objects.filter(snapshot=snapshot, deleted=True)
    assert {v.name for v in gone} >= {"train-2", "train-2-gpu"}
    assert {v.valid_from for v in gone} == {T0 + timedelta(minutes=5)}  # never earlier than the relist
    initial = [q for _m, _p, q in server.requests if q.get("sendInitialEvents") == "true"]
    assert len(initial) == 2 * len(RESOURCE_TYPES)  # each kind listed twice: at the start and after its 410
    assert not watcher.failing


def test_a_dropped_watch_resumes_where_it_was_without_listing(server: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock(T0)
    with watching(server, tmp_path, clock) as watcher:
        server.drop_watches()
        server.cluster.advance()
        clock.now = T0 + timedelta(minutes=1)
        settle(watcher, server)
        snapshot = watcher.flush()
    assert snapshot is not None and (snapshot.versions_written, snapshot.deletions) == (3, 3)
    initial = [q for _m, _p, q in server.requests if q.get("sendInitialEvents") == "true"]
    assert len(initial) == len(RESOURCE_TYPES)
    resumed = [q for _m, _p, q in server.requests if q.get("watch") == "1" and q.get("resourceVersion")]
    assert resumed and all(int(q["resourceVersion"]) > 1 for q in resumed)


def test_without_the_streaming_list_kinds_are_listed_page_by_page(tmp_path: Path) -> None:
    fake = FakeApiServer(FakeCluster([small_cluster(), churned()]), bookmark_interval=0.05, watch_list=False)
    fake.start()
    try:
        clock = Clock(T0)
        watcher = make_watcher(fake, tmp_path, clock)
        watcher.start()
        settle(watcher, fake)
        watcher.flush()
        fake.cluster.advance()
        clock.now = T0 + timedelta(minutes=2)
        settle(watcher, fake)
        snapshot = watcher.flush()
        watcher.stop()
        assert watcher.streaming is False
        assert snapshot is not None and (snapshot.versions_written, snapshot.deletions) == (3, 3)
        lists = [q for _m, p, q in fake.requests if p == PODS and q.get("watch") != "1"]
        assert lists and any("continue" in q for q in lists)  # paged (page size 3)
        fake.cluster.set_stage(0)
        poll(fake, tmp_path, T0)
        fake.cluster.set_stage(1)
        poll(fake, tmp_path, T0 + timedelta(minutes=2))
        assert heads("watched") == heads("polled")
    finally:
        fake.stop()


def test_errors_back_off_and_a_lasting_failure_is_recorded(server: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock(T0)
    with watching(server, tmp_path, clock, checkpoint=0.2) as watcher:
        server.inject(Fault(status=500, path=PODS, watch=True, times=-1))
        server.drop_watches()
        clock.now = T0 + timedelta(minutes=1)
        wait_for(lambda: "answered 500" in watcher.failing.get("Pod", ""), watcher)
        wait_for(lambda: Snapshot.objects.filter(status="failed").exists(), watcher, step=True)
        failed = Snapshot.objects.filter(status="failed").order_by("at").first()  # more may follow while slow
        assert failed is not None and "Pod: watching pods: API server answered 500" in failed.error

        def retries() -> int:
            return len([q for _m, p, q in server.requests if p == PODS and q.get("watch") == "1"])

        wait_for(lambda: retries() >= 3, watcher)  # backing off, not giving up (slower on a loaded machine)
        server.clear_faults()
        wait_for(lambda: not watcher.failing, watcher)
        wait_for(lambda: watcher.step() is not None, watcher)  # healthy again: a checkpoint
        checkpoint = Snapshot.objects.filter(status="ok").order_by("-at").first()
        assert checkpoint is not None and checkpoint.versions_written == checkpoint.deletions == 0


def test_stopping_stores_what_arrived(server: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock(T0)
    watcher = make_watcher(server, tmp_path, clock)
    watcher.start()
    settle(watcher, server)
    watcher.flush()
    clock.now = T0 + timedelta(seconds=30)
    server.cluster.advance()
    settle(watcher, server)
    snapshot = watcher.stop()
    assert snapshot is not None and snapshot.versions_written == 3
    assert not any(s.is_alive() for s in watcher._streams)
