"""End to end against a real control plane: Kubernetes 1.37's kube-apiserver, kube-scheduler and
kube-controller-manager (demo/control_plane.py) decide; Claimline collects through its kubeconfig and explains.

Each case builds its own Node (its status set through the API, as a kubelet would: no kubelet runs), a
ResourceSlice of two GPUs (driver gpu.example.com) and a DeviceClass that selects only that node's devices, so
the cases do not see each other's devices. The real scheduler allocates (or reports why it cannot) and binds;
the real resourceclaim controller makes claims from templates and releases them; the device-taint-eviction
controller evicts the holder of a device tainted NoExecute (by its slice or by a DeviceTaintRule), and a
NoSchedule DeviceTaintRule keeps a Pod from its devices. The scheduler holds a gang (a scheduling.k8s.io/v1beta1
PodGroup) until minCount members exist, waits for a device's binding conditions before it binds, and makes the
claim for a DeviceClass's extended resource. Then Claimline must say what the cluster holds, with the designed
reason and the scheduler's own words. What the components wrote is kept in tests/fixtures/real/ (rewritten with
CLAIMLINE_RECORD_REAL=1) so unit tests can quote real wording.

Skipped when scripts/build-control-plane has not built the binaries (it needs Go).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from claimline.pipeline import collect_and_derive
from collector.models import Snapshot
from collector.sources import ClusterSource
from demo.control_plane import ControlPlane, binaries_dir, wait_for

pytestmark = [
    pytest.mark.skipif(binaries_dir() is None, reason="control plane not built (scripts/build-control-plane)"),
    pytest.mark.control_plane,
    pytest.mark.django_db,
]

DRIVER = "gpu.example.com"
RESOURCE = "/apis/resource.k8s.io/v1"
FIXTURES = Path(__file__).parent / "fixtures" / "real"
RECORD = os.environ.get("CLAIMLINE_RECORD_REAL") == "1"
# What the real components wrote, by case: saved to tests/fixtures/real/ when recording.
OBSERVED: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module", autouse=True)
def record_real_wording() -> Iterator[None]:
    yield
    if RECORD and OBSERVED:
        FIXTURES.mkdir(parents=True, exist_ok=True)
        for case, strings in OBSERVED.items():
            (FIXTURES / f"{case}.json").write_text(json.dumps(strings, indent=2, sort_keys=True) + "\n")


@pytest.fixture
def real(control_plane: ControlPlane) -> ClusterSource:
    return ClusterSource("real", "kubeconfig", str(control_plane.kubeconfig))


# -- objects, made the way users and kubelets make them --


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_gpu_node(
    plane: ControlPlane, case: str, taints: list[dict[str, str]] | None = None, gpus: int = 2,
    device_extra: dict[str, Any] | None = None, class_extra: dict[str, Any] | None = None,
) -> str:
    """Node ``n-<case>`` reporting Ready, a slice of ``gpus`` A100s for it (each with ``device_extra`` fields) and
    DeviceClass ``gpu-<case>`` (with ``class_extra`` in its spec)."""
    api, node = plane.api, f"n-{case}"
    api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": node, "labels": {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux"}}})
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    stamp = now_rfc3339()
    api.merge_patch(f"/api/v1/nodes/{node}/status", {"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}],
    }})
    devices = []
    for index in range(gpus):
        device: dict[str, Any] = {
            "name": f"gpu-{index}",
            "attributes": {"model": {"string": "A100"}, "case": {"string": case}},
            "capacity": {"memory": {"value": "80Gi"}},
        }
        if taints:
            device["taints"] = taints
        devices.append({**device, **(device_extra or {})})
    api.create(f"{RESOURCE}/resourceslices", {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}})
    api.create(f"{RESOURCE}/deviceclasses", {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": f"gpu-{case}"},
        "spec": {"selectors": [{"cel": {"expression": (
            f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].case == "{case}"')}}],
                 **(class_extra or {})}})
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"e2e-{case}"}})
    return node


def exactly(case: str, count: int = 1, **more: Any) -> dict[str, Any]:
    return {"deviceClassName": f"gpu-{case}", "allocationMode": "ExactCount", "count": count, **more}


def add_claim(plane: ControlPlane, case: str, name: str, request: dict[str, Any]) -> dict[str, Any]:
    claim: dict[str, Any] = plane.api.create(f"{RESOURCE}/namespaces/e2e-{case}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}})
    return claim


def add_pod(plane: ControlPlane, case: str, name: str, claim: str | None = None,
            template: str | None = None, grace: int = 0, group: str | None = None,
            limits: dict[str, str] | None = None) -> dict[str, Any]:
    """A Pod using claim ``claim`` or one from ``template`` as ``gpu``, or (``limits``) an extended resource;
    ``group``: the PodGroup it belongs to (``spec.schedulingGroup``)."""
    container: dict[str, Any] = {"name": "cuda", "image": "registry.example/cuda-check:12"}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": grace}
    if limits is not None:
        container["resources"] = {"limits": limits}
    else:
        source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", **source}]
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    pod: dict[str, Any] = plane.api.create(f"/api/v1/namespaces/e2e-{case}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    return pod


def pod_path(case: str, name: str) -> str:
    return f"/api/v1/namespaces/e2e-{case}/pods/{name}"


def claim_path(case: str, name: str) -> str:
    return f"{RESOURCE}/namespaces/e2e-{case}/resourceclaims/{name}"


def wait_bound(plane: ControlPlane, case: str, pod: str, claim: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait until the scheduler allocated ``claim`` and bound ``pod``; both as the API has them then."""
    def done() -> tuple[dict[str, Any], dict[str, Any]] | None:
        got = plane.api.get(pod_path(case, pod))
        held = plane.api.get(claim_path(case, claim))
        if got["spec"].get("nodeName") and (held.get("status") or {}).get("allocation"):
            return got, held
        return None

    found: tuple[dict[str, Any], dict[str, Any]] = wait_for(f"{case}/{pod} bound", done, timeout=30)
    return found


