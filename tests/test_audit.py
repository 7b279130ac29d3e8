"""Inventory and access warnings: each kind, and clean clusters that must stay quiet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from demo import builders as b
from domain.cluster.state import MemoryHistory
from domain.reports.audit import audit

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)
NS = "ml"


def healthy_cluster() -> list[dict[str, Any]]:
    return [
        b.namespace(NS),
        b.device_class(),
        b.claim_template(NS, "gpu", [b.request()]),
        *[b.node(f"gpu-node-{i}", T0 - 90 * 24 * H) for i in range(2)],
        *[b.resource_slice(f"gpu-node-{i}", b.gpu_devices(f"gpu-node-{i}", 8)) for i in range(2)],
    ]


def warnings(objects: list[dict[str, Any]], *more: tuple[datetime, list[dict[str, Any]]]) -> list[dict[str, str]]:
    snaps = [(T0, objects), *more] if more else [(T0, objects)]
    return audit(MemoryHistory(snaps))["warnings"]


def kinds(found: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(w["kind"], w["subject"]) for w in found]


def test_healthy_cluster_has_no_warnings() -> None:
    report = audit(MemoryHistory([(T0, healthy_cluster())]))
    assert report == {"as_of": "2026-11-02T00:00:00Z", "warnings": []}


def test_pool_generations_disagree() -> None:
    objs = healthy_cluster()
    devices = b.gpu_devices("gpu-node-0", 8)
    objs[-2] = b.resource_slice("gpu-node-0", devices[:4], generation=2, slice_count=2, name="n0-a")
    objs.append(b.resource_slice("gpu-node-0", devices[4:], generation=1, slice_count=2, name="n0-b"))
    found = warnings(objs)
    assert ("stale-inventory", "gpu-node-0") in kinds(found)
    messages = " ".join(w["message"] for w in found)
    assert "generations 1, 2" in messages
    assert "n0-b" in messages
    # The newest generation has only one of its two slices.
    assert "declares 2 slices at generation 2 but only 1 exists" in messages


def test_slice_of_a_node_that_is_gone() -> None:
    objs = [o for o in healthy_cluster() if not (o["kind"] == "Node" and o["metadata"]["name"] == "gpu-node-1")]
    found = warnings(objs)
    assert kinds(found) == [("stale-inventory", "gpu-node-1")]
    assert "no longer exists" in found[0]["message"]


def test_slice_of_a_not_ready_node_names_the_claims_on_it() -> None:
    objs = healthy_cluster()
    objs[3] = b.node("gpu-node-0", T0 - 90 * 24 * H, ready=False, ready_since=T0 - 2 * H)
    claim = b.claim(NS, "held", [b.request()], T0 - 3 * H, allocated=[("gpu", "gpu-node-0", "gpu-1")])
    found = warnings([*objs, claim])
    assert kinds(found) == [("stale-inventory", "gpu-node-0")]
    assert "NotReady since 2026-11-01T22:00:00Z" in found[0]["message"]
    assert "ml/held" in found[0]["message"]


def test_not_ready_node_counts_every_slice_of_its_pool_and_lists_only_that_pools_holders() -> None:
    objs = [o for o in healthy_cluster() if o["kind"] != "ResourceSlice"]
    objs[3] = b.node("gpu-node-0", T0 - 90 * 24 * H, ready=False, ready_since=T0 - 2 * H)
    devices = b.gpu_devices("gpu-node-0", 8)
    objs += [
        b.resource_slice("gpu-node-0", devices[:3], slice_count=2, name="n0-a"),
        b.resource_slice("gpu-node-0", devices[3:], slice_count=2, name="n0-b"),
        b.resource_slice("gpu-node-1", b.gpu_devices("gpu-node-1", 8)),
    ]
    held = [
        b.claim(NS, f"held-{i}", [b.request()], T0 - 3 * H, allocated=[("gpu", "gpu-node-0", f"gpu-{i}")])
        for i in range(5)
    ]
    observer = b.claim(
        NS, "observer", [b.request()], T0 - 3 * H, allocated=[("gpu", "gpu-node-0", "gpu-0")], admin_access=True
    )
    elsewhere = b.claim(NS, "elsewhere", [b.request()], T0 - 3 * H, allocated=[("gpu", "gpu-node-1", "gpu-0")])
    found = [w for w in warnings([*objs, *held, observer, elsewhere]) if w["kind"] == "stale-inventory"]
    assert [w["subject"] for w in found] == ["gpu-node-0"]
    message = found[0]["message"]
    assert "advertises 8 devices in pool gpu-node-0" in message
    # Five holders, the first three by name; adminAccess observes a device without holding it.
    assert "5 claims still hold devices from it (ml/held-0, ml/held-1, ml/held-2 …)" in message
    assert "observer" not in message and "elsewhere" not in message


def test_ready_nodes_with_held_devices_are_quiet() -> None:
    claim = b.claim(NS, "held", [b.request()], T0 - 3 * H, allocated=[("gpu", "gpu-node-0", "gpu-1")])
    assert warnings([*healthy_cluster(), claim]) == []


def test_vanished_slices_name_the_claims_still_holding_their_devices() -> None:
    before = healthy_cluster()
    after = [o for o in before if not (o["kind"] == "ResourceSlice" and o["spec"]["nodeName"] == "gpu-node-1")]
    claim = b.claim(NS, "held", [b.request()], T0 - 3 * H, allocated=[("gpu", "gpu-node-1", "gpu-2")])
    other = b.claim(NS, "other", [b.request()], T0 - 3 * H, allocated=[("gpu", "gpu-node-0", "gpu-2")])
    found = warnings([*before, claim, other], (T0 + H, [*after, claim, other]))
    assert kinds(found) == [("stale-inventory", "gpu-node-1")]
    assert found[0]["message"].endswith("; 1 claim still holds devices from it (ml/held)")


def test_driver_slices_vanished_from_a_live_node() -> None:
    before = healthy_cluster()
    after = [o for o in before if not (o["kind"] == "ResourceSlice" and o["spec"]["nodeName"] == "gpu-node-1")]
    found = warnings(before, (T0 + H, after))
    assert kinds(found) == [("stale-inventory", "gpu-node-1")]
    assert "vanished at 2026-11-02T01:00:00Z" in found[0]["message"]
    assert "8 devices" in found[0]["message"]


def test_republished_slice_is_not_a_vanished_driver() -> None:
    before = healthy_cluster()
    after = [o for o in before if o["kind"] != "ResourceSlice"] + [
        b.resource_slice(f"gpu-node-{i}", b.gpu_devices(f"gpu-node-{i}", 8), generation=2) for i in range(2)
    ]
    assert warnings(before, (T0 + H, after)) == []


def test_node_removed_with_its_slices_is_not_a_warning() -> None:
    before = healthy_cluster()
    after = [o for o in before if "gpu-node-1" not in o["metadata"]["name"]]
    assert warnings(before, (T0 + H, after)) == []


def test_double_allocator() -> None:
    objs = healthy_cluster()
    objs[3] = b.node("gpu-node-0", T0 - 90 * 24 * H, extended_gpus=8)
    found = warnings(objs)
    assert kinds(found) == [("double-allocator", "gpu-node-0")]
    assert "nvidia.com/gpu: 8" in found[0]["message"]
    assert "gpu.nvidia.com" in found[0]["message"]


def test_double_allocator_names_the_class_serving_the_same_extended_resource() -> None:
    objs = healthy_cluster()
    objs[3] = b.node("gpu-node-0", T0 - 90 * 24 * H, extended_gpus=8)
    objs.append(b.device_class("gpu-extended", extended_resource_name="nvidia.com/gpu"))
    found = warnings(objs)
    assert kinds(found) == [("double-allocator", "gpu-node-0")]
    message = found[0]["message"]
    assert "nvidia.com/gpu: 8" in message and "through gpu.nvidia.com ResourceSlices" in message
    assert "DeviceClass gpu-extended also serves nvidia.com/gpu through DRA (extendedResourceName)" in message


def test_device_plugin_node_without_slices_is_fine() -> None:
    objs = [*healthy_cluster(), b.node("legacy-0", T0 - 90 * 24 * H, extended_gpus=8)]
    assert warnings(objs) == []


def test_admin_access_namespace_and_claim() -> None:
    objs = healthy_cluster()
    objs[0] = b.namespace(NS, admin_access=True)
    user = b.claim(NS, "user", [b.request()], T0 - H, allocated=[("gpu", "gpu-node-0", "gpu-2")])
    monitor = b.claim(
        NS,
        "monitor",
        [b.request(admin_access=True)],
        T0 - H,
        allocated=[("gpu", "gpu-node-0", "gpu-2")],
        admin_access=True,
    )
    found = warnings([*objs, user, monitor])
    assert kinds(found) == [("admin-access-claim", "ml/monitor"), ("admin-access-namespace", "ml")]
    assert "held by ml/user" in found[0]["message"]


def test_admin_access_claim_outside_a_labelled_namespace_says_so() -> None:
    monitor = b.claim(NS, "monitor", [b.request(admin_access=True)], T0)
    found = warnings([*healthy_cluster(), monitor])
    assert kinds(found) == [("admin-access-claim", "ml/monitor")]
    assert "lacks the resource.kubernetes.io/admin-access label" in found[0]["message"]


def _pod_with_generated_claim(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = b.pod(NS, "trainer-0", T0 - H, node_name="gpu-node-0", phase="Running")
    claim = b.template_claim(template, pod, allocated=[("gpu", "gpu-node-0", "gpu-0")], reserved_for=[pod])
    return pod, claim


def test_template_drift() -> None:
    objs = healthy_cluster()
    old_template = objs[2]
    pod, claim = _pod_with_generated_claim(old_template)
    objs[2] = b.claim_template(NS, "gpu", [b.request(count=2)])
    found = warnings([*objs, pod, claim])
    assert kinds(found) == [("template-drift", f"{NS}/{claim['metadata']['name']}")]
    assert "devices.requests[0].exactly.count: claim has 1, template now 2" in found[0]["message"]


def test_claim_matching_its_template_is_not_drift() -> None:
    objs = healthy_cluster()
    pod, claim = _pod_with_generated_claim(objs[2])
    assert warnings([*objs, pod, claim]) == []


def test_missing_template_is_not_drift() -> None:
    objs = healthy_cluster()
    pod, claim = _pod_with_generated_claim(objs[2])
    assert warnings([o for o in objs if o["kind"] != "ResourceClaimTemplate"] + [pod, claim]) == []


def test_audit_uses_history_as_of() -> None:
    before = healthy_cluster()
    after = [o for o in before if not (o["kind"] == "ResourceSlice" and o["spec"]["nodeName"] == "gpu-node-1")]
    snaps = [(T0, before), (T0 + H, after)]
    assert audit(MemoryHistory(snaps, as_of=T0))["warnings"] == []
    assert len(audit(MemoryHistory(snaps))["warnings"]) == 1
