"""Pods asking for a DeviceClass's extended resource (``nvidia.com/gpu: 2``) served by DRA, end to end.

Each situation is a dump built with demo.builders, imported with ``import-snapshot``
and explained with ``explain --json``; each has a healthy look-alike.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from claimline.pipeline import collect_and_derive
from collector.management.commands._clusters import default_cluster_name
from collector.models import ObjectVersion
from collector.sources import ClusterSource
from demo import builders as b
from demo.fake_apiserver import FakeApiServer, FakeCluster
from domain.cluster.extended_resources import resource_classes
from domain.cluster.state import MemoryHistory
from domain.reports.metrics import render_metrics
from tests.clusters import cli_json_over

pytestmark = pytest.mark.django_db

NS = "ml"
NODE = "gpu-node-0"
GPU = "nvidia.com/gpu"
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CREATED = T0 - timedelta(days=30)
POD_CREATED = T0 - timedelta(minutes=10)
# Container main requests cpu, memory and nvidia.com/gpu: sorted, the GPU is its third request.
REQUEST = "container-0-request-2"

Obj = dict[str, Any]


def base(gpus: int = 2, extended_gpus: int = 0) -> list[Obj]:
    return [
        b.namespace(NS, created=CREATED),
        b.node(NODE, CREATED, heartbeat=T0, extended_gpus=extended_gpus),
        b.device_class(created=CREATED, extended_resource_name=GPU),
        b.resource_slice(NODE, b.gpu_devices(NODE, gpus), created=CREATED),
    ]


def gpu_pod(name: str = "trainer-0", resource: str = GPU, count: int = 2, **kwargs: Any) -> Obj:
    return b.with_extended_resources(b.pod(NS, name, POD_CREATED, claims=(), **kwargs), {resource: count})


def other_holder(device: str = "gpu-1") -> list[Obj]:
    """Another Pod's claim holding one GPU of the node."""
    other = b.pod(
        NS, "other-0", CREATED, claims=[("gpu", {"claim": "other-gpu"})], node_name=NODE, phase="Running",
        conditions=b.running_conditions(CREATED, CREATED), container_state=b.state_running(CREATED),
    )
    held = b.claim(NS, "other-gpu", [b.request()], CREATED, allocated=[("gpu", NODE, device)], reserved_for=[other])
    return [other, held]


def pending(pod_obj: Obj) -> Obj:
    return {**pod_obj, "status": {**pod_obj["status"], "conditions": [b.unschedulable(POD_CREATED, "0/1 nodes are available")]}}


def running_with_claim(devices: tuple[str, ...] = ("gpu-0", "gpu-1")) -> list[Obj]:
    """The scheduler created and allocated the claim, bound the Pod, and its container runs."""
    started = POD_CREATED + timedelta(minutes=1)
    p = gpu_pod(
        node_name=NODE, phase="Running", conditions=b.running_conditions(POD_CREATED, started),
        container_state=b.state_running(started),
    )
    c = b.extended_resource_claim(
        p, [b.request(REQUEST, count=len(devices))], POD_CREATED,
        allocated=[(REQUEST, NODE, d) for d in devices], reserved_for=[p],
    )
    p = b.with_extended_resource_claim_status(p, c["metadata"]["name"], [("main", GPU, REQUEST)])
    return [p, c]


def explain(tmp_path: Path, objects: list[Obj], pod: str, capsys: pytest.CaptureFixture[str]) -> Any:
    return cli_json_over(tmp_path, objects, T0, capsys, "explain", f"{NS}/{pod}")


def test_pending_pod_with_too_few_gpus_is_insufficient_devices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = explain(tmp_path, [*base(gpus=1), pending(gpu_pod())], "trainer-0", capsys)
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "insufficient-devices"), verdict
    assert "container main's nvidia.com/gpu: 2" in verdict["message"]
    assert "DeviceClass gpu.nvidia.com" in verdict["message"]
    assert "uses no resource claims" not in verdict["message"]
    [claim] = doc["claims"]
    assert claim["uid"] is None
    asks = [e for e in claim["boundaries"]["allocation"]["evidence"] if e["kind"] == "ExtendedResourceRequest"]
    assert asks == [
        {"kind": "ExtendedResourceRequest", "container": "main", "resource": GPU, "quantity": 2,
         "class": "gpu.nvidia.com", "request": REQUEST}
    ]


