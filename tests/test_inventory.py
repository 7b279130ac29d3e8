"""Inventory: advertised devices, pool generations, node reachability, taints and holders."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime
from typing import Any

from demo import builders as b
from domain.cluster.state import ClusterState, MemoryHistory
from domain.inventory.devices import (
    Inventory,
    NodeInfo,
    advertised_devices,
    allocated_devices,
    allocation_node,
    cluster_nodes,
    current_slices,
    device_holders,
    node_selector_matches,
    pool_generations,
    restored_device,
)

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CREATED = datetime(2026, 10, 1, tzinfo=UTC)


def state_of(*objects: dict[str, Any]) -> ClusterState:
    return MemoryHistory([(T0, list(objects))]).state


def test_node_local_slice_devices_carry_identity_node_attributes_and_capacity() -> None:
    state = state_of(
        b.node("worker-0", CREATED),
        b.resource_slice("worker-0", b.gpu_devices("worker-0", 2, b.H100_80GB), created=CREATED),
    )
    devices = advertised_devices(state)
    assert [d.id for d in devices] == [
        ("gpu.nvidia.com", "worker-0", "gpu-0"),
        ("gpu.nvidia.com", "worker-0", "gpu-1"),
    ]
    gpu0 = devices[0]
    assert gpu0.node_name == "worker-0"
    assert gpu0.attribute("productName") == "NVIDIA H100 80GB HBM3"
    assert gpu0.attribute("cudaComputeCapability") == "9.0.0"
    assert gpu0.attribute("pciBusID", "resource.kubernetes.io") == "0000:18:00.0"
    assert gpu0.capacity_value("memory") == "80Gi"
    assert gpu0.uuid and gpu0.uuid.startswith("GPU-")
    assert gpu0.slice_created == b.ts(CREATED)
    assert gpu0.pool_complete


def test_only_the_highest_generation_of_a_pool_counts() -> None:
    old = b.resource_slice("worker-0", b.gpu_devices("worker-0", 4), generation=1, name="old")
    new = b.resource_slice("worker-0", b.gpu_devices("worker-0", 2), generation=2, name="new")
    other = b.resource_slice("worker-1", b.gpu_devices("worker-1", 1), generation=7)
    state = state_of(old, new, other)
    devices = advertised_devices(state)
    assert [(d.pool, d.name, d.generation) for d in devices] == [
        ("worker-0", "gpu-0", 2),
        ("worker-0", "gpu-1", 2),
        ("worker-1", "gpu-0", 7),
    ]
    assert pool_generations(state)[("gpu.nvidia.com", "worker-0")] == [1, 2]
    assert [s["metadata"]["name"] for s in current_slices(state)[("gpu.nvidia.com", "worker-0")]] == ["new"]


def test_a_pool_missing_some_of_its_slices_is_incomplete() -> None:
    first = b.resource_slice("worker-0", b.gpu_devices("worker-0", 2), slice_count=2, name="part-1")
    devices = advertised_devices(state_of(first))
    assert devices and not any(d.pool_complete for d in devices)


def test_pools_of_different_drivers_with_the_same_name_are_separate() -> None:
    gpus = b.resource_slice("worker-0", b.gpu_devices("worker-0", 1))
    nics = b.resource_slice("worker-0", [{"name": "nic-0"}], driver="rdma.example.com", generation=3)
    assert {d.id for d in advertised_devices(state_of(gpus, nics))} == {
        ("gpu.nvidia.com", "worker-0", "gpu-0"),
        ("rdma.example.com", "worker-0", "nic-0"),
    }


def test_reachability_by_node_name_node_selector_and_all_nodes() -> None:
    nodes = [
        b.node("a100-0", CREATED, labels={"gpu": "a100", "rack": "3"}),
        b.node("h100-0", CREATED, labels={"gpu": "h100", "rack": "7"}),
    ]
    local = b.resource_slice("a100-0", [b.gpu_device("gpu-0")])
    by_label = b.resource_slice(None, [b.gpu_device("fabric-0")], pool="fabric", node_selector={"gpu": "h100"})
    everywhere = b.resource_slice(None, [b.gpu_device("shared-0")], pool="shared", all_nodes=True)
    inventory = Inventory.of(state_of(*nodes, local, by_label, everywhere))
    reach = {d.name: inventory.nodes_of(d) for d in inventory.devices}
    assert reach == {"gpu-0": ["a100-0"], "fabric-0": ["h100-0"], "shared-0": ["a100-0", "h100-0"]}


def test_per_device_node_selection() -> None:
    spec_slice = b.resource_slice(None, [], pool="mixed", all_nodes=True)
    spec_slice["spec"].pop("allNodes")
    spec_slice["spec"]["perDeviceNodeSelection"] = True
    spec_slice["spec"]["devices"] = [
        {**b.gpu_device("gpu-0"), "nodeName": "n1"},
        {**b.gpu_device("gpu-1"), "allNodes": True},
    ]
    inventory = Inventory.of(state_of(b.node("n1", CREATED), b.node("n2", CREATED), spec_slice))
    assert {d.name: inventory.nodes_of(d) for d in inventory.devices} == {"gpu-0": ["n1"], "gpu-1": ["n1", "n2"]}


def test_node_selector_operators() -> None:
    node = NodeInfo("n1", {"zone": "a", "gpus": "8"})

    def sel(*exprs: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        term: dict[str, Any] = {"matchExpressions": list(exprs)}
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}

    assert node_selector_matches(sel({"key": "zone", "operator": "In", "values": ["a", "b"]}), node)
    assert not node_selector_matches(sel({"key": "zone", "operator": "NotIn", "values": ["a"]}), node)
    assert node_selector_matches(sel({"key": "zone", "operator": "Exists"}), node)
    assert node_selector_matches(sel({"key": "rack", "operator": "DoesNotExist"}), node)
    assert node_selector_matches(sel({"key": "gpus", "operator": "Gt", "values": ["4"]}), node)
    assert not node_selector_matches(sel({"key": "gpus", "operator": "Lt", "values": ["4"]}), node)
    assert node_selector_matches(sel(fields=[{"key": "metadata.name", "operator": "In", "values": ["n1"]}]), node)
    assert not node_selector_matches({"nodeSelectorTerms": [{}]}, node)  # an empty term selects nothing
    # Terms are ORed.
    either = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        ]
    }
    assert node_selector_matches(either, node)


def test_without_node_objects_slices_name_the_nodes() -> None:
    state = state_of(b.resource_slice("worker-9", b.gpu_devices("worker-9", 1)))
    assert [n.name for n in cluster_nodes(state)] == ["worker-9"]


def test_device_taints_and_taint_rules() -> None:
    devices = [
        b.gpu_device("gpu-0", taints=[b.taint("nvidia.com/xid", "NoSchedule", "79")]),
        b.gpu_device("gpu-1"),
    ]
    rule = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-gpu-1", "uid": "rule-1"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "worker-0", "device": "gpu-1"},
            "taint": {"key": "maintenance", "effect": "NoExecute"},
        },
    }
    by_name = {d.name: d for d in advertised_devices(state_of(b.resource_slice("worker-0", devices), rule))}
    assert [t["key"] for t in by_name["gpu-0"].taints] == ["nvidia.com/xid"]
    assert [(t["key"], t["effect"]) for t in by_name["gpu-1"].taints] == [("maintenance", "NoExecute")]


def test_v1beta1_devices_nest_fields_under_basic() -> None:
    slice_obj = b.resource_slice("worker-0", [])
    slice_obj["spec"]["devices"] = [{"name": "gpu-0", "basic": {"attributes": {"uuid": {"string": "GPU-1"}}}}]
    (device,) = advertised_devices(state_of(slice_obj))
    assert device.uuid == "GPU-1"


def test_device_holders_are_allocated_live_claims_without_admin_access() -> None:
    held = b.claim("ml", "train", [b.request()], CREATED, allocated=[("gpu", "worker-0", "gpu-0")])
    watcher = b.claim(
        "gpu-ops",
        "watch",
        [b.request(admin_access=True)],
        CREATED,
        allocated=[("gpu", "worker-0", "gpu-0")],
        admin_access=True,
    )
    pending = b.claim("ml", "waiting", [b.request()], CREATED)
    holders = device_holders(state_of(held, watcher, pending))
    assert list(holders) == [("gpu.nvidia.com", "worker-0", "gpu-0")]
    assert holders[("gpu.nvidia.com", "worker-0", "gpu-0")]["metadata"]["name"] == "train"


def test_allocated_devices_record_claim_uid_node_and_device_together() -> None:
    claim = b.claim(
        "ml",
        "pair",
        [b.request(count=2)],
        CREATED,
        allocated=[("gpu", "worker-1", "gpu-2"), ("gpu", "worker-1", "gpu-3")],
    )
    results = allocated_devices(claim)
    assert [(r.claim_uid, r.node, r.pool, r.device, r.request) for r in results] == [
        (claim["metadata"]["uid"], "worker-1", "worker-1", "gpu-2", "gpu"),
        (claim["metadata"]["uid"], "worker-1", "worker-1", "gpu-3", "gpu"),
    ]
    assert results[0].as_evidence()["kind"] == "AllocationResult"


def test_allocation_node_from_a_label_selector_needs_the_nodes() -> None:
    claim = b.claim(
        "ml", "rack", [b.request()], CREATED, allocated=[("gpu", "fabric", "gpu-0")], node_selector={"rack": "7"}
    )
    nodes = [NodeInfo("n1", {"rack": "3"}), NodeInfo("n2", {"rack": "7"})]
    assert allocation_node(claim) is None
    assert allocation_node(claim, nodes) == "n2"
    unpinned = b.claim("ml", "any", [b.request()], CREATED, allocated=[("gpu", "net", "x")], node_selector={})
    assert allocation_node(unpinned, nodes) is None


def test_a_states_inventory_is_built_once_and_kept_with_it() -> None:
    objects = (b.node("n1", CREATED), b.resource_slice("n1", b.gpu_devices("n1", 2)))
    state = state_of(*objects)
    first = Inventory.of(state)
    assert Inventory.of(state) is first
    # An equal but separate state (another history as of another time) gets its own.
    other = state_of(*objects)
    assert other == state and Inventory.of(other) is not first
    assert [d.name for d in Inventory.of(other).devices] == [d.name for d in first.devices]


def test_a_restored_device_is_the_device_it_was_stored_from() -> None:
    """``restored_device`` sets the fields without the frozen dataclass's ``__init__``: the device equals,
    pickles and is replaced as the one built, and a field added to ``AdvertisedDevice`` without being
    restored fails here."""
    rule = b.device_taint_rule("drain", b.taint("maintenance", "NoSchedule"), pool="a100-0", device="gpu-1")
    local = b.resource_slice("a100-0", b.gpu_devices("a100-0", 2))
    by_label = b.resource_slice(None, [b.gpu_device("fabric-0")], pool="fabric", node_selector={"gpu": "h100"})
    devices = advertised_devices(state_of(local, by_label, rule))
    assert any(d.extra_taints for d in devices) and any(d.reach.node_selector for d in devices)
    fields = [f.name for f in dataclasses.fields(devices[0])]
    for device in devices:
        restored = restored_device(*[getattr(device, name) for name in fields])
        assert restored == device
        assert set(vars(restored)) - {"id"} == set(fields)
        assert restored.id == device.id and restored.label == device.label
        # A forked selector evaluation sends its answer back pickled (domain.allocator.limits).
        assert pickle.loads(pickle.dumps(restored)) == device  # noqa: S301 - our own bytes
        assert dataclasses.replace(restored, name="other").name == "other"
