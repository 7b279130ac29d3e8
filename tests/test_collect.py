"""Collection through the official client against the fake API server, with faults."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import orjson
import pytest

from collector.collect import collect
from collector.models import ObjectVersion, Snapshot
from collector.sources import ClusterSource
from demo.fake_apiserver import FakeApiServer, Fault
from tests.clusters import T0, small_cluster

pytestmark = pytest.mark.django_db

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
PODS = "/api/v1/pods"


def clock() -> Any:
    return T0 + timedelta(hours=1)


def run(source: ClusterSource, reader: Any, hours: int = 0) -> Snapshot:
    return collect(source, T0 + timedelta(hours=hours), clock, reader=reader)


def stored_state() -> set[tuple[str, str, str]]:
    return set(
        ObjectVersion.objects.filter(valid_to__isnull=True, deleted=False).values_list("kind", "uid", "content_hash")
    )


def test_collection_pages_through_every_kind(source: ClusterSource, make_reader: Any, fake_api: FakeApiServer) -> None:
    snapshot = run(source, make_reader(page_size=2))
    assert snapshot.status == "ok", snapshot.error
    expected = [o for o in small_cluster() if not (o["kind"] == "Pod" and o["metadata"]["name"] == "web")]
    assert snapshot.objects_seen == snapshot.versions_written == len(expected)
    kinds = {k for k, _u, _h in stored_state()}
    assert kinds == {"DeviceClass", "Namespace", "Node", "ResourceSlice", "Pod", "ResourceClaim", "Event"}
    assert any("continue" in q for _m, p, q in fake_api.requests if p == PODS)
    # Unchanged cluster: nothing new.
    again = run(source, make_reader(page_size=2), hours=1)
    assert (again.status, again.versions_written, again.deletions) == ("ok", 0, 0)


def test_pod_without_claims_is_not_stored(source: ClusterSource, make_reader: Any) -> None:
    run(source, make_reader())
    assert not ObjectVersion.objects.filter(kind="Pod", name="web").exists()


def test_expired_continue_token_restarts_the_list(source: ClusterSource, make_reader: Any, fake_api: FakeApiServer) -> None:
    fake_api.inject(Fault(status=410, path=PODS, on_continue=True))
    snapshot = run(source, make_reader(page_size=2))
    assert snapshot.status == "ok", snapshot.error
    pod_firsts = [q for _m, p, q in fake_api.requests if p == PODS and "continue" not in q]
    assert len(pod_firsts) == 2  # the list started over
    assert snapshot.objects_seen == len(small_cluster()) - 1


def test_429_is_retried_after_retry_after(source: ClusterSource, make_reader: Any, fake_api: FakeApiServer) -> None:
    waits: list[float] = []
    fake_api.inject(Fault(status=429, retry_after=7, path=SLICES))
    reader = make_reader()
    reader.sleep = waits.append
    assert run(source, reader).status == "ok"
    assert waits == [7.0]


def _seed(source: ClusterSource, make_reader: Any) -> set[tuple[str, str, str]]:
    assert run(source, make_reader()).status == "ok"
    return stored_state()


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (Fault(status=500, path=CLAIMS, times=-1), "answered 500"),
        (Fault(status=503, path=SLICES, times=-1), "answered 503"),
        (Fault(status=429, path=PODS, times=-1), "answered 429"),
        (Fault(status=410, path=PODS, on_continue=True, times=-1), "continue token expired"),
        (Fault(status=403, path=CLAIMS), "forbidden (403): the account may not list resourceclaims.resource.k8s.io"),
        (Fault(status=401, path=PODS), "unauthorized (401)"),
        (Fault(status=404, path=SLICES), "does not serve resource.k8s.io/v1 resourceslices"),
        (Fault(delay=1.5, path=CLAIMS, times=-1), "timed out after 0.5s"),
        (Fault(truncate=True, path=PODS, times=-1), "not valid JSON"),
        (Fault(body=b'{"kind": "PodList", "items": 7}', path=PODS, times=-1), "not a Kubernetes list"),
    ],
    ids=["500", "503", "429", "410", "403", "401", "404", "timeout", "truncated", "wrong-shape"],
)
def test_failed_collection_is_recorded_and_loses_nothing(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer, fault: Fault, message: str
) -> None:
    before = _seed(source, make_reader)
    versions_before = ObjectVersion.objects.count()
    # The cluster lost a claim meanwhile: a failed run must not record that.
    fake_api.cluster.replace_stage(0, [o for o in small_cluster() if o["kind"] != "ResourceClaim"])
    fake_api.inject(fault)
    snapshot = run(source, make_reader(page_size=2, timeout=0.5), hours=1)
    assert snapshot.status == "failed"
    assert message in snapshot.error
    assert (snapshot.versions_written, snapshot.deletions) == (0, 0)
    assert ObjectVersion.objects.count() == versions_before
    assert stored_state() == before
    # And the next run, with the fault gone, succeeds.
    fake_api.clear_faults()
    after = run(source, make_reader(), hours=2)
    assert after.status == "ok"
    assert after.deletions == sum(o["kind"] == "ResourceClaim" for o in small_cluster())


def test_unreachable_api_server_is_a_clear_failure(source: ClusterSource, make_reader: Any, fake_api: FakeApiServer) -> None:
    reader = make_reader()
    fake_api.stop()
    snapshot = run(source, reader)
    assert snapshot.status == "failed"
    assert "cannot connect to the API server" in snapshot.error


def test_object_missing_fields_is_reported_and_its_kind_not_deleted(
    source: ClusterSource, make_reader: Any, fake_api: FakeApiServer
) -> None:
    before = _seed(source, make_reader)
    objects = small_cluster()
    claims = [o for o in objects if o["kind"] == "ResourceClaim"]
    broken = copy.deepcopy(claims[0])
    del broken["metadata"]["uid"]
    # One claim arrives without a UID and another is really gone: neither may be recorded as deleted.
    fake_api.cluster.replace_stage(0, [o for o in objects if o["kind"] != "ResourceClaim"] + [broken, claims[2]])
    snapshot = run(source, make_reader(), hours=1)
    assert snapshot.status == "partial"
    assert "ResourceClaim item" in snapshot.error and "metadata.uid is missing" in snapshot.error
    assert snapshot.deletions == 0
    assert stored_state() == before


def test_wrongly_typed_fields_are_reported(source: ClusterSource, make_reader: Any, fake_api: FakeApiServer) -> None:
    objects = small_cluster()
    node = next(o for o in objects if o["kind"] == "Node")
    node["status"] = "Ready"
    fake_api.cluster.replace_stage(0, objects)
    snapshot = run(source, make_reader())
    assert snapshot.status == "partial"
    assert "status is not an object" in snapshot.error
    assert "Node" in {k for k, _u, _h in stored_state()}  # the other node is stored
    assert snapshot.deletions == 0


def test_one_percent_churn_writes_only_what_changed(source: ClusterSource, make_reader: Any, fake_api: FakeApiServer) -> None:
    run(source, make_reader())
    objects = small_cluster()
    pod = next(o for o in objects if o["kind"] == "Pod")
    pod["status"]["containerStatuses"][0]["restartCount"] = 1
    fake_api.cluster.replace_stage(0, objects)
    snapshot = run(source, make_reader(), hours=1)
    assert (snapshot.versions_written, snapshot.deletions) == (1, 0)
    stored = orjson.loads(ObjectVersion.objects.get(uid=pod["metadata"]["uid"], valid_to__isnull=True).content)
    assert stored["status"]["containerStatuses"][0]["restartCount"] == 1