def test_pending_pod_whose_gpus_are_held_is_devices_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = explain(tmp_path, [*base(gpus=2), *other_holder(), pending(gpu_pod())], "trainer-0", capsys)
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "devices-in-use"), verdict
    assert "container main's nvidia.com/gpu: 2" in verdict["message"]
    assert f"{NS}/other-gpu" in verdict["message"]


def test_implicit_class_resource_is_judged_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    implicit = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    doc = explain(tmp_path, [*base(gpus=1), pending(gpu_pod(resource=implicit))], "trainer-0", capsys)
    verdict = doc["verdict"]
    assert verdict["reason"] == "insufficient-devices", verdict
    # Sorted among cpu and memory, the implicit name is the container's second request.
    assert f"container main's {implicit}: 2" in verdict["message"]
    assert "request container-0-request-1" in verdict["message"]


def test_pending_pod_that_fits_waits_for_the_scheduler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = explain(tmp_path, [*base(gpus=2), gpu_pod()], "trainer-0", capsys)
    verdict = doc["verdict"]
    assert verdict["reason"] == "waiting-for-scheduler", verdict
    assert "container main's nvidia.com/gpu: 2" in verdict["message"]
    assert "fit on gpu-node-0" in verdict["message"]


def test_running_pod_with_scheduler_created_claim_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = running_with_claim()
    claim_name = objects[1]["metadata"]["name"]
    doc = explain(tmp_path, [*base(gpus=2), *objects], "trainer-0", capsys)
    verdict = doc["verdict"]
    assert verdict["reason"] == "ok", verdict
    assert "gpu-node-0/gpu-0, gpu-node-0/gpu-1" in verdict["message"]
    [claim] = doc["claims"]
    assert claim["name"] == claim_name
    assert claim["uid"] == objects[1]["metadata"]["uid"]
    running = [e for e in claim["boundaries"]["runtime"]["evidence"] if e["kind"] == "ContainerState"]
    assert [e["container"] for e in running] == ["main"]


def test_scheduler_created_claim_failing_preparation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scheduled_at = POD_CREATED + timedelta(seconds=5)
    p = gpu_pod(node_name=NODE, conditions=b.stuck_conditions(scheduled_at, sandbox_ready=False))
    c = b.extended_resource_claim(
        p, [b.request(REQUEST, count=2)], POD_CREATED,
        allocated=[(REQUEST, NODE, "gpu-0"), (REQUEST, NODE, "gpu-1")], reserved_for=[p],
    )
    name = c["metadata"]["name"]
    p = b.with_extended_resource_claim_status(p, name, [("main", GPU, REQUEST)])
    failure = b.event(
        p, "FailedPrepareDynamicResources",
        f"Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for "
        f"ResourceClaim {name}: error preparing devices: GPU gpu-1 has an XID 79 error",
        scheduled_at + timedelta(seconds=10), T0 - timedelta(minutes=1), count=12,
    )
    doc = explain(tmp_path, [*base(gpus=2), p, c, failure], "trainer-0", capsys)
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("preparation", "preparation-failed"), verdict
    assert f"claim {name}" in verdict["message"]
    assert "XID 79" in verdict["message"]


