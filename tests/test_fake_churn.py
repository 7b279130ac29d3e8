"""The fake API server's churn: objects changed in place (``FakeCluster.apply_objects``), and a schedule
of such changes played over time (``demo.fake_churn``), each with when it became visible."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from demo.fake_apiserver import FakeCluster
from demo.fake_churn import ChurnPlayer


def pod(name: str, uid: str, image: str = "busybox") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "team-a", "name": name, "uid": uid},
        "spec": {"containers": [{"name": "main", "image": image}]},
    }


def live_pods(cluster: FakeCluster) -> dict[str, tuple[str, str]]:
    _stage, _rv, index = cluster.snapshot()
    return {e.name: (e.uid, e.obj["spec"]["containers"][0]["image"]) for e in index["pods"]}


def test_objects_are_added_changed_replaced_and_deleted_in_place() -> None:
    cluster = FakeCluster([[pod("a", "u-a"), pod("b", "u-b"), pod("c", "u-c")]])
    start = int(cluster.resource_version)
    changes = cluster.apply_objects(
        [pod("a", "u-a", "nginx"), pod("b", "u-b2"), pod("c", "u-c"), pod("d", "u-d")], [("Pod", "team-a", "c")]
    )
    # c's delete wins over its unchanged copy being told again; b under a new UID is a delete and an add
    assert [(c.type, c.new.name, c.new.uid) for c in changes] == [
        ("DELETED", "c", "u-c"), ("MODIFIED", "a", "u-a"), ("DELETED", "b", "u-b"), ("ADDED", "b", "u-b2"),
        ("ADDED", "d", "u-d"),
    ]
    assert [c.rv for c in changes] == list(range(start + 1, start + 6))
    assert live_pods(cluster) == {"a": ("u-a", "nginx"), "b": ("u-b2", "busybox"), "d": ("u-d", "busybox")}
    seen, rv = cluster.changes_after(start)
    assert [c.rv for c in seen] == [c.rv for c in changes] and rv == changes[-1].rv
    # telling the same objects again changes nothing but the resourceVersion
    assert cluster.apply_objects([pod("a", "u-a", "nginx")], []) == []
    assert int(cluster.resource_version) == changes[-1].rv + 1


def test_a_schedule_is_played_over_time_with_each_change_timed(tmp_path: Path) -> None:
    cluster = FakeCluster([[pod("a", "u-a")]])
    schedule = tmp_path / "churn.json"
    schedule.write_bytes(orjson.dumps({"steps": [
        {"at": 0.4, "upserts": [pod("b", "u-b")]},
        {"at": 0, "upserts": [pod("a", "u-a", "nginx")], "deletes": []},
        {"at": 0.8, "deletes": [["Pod", "team-a", "a"]]},
    ]}))
    player = ChurnPlayer.from_file(cluster, str(schedule))
    began = time.time()
    player.start()
    deadline = time.monotonic() + 10
    while player.report()["applied"] < 3:
        assert time.monotonic() < deadline, "the schedule was not played"
        time.sleep(0.05)
    report = player.report()
    assert [(kind, uid, kind_of) for kind, uid, kind_of, _rv, _when in report["changes"]] == [
        ("Pod", "u-a", "MODIFIED"), ("Pod", "u-b", "ADDED"), ("Pod", "u-a", "DELETED"),
    ]
    times = [when - began for *_rest, when in report["changes"]]
    assert times[0] < 0.35 and 0.35 <= times[1] < 0.75 and times[2] >= 0.75
    assert live_pods(cluster) == {"b": ("u-b", "busybox")}


def test_a_schedule_that_is_not_one_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"steps": [1, 2]}')
    with pytest.raises(ValueError, match="a churn schedule is"):
        ChurnPlayer.from_file(FakeCluster([[pod("a", "u-a")]]), str(bad))


def test_a_paged_list_goes_on_as_of_its_start_across_in_place_changes_not_across_stages() -> None:
    import urllib.error
    import urllib.request

    from demo.fake_apiserver import FakeApiServer

    cluster = FakeCluster([[pod("a", "u-a"), pod("b", "u-b")], [pod("a", "u-a")]])
    server = FakeApiServer(cluster, token=None)
    server.start()

    def page(token: str = "") -> dict[str, Any]:
        query = "limit=1" + (f"&continue={token}" if token else "")
        with urllib.request.urlopen(f"{server.url}/api/v1/pods?{query}", timeout=10) as resp:  # noqa: S310
            return dict(orjson.loads(resp.read()))

    try:
        first = page()
        cluster.apply_objects([pod("b", "u-b", "nginx"), pod("c", "u-c")], [])  # the cluster moves on meanwhile
        second = page(first["metadata"]["continue"])
        # the rest of the list as of its start: b unchanged, no c (kube-apiserver serves it from etcd's past)
        assert [i["metadata"]["name"] for i in first["items"] + second["items"]] == ["a", "b"]
        assert second["items"][0]["spec"]["containers"][0]["image"] == "busybox"
        assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        token = page()["metadata"]["continue"]
        cluster.set_stage(1)
        with pytest.raises(urllib.error.HTTPError) as gone:
            page(token)
        assert gone.value.code == 410
    finally:
        server.stop()
