"""Collecting and importing the 1.37 kinds: Workloads and PodGroups (scheduling.k8s.io/v1beta1, v1alpha3 where
that is all a cluster serves) and DeviceTaintRules (resource.k8s.io/v1), with the same change-only history; a
cluster that serves none of them is a cluster without them, not a failed collection."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command

from collector.collect import collect
from collector.dumps import parse_dump_files
from collector.kube import ClusterReader, api_client_for
from collector.models import ObjectVersion, Snapshot
from collector.sources import ClusterSource
from demo import builders as b
from demo.fake_apiserver import FakeApiServer, FakeCluster
from tests.clusters import T0, small_cluster
from tests.watching import Clock, settle, watching

pytestmark = pytest.mark.django_db

CREATED = T0 - timedelta(hours=1)


def gang_objects() -> list[dict[str, Any]]:
    """small_cluster plus a Workload, its gang's PodGroup, a member without claims and a taint rule."""
    group = b.pod_group("team-a", "trainers-0", CREATED, 2, workload=("trainers", "workers"))
    member = b.pod("team-a", "trainer-0", CREATED, claims=(), pod_group="trainers-0")
    rule = b.device_taint_rule(
        "drain-gpu-3", b.taint("example.com/maintenance", "NoExecute", "true"), CREATED, pool="worker-1", device="gpu-3"
    )
    workload = b.workload("team-a", "trainers", CREATED, [("workers", 2)], controller=("Job", "trainers"))
    return [*small_cluster(), workload, group, member, rule]


def serve(objects: list[dict[str, Any]], tmp_path: Path, served: dict[str, str | None] | None = None) -> FakeApiServer:
    server = FakeApiServer(FakeCluster([objects]), served=served)
    server.start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    return server


@pytest.fixture
def servers() -> Iterator[list[FakeApiServer]]:
    started: list[FakeApiServer] = []
    yield started
    for server in started:
        server.stop()


def collect_from(tmp_path: Path, hours: int = 0) -> Snapshot:
    source = ClusterSource("test", "kubeconfig", str(tmp_path / "kubeconfig"))
    reader = ClusterReader(api_client_for(source), page_size=2, timeout=2.0, max_retries=1, sleep=lambda _s: None)
    return collect(source, T0 + timedelta(hours=hours), lambda: T0 + timedelta(hours=hours, minutes=1), reader=reader)


def live(kind: str) -> dict[str, dict[str, Any]]:
    rows = ObjectVersion.objects.filter(kind=kind, valid_to__isnull=True, deleted=False).values_list("name", "content")
    return {name: orjson.loads(content) for name, content in rows}


def test_new_kinds_are_collected_with_change_only_history(tmp_path: Path, servers: list[FakeApiServer]) -> None:
    servers.append(serve(gang_objects(), tmp_path))
    snapshot = collect_from(tmp_path)
    assert snapshot.status == "ok", snapshot.error
    assert set(live("PodGroup")) == {"trainers-0"}
    assert set(live("Workload")) == {"trainers"}
    rule = live("DeviceTaintRule")["drain-gpu-3"]
    assert rule["apiVersion"] == "resource.k8s.io/v1"
    assert rule["spec"]["deviceSelector"] == {"driver": b.GPU_DRIVER, "pool": "worker-1", "device": "gpu-3"}
    # A gang member is kept though it uses no claim: it counts toward its group's minCount.
    assert "trainer-0" in live("Pod")
    again = collect_from(tmp_path, hours=1)
    assert (again.status, again.versions_written, again.deletions) == ("ok", 0, 0)