def test_unhealthy_device_of_the_scheduler_created_claim_fails_runtime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p, c = running_with_claim()
    name = c["metadata"]["name"]
    health = b.resource_health(name, REQUEST, [("gpu.nvidia.com", NODE, "gpu-1")], health="Unhealthy")
    p["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [health]
    doc = explain(tmp_path, [*base(gpus=2), p, c], "trainer-0", capsys)
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("runtime", "device-unhealthy"), verdict
    assert f"gpu.nvidia.com/{NODE}/gpu-1 of claim {name} Unhealthy" in verdict["message"]


def test_pod_status_naming_a_missing_claim_is_claim_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = b.with_extended_resource_claim_status(gpu_pod(), "trainer-0-extended-resources-gone", [("main", GPU, REQUEST)])
    doc = explain(tmp_path, [*base(gpus=2), p], "trainer-0", capsys)
    verdict = doc["verdict"]
    assert verdict["reason"] == "claim-missing", verdict
    assert "trainer-0-extended-resources-gone" in verdict["message"]
    assert "extendedResourceClaimStatus" in verdict["message"]


def test_device_plugin_pod_is_not_a_dra_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = POD_CREATED + timedelta(minutes=1)
    p = gpu_pod(
        node_name=NODE, phase="Running", conditions=b.running_conditions(POD_CREATED, started),
        container_state=b.state_running(started),
    )
    doc = explain(tmp_path, [*base(gpus=2, extended_gpus=8), p], "trainer-0", capsys)
    assert doc["verdict"]["reason"] == "ok"
    assert doc["claims"] == []


# --- collection -------------------------------------------------------------------------------------


def test_collector_keeps_extended_resource_pods_their_claims_and_events(tmp_path: Path) -> None:
    waiting = pending(gpu_pod("waiting-0"))
    running, claim = running_with_claim()
    objects = [
        *base(gpus=4),
        waiting,
        running,
        claim,
        b.event(waiting, "FailedScheduling", "0/1 nodes are available", POD_CREATED, component="default-scheduler"),
        b.event(running, "Started", "Started container main", T0 - timedelta(minutes=5), type="Normal"),
        # Neither uses claims nor asks for a DRA-backed resource: left out, with its event.
        web := b.pod(NS, "web-0", POD_CREATED, claims=(), node_name=NODE, phase="Running"),
        b.event(web, "Started", "Started container main", T0 - timedelta(minutes=5), type="Normal"),
    ]
    server = FakeApiServer(FakeCluster([objects]))
    server.start()
    try:
        server.write_kubeconfig(tmp_path / "kubeconfig")
        source = ClusterSource("test", "kubeconfig", str(tmp_path / "kubeconfig"))
        snapshot = collect_and_derive(source, T0, lambda: T0)
    finally:
        server.stop()
    assert snapshot.status == "ok", snapshot.error
    stored = set(ObjectVersion.objects.filter(valid_to__isnull=True).values_list("kind", "name"))
    pods = {name for kind, name in stored if kind == "Pod"}
    assert pods == {"waiting-0", "trainer-0"}
    assert ("ResourceClaim", claim["metadata"]["name"]) in stored
    events = {name.split(".")[0] for kind, name in stored if kind == "Event"}
    assert events == {"waiting-0", "trainer-0"}


# --- audit ------------------------------------------------------------------------------------------


def audit(tmp_path: Path, objects: list[Obj], capsys: pytest.CaptureFixture[str]) -> list[Obj]:
    warnings = cli_json_over(tmp_path, objects, T0, capsys, "audit")["warnings"]
    return [w for w in warnings if w["kind"] == "double-allocator"]


def test_node_serving_nvidia_gpu_both_ways_is_a_double_allocator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [warning] = audit(tmp_path, [*base(gpus=2, extended_gpus=2), *running_with_claim()], capsys)
    assert warning["subject"] == NODE
    assert "nvidia.com/gpu: 2 through a device plugin" in warning["message"]
    assert "DeviceClass gpu.nvidia.com also serves nvidia.com/gpu through DRA" in warning["message"]


def test_dra_only_node_serving_nvidia_gpu_is_no_double_allocator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert audit(tmp_path, [*base(gpus=2), *running_with_claim()], capsys) == []


def test_metrics_count_the_boundaries_of_extended_resource_pods() -> None:
    history = MemoryHistory([(T0, [*base(gpus=1), pending(gpu_pod())])])
    assert 'claimline_claim_boundaries{boundary="allocation",state="failed"} 1' in render_metrics(history)


def test_pod_page_says_which_container_requests_the_claim_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], admin_client: Client
) -> None:
    doc = explain(tmp_path, [*base(gpus=1), pending(gpu_pod())], "trainer-0", capsys)
    assert doc["claims"][0]["extended_resources"]["planned"] is True
    page = admin_client.get(f"/c/{default_cluster_name()}/pods/{NS}/trainer-0/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Not created yet" in html
    assert "nvidia.com/gpu: 2 (DeviceClass gpu.nvidia.com)" in html
    assert "insufficient-devices" in html


def test_newest_class_naming_the_resource_serves_it_then_the_first_name() -> None:
    old = b.device_class("gpu-old", created=CREATED, extended_resource_name=GPU)
    new = b.device_class("gpu-new", created=CREATED + timedelta(days=1), extended_resource_name=GPU)
    twin = b.device_class("gpu-a", created=CREATED + timedelta(days=1), extended_resource_name=GPU)
    state = MemoryHistory([(T0, [old, new])]).state
    assert resource_classes(state)[GPU] == "gpu-new"
    assert resource_classes(state)["deviceclass.resource.kubernetes.io/gpu-old"] == "gpu-old"
    assert resource_classes(MemoryHistory([(T0, [old, new, twin])]).state)[GPU] == "gpu-a"