def wait_failed_scheduling(plane: ControlPlane, case: str, pod: str) -> dict[str, Any]:
    """The scheduler's FailedScheduling event about ``pod`` (and its PodScheduled=False condition)."""
    uid = plane.api.get(pod_path(case, pod))["metadata"]["uid"]

    def seen() -> dict[str, Any] | None:
        events = plane.api.get(f"/api/v1/namespaces/e2e-{case}/events",
                               fieldSelector=f"involvedObject.uid={uid},reason=FailedScheduling")["items"]
        condition = next((c for c in plane.api.get(pod_path(case, pod))["status"].get("conditions") or []
                          if c["type"] == "PodScheduled" and c["status"] == "False"), None)
        return {"event": events[-1], "condition": condition} if events and condition else None

    found: dict[str, Any] = wait_for(f"FailedScheduling for {case}/{pod}", seen, timeout=30)
    return found


def collect(source: ClusterSource) -> Snapshot:
    at = datetime.now(UTC)
    snapshot = collect_and_derive(source, at, lambda: datetime.now(UTC))
    assert snapshot.status == Snapshot.Status.OK, snapshot.error
    return snapshot


def explain(case: str, pod: str) -> dict[str, Any]:
    out = StringIO()
    call_command("explain", f"e2e-{case}/{pod}", "--json", "--cluster", "real", stdout=out)
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


def record(case: str, **strings: Any) -> None:
    OBSERVED.setdefault(case, {}).update(strings)


def scheduler_wording(failure: dict[str, Any]) -> dict[str, Any]:
    """The FailedScheduling event as core/v1 serves it (the scheduler writes events.k8s.io/v1: no
    firstTimestamp, lastTimestamp or count, an eventTime instead) and the PodScheduled condition."""
    event = dict(failure["event"])
    event["metadata"] = {k: v for k, v in event["metadata"].items() if k != "managedFields"}
    return {"event": event, "condition": failure["condition"]}