def test_podgroups_served_only_as_v1alpha3_are_stored_as_served(tmp_path: Path, servers: list[FakeApiServer]) -> None:
    alpha = "scheduling.k8s.io/v1alpha3"
    objects = [
        {**o, "apiVersion": alpha} if o["kind"] in ("PodGroup", "Workload") else o for o in gang_objects()
    ]
    servers.append(serve(objects, tmp_path, served={"PodGroup": alpha, "Workload": alpha}))
    snapshot = collect_from(tmp_path)
    assert snapshot.status == "ok", snapshot.error
    assert live("PodGroup")["trainers-0"]["apiVersion"] == alpha
    assert live("PodGroup")["trainers-0"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    requests = [p for _m, p, _q in servers[0].requests]
    assert "/apis/scheduling.k8s.io/v1beta1/podgroups" in requests  # the newest version is asked first
    assert "/apis/scheduling.k8s.io/v1alpha3/podgroups" in requests


def test_a_cluster_without_the_new_apis_collects_without_them(tmp_path: Path, servers: list[FakeApiServer]) -> None:
    servers.append(serve(gang_objects(), tmp_path))
    assert collect_from(tmp_path).status == "ok"
    servers.pop().stop()
    # The same cluster after the features were turned off: 404 on every version of the three kinds.
    servers.append(serve(gang_objects(), tmp_path, served={"PodGroup": None, "Workload": None, "DeviceTaintRule": None}))
    snapshot = collect_from(tmp_path, hours=1)
    assert snapshot.status == "ok", snapshot.error  # not failed, not partial
    assert snapshot.deletions == 3  # the Workload, the PodGroup and the rule are gone with their API
    assert live("PodGroup") == live("Workload") == live("DeviceTaintRule") == {}
    assert "trainer-0" in live("Pod")


def test_a_404_for_a_required_kind_still_fails(tmp_path: Path, servers: list[FakeApiServer]) -> None:
    servers.append(serve(gang_objects(), tmp_path, served={"ResourceSlice": None}))
    snapshot = collect_from(tmp_path)
    assert snapshot.status == "failed"
    assert "does not serve resource.k8s.io/v1 resourceslices" in snapshot.error


def test_import_snapshot_reads_the_new_kinds(tmp_path: Path) -> None:
    dump = tmp_path / "gang.json"
    dump.write_bytes(b.dump_json(gang_objects()))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat())
    assert set(live("PodGroup")) == {"trainers-0"}
    assert set(live("DeviceTaintRule")) == {"drain-gpu-3"}
    assert "trainer-0" in live("Pod")


def test_a_typed_v1alpha3_podgroup_list_keeps_its_version(tmp_path: Path) -> None:
    group = b.pod_group("team-a", "g", CREATED, 4, api_version="scheduling.k8s.io/v1alpha3")
    item = {k: v for k, v in group.items() if k not in ("kind", "apiVersion")}
    dump = tmp_path / "groups.json"
    dump.write_bytes(orjson.dumps({"kind": "PodGroupList", "apiVersion": "scheduling.k8s.io/v1alpha3", "items": [item]}))
    (parsed,) = parse_dump_files([dump]).objects
    assert orjson.loads(parsed.content)["apiVersion"] == "scheduling.k8s.io/v1alpha3"


def test_a_podgroup_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    group = b.pod_group("team-a", "g", CREATED, 4, api_version="scheduling.k8s.io/v2")
    dump = tmp_path / "groups.json"
    dump.write_bytes(b.dump_json([group]))
    with pytest.raises(ValueError, match="Claimline reads PodGroup scheduling.k8s.io/v1beta1 or"):
        parse_dump_files([dump])


def test_the_watcher_follows_each_kind_at_the_version_served_and_none_where_none_is(
    tmp_path: Path, servers: list[FakeApiServer]
) -> None:
    alpha = "scheduling.k8s.io/v1alpha3"
    objects = [{**o, "apiVersion": alpha} if o["kind"] in ("PodGroup", "Workload") else o for o in gang_objects()]
    group = next(o for o in objects if o["kind"] == "PodGroup")
    relabelled = {**group, "metadata": {**group["metadata"], "labels": {"changed": "yes"}}}
    later = [relabelled if o is group else o for o in objects]
    server = FakeApiServer(
        FakeCluster([objects, later]), served={"PodGroup": alpha, "Workload": alpha, "DeviceTaintRule": None}
    )
    server.start()
    servers.append(server)
    clock = Clock(T0)
    with watching(server, tmp_path, clock) as watcher:
        settle(watcher, server)
        assert watcher.synced and not watcher.failing  # the rule's 404 on every version is "none", not a failure
        snapshot = Snapshot.objects.order_by("-at").first()  # the first batch: the cluster as listed
        server.cluster.advance()  # a change to the alpha PodGroup arrives through the watch of the version served
        clock.now = T0 + timedelta(minutes=1)
        settle(watcher, server)
        changed = watcher.flush()
    assert snapshot is not None and snapshot.status == "ok", snapshot
    assert changed is not None and changed.versions_written == 1
    assert live("PodGroup")["trainers-0"]["apiVersion"] == alpha
    assert live("PodGroup")["trainers-0"]["metadata"]["labels"] == {"changed": "yes"}
    assert live("DeviceTaintRule") == {}
    watched = [p for _m, p, q in server.requests if q.get("watch")]
    assert "/apis/scheduling.k8s.io/v1alpha3/podgroups" in watched
    # Each of the rule's versions asked once, then let be until the next look (minutes later).
    assert [p for p in watched if p.endswith("/devicetaintrules")] == [
        "/apis/resource.k8s.io/v1/devicetaintrules",
        "/apis/resource.k8s.io/v1beta2/devicetaintrules",
        "/apis/resource.k8s.io/v1alpha3/devicetaintrules",
    ]