def allocation_results(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    results = claim["status"]["allocation"]["devices"]["results"]
    return sorted((r["driver"], r["pool"], r["device"]) for r in results)


def claim_doc(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in doc["claims"] if c["name"] == name)


# -- the cases --


def test_the_scheduler_places_a_claim_and_claimline_shows_its_allocation(
    control_plane: ControlPlane, real: ClusterSource
) -> None:
    node = add_gpu_node(control_plane, "fit")
    add_claim(control_plane, "fit", "one-gpu", exactly("fit"))
    add_pod(control_plane, "fit", "trainer", claim="one-gpu")
    pod, claim = wait_bound(control_plane, "fit", "trainer", "one-gpu")
    assert pod["spec"]["nodeName"] == node
    held = allocation_results(claim)
    assert len(held) == 1 and held[0][:2] == (DRIVER, node)
    record("fit", allocation=claim["status"]["allocation"], reservedFor=claim["status"].get("reservedFor"),
           podConditions=pod["status"].get("conditions"))

    collect(real)
    doc = explain("fit", "trainer")
    allocation = claim_doc(doc, "one-gpu")["boundaries"]["allocation"]
    assert allocation["state"] == "ok", allocation
    shown = [e for e in allocation["evidence"] if e.get("kind") == "AllocationResult"]
    assert sorted((e["driver"], e["pool"], e["device"]) for e in shown) == held
    assert {(e["request"], e["node"], e["claim"]) for e in shown} == {("gpu", node, claim["metadata"]["uid"])}
    # Bound, and no kubelet prepares anything: the next boundary waits.
    assert doc["verdict"]["reason"] == "preparation-pending", doc["verdict"]
    assert any(f"allocated {node}/{held[0][2]} on {node}" in e["what"] for e in doc["timeline"]), doc["timeline"]


CANNOT_PLACE = [
    # case, request, the reason Claimline must give
    ("selector", {"selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "H100"'}}]},
     "selector-unsatisfiable"),
    ("count", {"count": 3}, "insufficient-devices"),
]


@pytest.mark.parametrize(("case", "ask", "reason"), CANNOT_PLACE, ids=[c[0] for c in CANNOT_PLACE])
def test_claims_the_scheduler_cannot_place_get_the_designed_reason(
    control_plane: ControlPlane, real: ClusterSource, case: str, ask: dict[str, Any], reason: str
) -> None:
    add_gpu_node(control_plane, case)
    add_claim(control_plane, case, "gpus", exactly(case, **ask))
    add_pod(control_plane, case, "waiter", claim="gpus")
    failure = wait_failed_scheduling(control_plane, case, "waiter")
    record(case, **scheduler_wording(failure))
    assert_verdict(real, case, "waiter", reason, failure)


def test_devices_held_by_another_claim(control_plane: ControlPlane, real: ClusterSource) -> None:
    add_gpu_node(control_plane, "inuse")
    add_claim(control_plane, "inuse", "both-gpus", exactly("inuse", count=2))
    add_pod(control_plane, "inuse", "holder", claim="both-gpus")
    wait_bound(control_plane, "inuse", "holder", "both-gpus")
    add_claim(control_plane, "inuse", "one-gpu", exactly("inuse"))
    add_pod(control_plane, "inuse", "waiter", claim="one-gpu")
    failure = wait_failed_scheduling(control_plane, "inuse", "waiter")
    record("inuse", **scheduler_wording(failure))
    verdict = assert_verdict(real, "inuse", "waiter", "devices-in-use", failure)
    assert "both-gpus" in verdict["message"]  # names the holder


def test_tainted_devices_and_a_claim_that_tolerates_them(control_plane: ControlPlane, real: ClusterSource) -> None:
    taint = {"key": "example.com/maintenance", "value": "firmware", "effect": "NoSchedule"}
    add_gpu_node(control_plane, "tainted", taints=[taint])
    add_claim(control_plane, "tainted", "intolerant", exactly("tainted"))
    add_pod(control_plane, "tainted", "waiter", claim="intolerant")
    failure = wait_failed_scheduling(control_plane, "tainted", "waiter")
    record("tainted", **scheduler_wording(failure))
    toleration = {"key": "example.com/maintenance", "operator": "Equal", "value": "firmware", "effect": "NoSchedule"}
    add_claim(control_plane, "tainted", "tolerant", exactly("tainted", tolerations=[toleration]))
    add_pod(control_plane, "tainted", "canary", claim="tolerant")
    wait_bound(control_plane, "tainted", "canary", "tolerant")
    assert_verdict(real, "tainted", "waiter", "devices-tainted", failure)
    canary = explain("tainted", "canary")
    assert claim_doc(canary, "tolerant")["boundaries"]["allocation"]["state"] == "ok", canary["verdict"]


def assert_verdict(
    source: ClusterSource, case: str, pod: str, reason: str, failure: dict[str, Any]
) -> dict[str, Any]:
    collect(source)
    doc = explain(case, pod)
    verdict: dict[str, Any] = doc["verdict"]
    assert verdict["reason"] == reason, verdict
    assert verdict["reason"] != "waiting-for-scheduler"
    assert verdict["boundary"] == "allocation"
    said = " ".join(failure["event"]["message"].split())
    assert said in verdict["message"], (said, verdict["message"])
    return verdict


def test_a_template_claim_is_made_allocated_and_released(control_plane: ControlPlane, real: ClusterSource) -> None:
    node = add_gpu_node(control_plane, "template")
    api = control_plane.api
    api.create(f"{RESOURCE}/namespaces/e2e-template/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly("template")}]}}}})
    add_pod(control_plane, "template", "job-0", template="one-gpu")

    def generated() -> str | None:
        statuses = api.get(pod_path("template", "job-0"))["status"].get("resourceClaimStatuses") or []
        return statuses[0].get("resourceClaimName") if statuses else None

    name: str = wait_for("the resourceclaim controller's claim", generated, timeout=30)
    pod, claim = wait_bound(control_plane, "template", "job-0", name)
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    collect(real)
    doc = explain("template", "job-0")
    assert claim_doc(doc, name)["boundaries"]["allocation"]["state"] == "ok"

    # The container ran to completion (a kubelet would say so): the controller releases the claim and deletes it.
    api.merge_patch(f"{pod_path('template', 'job-0')}/status", {"status": {"phase": "Succeeded"}})
    wait_for("the generated claim deleted", lambda: not api.exists(claim_path("template", name)), timeout=30)
    collect(real)
    timeline = [e["what"] for e in explain("template", "job-0")["timeline"]]
    record("template", generatedClaim={"generateName": claim["metadata"].get("generateName"),
                                       "annotations": claim["metadata"].get("annotations"),
                                       "finalizers": claim["metadata"].get("finalizers")})
    allocated = next(i for i, what in enumerate(timeline) if what.startswith(f"claim {name} allocated"))
    released = next(i for i, what in enumerate(timeline) if what == f"claim {name} deleted")
    assert allocated < released, timeline
    assert f"on {node}" in timeline[allocated]

    # Deleted outright, a Pod's generated claim goes too (the garbage collector follows its owner).
    add_pod(control_plane, "template", "job-1", template="one-gpu")
    wait_for("a claim for job-1", lambda: (api.get(pod_path("template", "job-1"))["status"].get(
        "resourceClaimStatuses") or [{}])[0].get("resourceClaimName"), timeout=30)
    second = api.get(pod_path("template", "job-1"))["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    wait_bound(control_plane, "template", "job-1", second)
    collect(real)
    api.delete(pod_path("template", "job-1"), grace_period=0)
    wait_for("job-1's claim deleted", lambda: not api.exists(claim_path("template", second)), timeout=60)
    collect(real)
    gone = explain("template", "job-1")
    assert re.search(r"the Pod was deleted at ", gone["verdict"]["message"]), gone["verdict"]


def test_a_noexecute_device_taint_evicts_the_holder(control_plane: ControlPlane, real: ClusterSource) -> None:
    """The device-taint-eviction controller deletes a Pod whose device gets a NoExecute taint it does not
    tolerate. With a grace period and no kubelet the Pod stays terminating, its claim still allocated."""
    api = control_plane.api
    add_gpu_node(control_plane, "evict")
    add_claim(control_plane, "evict", "one-gpu", exactly("evict"))
    add_pod(control_plane, "evict", "victim", claim="one-gpu", grace=30)
    _pod, claim = wait_bound(control_plane, "evict", "victim", "one-gpu")
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    path = f"{RESOURCE}/resourceslices/n-evict-{DRIVER}"
    inventory = api.get(path)
    for advertised in inventory["spec"]["devices"]:
        if advertised["name"] == device:
            advertised["taints"] = [{"key": "example.com/ecc", "value": "uncorrectable", "effect": "NoExecute"}]
    api.request("PUT", path, inventory)

    def evicted() -> dict[str, Any] | None:
        got: dict[str, Any] = api.get(pod_path("evict", "victim"))
        return got if got["metadata"].get("deletionTimestamp") else None

    pod = wait_for("the eviction", evicted, timeout=30)
    disruption = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
    events = api.get("/api/v1/namespaces/e2e-evict/events", fieldSelector="reason=DeviceTaintManagerEviction")
    record("evict", condition=disruption, events=[{k: e.get(k) for k in (
        "type", "reason", "message", "action", "reportingComponent", "involvedObject")} for e in events["items"]])
    assert disruption["reason"] == "DeletionByDeviceTaintManager"

    collect(real)
    verdict = explain("evict", "victim")["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("inventory", "device-taint-eviction"), verdict
    assert device in verdict["message"] and "example.com/ecc" in verdict["message"], verdict


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}


def add_taint_rule(plane: ControlPlane, name: str, selector: dict[str, str], effect: str) -> dict[str, Any]:
    """A DeviceTaintRule (resource.k8s.io/v1) tainting the devices ``selector`` (driver, pool, device) names."""
    rule: dict[str, Any] = plane.api.create(f"{RESOURCE}/devicetaintrules", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name},
        "spec": {"deviceSelector": selector,
                 "taint": {"key": "example.com/drain", "value": "rma", "effect": effect}}})
    return rule


def test_a_noexecute_device_taint_rule_evicts_the_holder(control_plane: ControlPlane, real: ClusterSource) -> None:
    """A DeviceTaintRule (not the slice) taints the held device NoExecute: the eviction controller evicts the
    Pod, and Claimline names the device, the taint and the rule."""
    api = control_plane.api
    node = add_gpu_node(control_plane, "rule")
    add_claim(control_plane, "rule", "one-gpu", exactly("rule"))
    add_pod(control_plane, "rule", "victim", claim="one-gpu", grace=30)
    _pod, claim = wait_bound(control_plane, "rule", "victim", "one-gpu")
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    add_taint_rule(control_plane, "drain-rule", {"driver": DRIVER, "pool": node, "device": device}, "NoExecute")

    def evicted() -> dict[str, Any] | None:
        got: dict[str, Any] = api.get(pod_path("rule", "victim"))
        return got if got["metadata"].get("deletionTimestamp") else None

    pod = wait_for("the eviction", evicted, timeout=30)
    disruption = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert disruption["reason"] == "DeletionByDeviceTaintManager"
    rule = wait_for("the rule's EvictionInProgress", lambda: next(
        (r for r in [api.get(f"{RESOURCE}/devicetaintrules/drain-rule")]
         if any(c["type"] == "EvictionInProgress" for c in (r.get("status") or {}).get("conditions") or [])),
        None), timeout=30)
    events = api.get("/api/v1/namespaces/e2e-rule/events", fieldSelector="reason=DeviceTaintManagerEviction")
    record("rule-evict", condition=disruption, ruleStatus=rule.get("status"), events=[{k: e.get(k) for k in (
        "type", "reason", "message", "action", "reportingComponent", "involvedObject")} for e in events["items"]])

    collect(real)
    verdict = explain("rule", "victim")["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("inventory", "device-taint-eviction"), verdict
    for named in (device, "example.com/drain", "rma", "DeviceTaintRule drain-rule"):
        assert named in verdict["message"], (named, verdict["message"])


def test_a_noschedule_device_taint_rule_blocks_a_pending_pod(
    control_plane: ControlPlane, real: ClusterSource
) -> None:
    """A NoSchedule DeviceTaintRule over the whole pool: the scheduler cannot allocate, and Claimline says the
    devices are tainted by that rule, not that the Pod fits."""
    node = add_gpu_node(control_plane, "rulens")
    add_taint_rule(control_plane, "drain-rulens", {"driver": DRIVER, "pool": node}, "NoSchedule")
    add_claim(control_plane, "rulens", "one-gpu", exactly("rulens"))
    add_pod(control_plane, "rulens", "waiter", claim="one-gpu")
    failure = wait_failed_scheduling(control_plane, "rulens", "waiter")
    record("rule-noschedule", **scheduler_wording(failure))
    verdict = assert_verdict(real, "rulens", "waiter", "devices-tainted", failure)
    assert "drain-rulens" in verdict["message"], verdict


SCHEDULING = "/apis/scheduling.k8s.io/v1beta1"


def add_gang(plane: ControlPlane, case: str, min_count: int, ranks: range) -> None:
    """PodGroup ``trio`` (gang of ``min_count``, made once) and a member ``rank-<i>`` with its own one-GPU claim
    for each of ``ranks``."""
    if not plane.api.exists(f"{SCHEDULING}/namespaces/e2e-{case}/podgroups/trio"):
        plane.api.create(f"{SCHEDULING}/namespaces/e2e-{case}/podgroups", {
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "trio"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}})
    for rank in ranks:
        add_claim(plane, case, f"rank-{rank}", exactly(case))
        add_pod(plane, case, f"rank-{rank}", claim=f"rank-{rank}", group="trio")


def group_scheduled(plane: ControlPlane, case: str) -> dict[str, Any]:
    """The scheduler's PodGroupInitiallyScheduled condition on PodGroup ``trio``, once it is there."""
    found: dict[str, Any] = wait_for("PodGroupInitiallyScheduled", lambda: next(
        (c for c in (plane.api.get(f"{SCHEDULING}/namespaces/e2e-{case}/podgroups/trio").get("status") or {}).get(
            "conditions") or [] if c["type"] == "PodGroupInitiallyScheduled"), None), timeout=30)
    return found


def test_a_gang_short_of_min_count_waits_then_is_placed(control_plane: ControlPlane, real: ClusterSource) -> None:
    """A PodGroup of minCount 3 (scheduling.k8s.io/v1beta1) with two members: the scheduler keeps them out of
    its queue and writes nothing about them (no FailedScheduling event, no PodScheduled condition, the group's
    status empty), and Claimline says gang-incomplete. A third member arrives: the group is placed."""
    api = control_plane.api
    add_gpu_node(control_plane, "gang", gpus=3)
    add_gang(control_plane, "gang", 3, range(2))
    # Give the scheduler time to have seen both members; it must still not have placed or reported either.
    wait_for("both members seen by the scheduler", lambda: len(api.get(
        "/api/v1/namespaces/e2e-gang/pods")["items"]) == 2, timeout=10)
    collect(real)  # the collection's own round trip gives the scheduler a few seconds more
    for rank in range(2):
        pod = api.get(pod_path("gang", f"rank-{rank}"))
        assert not pod["spec"].get("nodeName") and not pod["status"].get("conditions"), pod["status"]
    events = api.get("/api/v1/namespaces/e2e-gang/events")["items"]
    group = api.get(f"{SCHEDULING}/namespaces/e2e-gang/podgroups/trio")
    assert not events and not group.get("status"), (events, group.get("status"))
    record("gang", waitingGroup=without_managed_fields(group), waitingEvents=events)

    doc = explain("gang", "rank-0")
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "gang-incomplete"), verdict
    for said in ("gang e2e-gang/trio", "PodGroup minCount 3", "only 2 exist (rank-0, rank-1)", "1 more"):
        assert said in verdict["message"], (said, verdict["message"])

    add_gang(control_plane, "gang", 3, range(2, 3))
    bound = [wait_bound(control_plane, "gang", f"rank-{rank}", f"rank-{rank}") for rank in range(3)]
    devices = {allocation_results(claim)[0] for _pod, claim in bound}
    assert len(devices) == 3
    placed = group_scheduled(control_plane, "gang")
    record("gang", placedCondition=placed)
    collect(real)
    for rank in range(3):
        doc = explain("gang", f"rank-{rank}")
        assert claim_doc(doc, f"rank-{rank}")["boundaries"]["allocation"]["state"] == "ok", doc["verdict"]
        assert doc["verdict"]["reason"] == "preparation-pending", doc["verdict"]


def test_binding_conditions_hold_the_pod_until_the_driver_says_ready(
    control_plane: ControlPlane, real: ClusterSource
) -> None:
    """Devices whose slice sets bindingConditions: the scheduler allocates and waits in PreBind until the driver
    (played here) sets the condition in the claim's status.devices[]; Claimline says binding-pending, then the
    Pod binds."""
    api = control_plane.api
    node = add_gpu_node(control_plane, "bind", device_extra={
        "bindingConditions": ["example.com/attached"], "bindingFailureConditions": ["example.com/attach-failed"]})
    add_claim(control_plane, "bind", "one-gpu", exactly("bind"))
    add_pod(control_plane, "bind", "trainer", claim="one-gpu")

    def allocated() -> dict[str, Any] | None:
        held: dict[str, Any] = api.get(claim_path("bind", "one-gpu"))
        return held if (held.get("status") or {}).get("allocation") else None

    claim = wait_for("the allocation", allocated, timeout=30)
    events = wait_for("BindingConditionsPending", lambda: api.get(
        "/api/v1/namespaces/e2e-bind/events", fieldSelector="reason=BindingConditionsPending")["items"], timeout=30)
    pod = api.get(pod_path("bind", "trainer"))
    assert not pod["spec"].get("nodeName"), pod["spec"]
    record("binding", allocation=claim["status"]["allocation"], pendingEvent={k: events[-1].get(k) for k in (
        "type", "reason", "message", "reportingComponent")}, podStatus=pod["status"])

    collect(real)
    doc = explain("bind", "trainer")
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "binding-pending"), verdict
    assert "example.com/attached" in verdict["message"], verdict

    result = claim["status"]["allocation"]["devices"]["results"][0]
    api.merge_patch(f"{claim_path('bind', 'one-gpu')}/status", {"status": {"devices": [{
        "driver": result["driver"], "pool": result["pool"], "device": result["device"],
        "conditions": [{"type": "example.com/attached", "status": "True", "reason": "Attached",
                        "message": "attached to the node", "lastTransitionTime": now_rfc3339()}]}]}})
    pod, claim = wait_bound(control_plane, "bind", "trainer", "one-gpu")
    assert pod["spec"]["nodeName"] == node
    collect(real)
    doc = explain("bind", "trainer")
    assert claim_doc(doc, "one-gpu")["boundaries"]["allocation"]["state"] == "ok", doc["verdict"]
    assert doc["verdict"]["reason"] == "preparation-pending", doc["verdict"]


def test_the_scheduler_makes_the_claim_for_an_extended_resource(
    control_plane: ControlPlane, real: ClusterSource
) -> None:
    """A DeviceClass with an extendedResourceName and a Pod asking for it in its limits, on a node with no device
    plugin for it: the scheduler creates the claim (DRAExtendedResource) and Claimline shows it allocated."""
    api = control_plane.api
    node = add_gpu_node(control_plane, "ext", class_extra={"extendedResourceName": "example.com/gpu-ext"})
    add_pod(control_plane, "ext", "trainer", limits={"example.com/gpu-ext": "1"})

    def made() -> str | None:
        status = api.get(pod_path("ext", "trainer"))["status"].get("extendedResourceClaimStatus") or {}
        return status.get("resourceClaimName")

    name: str = wait_for("the scheduler's claim", made, timeout=30)
    pod, claim = wait_bound(control_plane, "ext", "trainer", name)
    assert pod["spec"]["nodeName"] == node
    held = allocation_results(claim)
    record("extended", extendedResourceClaimStatus=pod["status"]["extendedResourceClaimStatus"],
           claimSpec=claim["spec"], allocation=claim["status"]["allocation"],
           annotations=claim["metadata"].get("annotations"))

    collect(real)
    doc = explain("ext", "trainer")
    shown = claim_doc(doc, name)["boundaries"]["allocation"]
    assert shown["state"] == "ok", shown
    evidence = [e for e in shown["evidence"] if e.get("kind") == "AllocationResult"]
    assert sorted((e["driver"], e["pool"], e["device"]) for e in evidence) == held
    assert doc["verdict"]["reason"] == "preparation-pending", doc["verdict"]


def test_a_complete_gang_that_does_not_fit_together(control_plane: ControlPlane, real: ClusterSource) -> None:
    """Three members of a minCount-3 gang, each wanting a GPU, on a node of two: each fits alone, not all
    together. The scheduler reports the group unschedulable; Claimline gives the device reason that stops the
    group, says how many members fit, and quotes the scheduler."""
    add_gpu_node(control_plane, "gangfull")
    add_gang(control_plane, "gangfull", 3, range(3))
    failures = [wait_failed_scheduling(control_plane, "gangfull", f"rank-{rank}") for rank in range(3)]
    group = group_scheduled(control_plane, "gangfull")
    record("gang-unschedulable", groupCondition=group,
           memberEvents=[scheduler_wording(f)["event"]["message"] for f in failures],
           memberConditions=[f["condition"] for f in failures])
    assert group["status"] == "False" and "minCount (3) cannot be satisfied" in group["message"], group
    collect(real)
    for rank in range(3):
        verdict = explain("gangfull", f"rank-{rank}")["verdict"]
        assert (verdict["boundary"], verdict["reason"]) == ("allocation", "devices-in-use"), verdict
        for said in ("gang e2e-gangfull/trio", "PodGroup minCount 3", "only 2 of its 3 members fit together",
                     f'the scheduler reported on the group: "{group["message"]}"'):
            assert said in verdict["message"], (said, verdict["message"])
