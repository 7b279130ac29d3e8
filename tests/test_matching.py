"""The allocation simulator and match-devices: selectors, counts per node, holders, taints."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from demo import builders as b
from domain.allocator.cel import SelectorCompileError
from domain.allocator.matching import (
    DeviceClassNotFound,
    Stage,
    claim_requests,
    class_drivers,
    class_matches,
    match_devices,
    missing_inventory,
    selector_references,
    simulate,
    tolerates,
)
from domain.cluster.state import ClusterState, MemoryHistory
from domain.inventory.devices import Inventory

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CREATED = datetime(2026, 10, 1, tzinfo=UTC)
NS = "ml"
MEM = "device.capacity['gpu.nvidia.com'].memory"
ATTR = "device.attributes['gpu.nvidia.com']"


def state_of(*objects: dict[str, Any]) -> ClusterState:
    return MemoryHistory([(T0, list(objects))]).state


def gpu_node(name: str, count: int = 4, model: dict[str, str] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return [
        b.node(name, CREATED),
        b.resource_slice(name, b.gpu_devices(name, count, model or b.A100_40GB, **kwargs)),
    ]


def claim(name: str, *requests: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return b.claim(NS, name, list(requests) or [b.request()], CREATED, **kwargs)


def run(state: ClusterState, *claims: dict[str, Any], nodes: list[str] | None = None) -> Any:
    return simulate(Inventory.of(state), list(claims), nodes=nodes)


# --- match-devices ---------------------------------------------------------------------------------


def test_match_devices_lists_matches_with_their_node() -> None:
    state = state_of(b.device_class(), *gpu_node("a100-0", 2), *gpu_node("h100-0", 2, b.H100_80GB))
    out = match_devices(state, f"{ATTR}.architecture == 'Hopper'")
    assert out["total"] == 4
    assert out["matched"] == [
        {"driver": "gpu.nvidia.com", "pool": "h100-0", "device": "gpu-0", "node": "h100-0"},
        {"driver": "gpu.nvidia.com", "pool": "h100-0", "device": "gpu-1", "node": "h100-0"},
    ]
    assert out["errors"] == []


def test_match_devices_compares_quantities_across_units() -> None:
    devices = [
        b.gpu_device("gpu-0", memory="81920Mi"),
        b.gpu_device("gpu-1", memory="80Gi"),
        b.gpu_device("gpu-2", memory="79Gi"),
    ]
    state = state_of(b.node("n", CREATED), b.resource_slice("n", devices))
    out = match_devices(state, f"{MEM}.compareTo(quantity('80Gi')) >= 0")
    assert [m["device"] for m in out["matched"]] == ["gpu-0", "gpu-1"]


def test_match_devices_reports_evaluation_errors_per_device() -> None:
    devices = [b.gpu_device("gpu-0", extra_attributes={"sharing": "mps"}), b.gpu_device("gpu-1")]
    state = state_of(b.node("n", CREATED), b.resource_slice("n", devices))
    out = match_devices(state, f"{ATTR}.sharing == 'mps'")
    assert [m["device"] for m in out["matched"]] == ["gpu-0"]
    assert [e["device"] for e in out["errors"]] == ["gpu.nvidia.com/n/gpu-1"]
    assert "sharing" in out["errors"][0]["error"]


def test_match_devices_within_a_class_and_bad_input() -> None:
    mig = b.gpu_device("mig-0", extra_attributes={"type": "mig"})
    state = state_of(b.device_class(), b.node("n", CREATED), b.resource_slice("n", [b.gpu_device("gpu-0"), mig]))
    assert [m["device"] for m in match_devices(state, "true")["matched"]] == ["gpu-0", "mig-0"]
    within = match_devices(state, "true", class_name="gpu.nvidia.com")
    assert [m["device"] for m in within["matched"]] == ["gpu-0"]
    with pytest.raises(SelectorCompileError):
        match_devices(state, "device.attributes[")
    with pytest.raises(DeviceClassNotFound):
        match_devices(state, "true", class_name="nope.example.com")


def test_class_matches_counts_what_match_devices_lists_per_class() -> None:
    """The device classes page's counts, stored by the derivation: each class as match-devices sees it."""
    mig = b.gpu_device("mig-0", extra_attributes={"type": "mig"})
    broken = b.device_class("broken.example.com", selectors=[f"{ATTR}.sharing == 'mps'"])
    state = state_of(
        b.device_class(), broken, b.node("n", CREATED), b.resource_slice("n", [b.gpu_device("gpu-0"), mig])
    )
    counts = class_matches(state)
    assert set(counts) == {"gpu.nvidia.com", "broken.example.com"}
    for name, counted in counts.items():
        listed = match_devices(state, "true", class_name=name)
        assert counted == {"matched": len(listed["matched"]), "errors": len(listed["errors"]), "total": listed["total"]}
    assert counts["gpu.nvidia.com"] == {"matched": 1, "errors": 0, "total": 2}
    assert counts["broken.example.com"]["errors"] == 2


# --- what claims ask -------------------------------------------------------------------------------


def test_claim_requests_reads_exactly_first_available_and_templates() -> None:
    req = b.first_available_request("gpu", [b.subrequest("h100", count=2), b.subrequest("a100", count=4)])
    tpl = b.claim_template(NS, "t", [req, b.request("nic", "rdma.example.com", allocation_mode="All")])
    parsed = claim_requests(tpl)
    assert [r.name for r in parsed] == ["gpu", "nic"]
    assert [(a.name, a.count) for a in parsed[0].alternatives] == [("gpu/h100", 2), ("gpu/a100", 4)]
    assert parsed[0].prioritized and not parsed[1].prioritized
    assert parsed[1].alternatives[0].mode == "All"


def test_class_drivers_and_selector_references() -> None:
    assert class_drivers(b.device_class()) == {"gpu.nvidia.com"}
    assert class_drivers(b.device_class("any", selectors=["true"])) == set()
    refs = selector_references(f"{MEM}.compareTo(quantity('40Gi')) > 0 && {ATTR}.productName != ''")
    assert refs == [("capacity", "gpu.nvidia.com", "memory"), ("attributes", "gpu.nvidia.com", "productName")]


def test_tolerations() -> None:
    taint = {"key": "nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    assert tolerates(b.toleration("nvidia.com/xid", "Exists"), taint)
    assert tolerates(b.toleration("nvidia.com/xid", "Equal", "79"), taint)
    assert not tolerates(b.toleration("nvidia.com/xid", "Equal", "48"), taint)
    assert not tolerates(b.toleration("nvidia.com/xid", "Exists", effect="NoExecute"), taint)
    assert tolerates({"operator": "Exists"}, taint)  # an empty key with Exists tolerates everything


# --- the simulation --------------------------------------------------------------------------------


def test_selector_unsatisfiable_groups_devices_by_the_values_the_selector_reads() -> None:
    state = state_of(b.device_class(), *gpu_node("a-0", 4), *gpu_node("a-1", 4))
    sim = run(state, claim("big", b.request(selectors=[f"{MEM}.compareTo(quantity('40Gi')) > 0"])))
    assert sim.reason == "selector-unsatisfiable"
    message = sim.message()
    assert message.startswith("no device satisfies request gpu: 8 devices of class gpu.nvidia.com checked")
    assert "all 8 have memory 40Gi" in message


def test_quantities_in_other_units_group_together() -> None:
    devices = [b.gpu_device(f"gpu-{i}", memory=m) for i, m in enumerate(["81920Mi", "80Gi", "80Gi", "24Gi"])]
    state = state_of(b.device_class(), b.node("n", CREATED), b.resource_slice("n", devices))
    sim = run(state, claim("c", b.request(selectors=[f"{MEM}.compareTo(quantity('80Gi')) > 0"])))
    assert sim.reason == "selector-unsatisfiable"
    message = sim.message()
    # 81920Mi and 80Gi are one value: they group together, shown as most devices spell it.
    assert "3 have memory 80Gi and 1 has memory 24Gi, which the request selector" in message


def test_a_device_of_81920Mi_satisfies_80Gi() -> None:
    devices = [b.gpu_device("gpu-0", memory="81920Mi")]
    state = state_of(b.device_class(), b.node("n", CREATED), b.resource_slice("n", devices))
    sim = run(state, claim("c", b.request(selectors=[f"{MEM}.compareTo(quantity('80Gi')) >= 0"])))
    assert sim.reason is None
    assert sim.fitting_node is not None and sim.fitting_node.node == "n"


def test_class_selector_failures_are_reported_as_such() -> None:
    mig = [b.gpu_device(f"mig-{i}", extra_attributes={"type": "mig"}) for i in range(3)]
    state = state_of(b.device_class(), b.node("n", CREATED), b.resource_slice("n", mig))
    sim = run(state, claim("c"))
    assert sim.reason == "selector-unsatisfiable"
    message = sim.message()
    assert "3 devices of driver gpu.nvidia.com checked, none is in class gpu.nvidia.com" in message
    assert "all 3 have type mig, which the class selector" in message


def test_evaluation_errors_are_counted_in_the_summary() -> None:
    state = state_of(b.device_class(), *gpu_node("n", 2))
    sim = run(state, claim("c", b.request(selectors=[f"{ATTR}.sharing == 'mps'"])))
    assert sim.reason == "selector-unsatisfiable"
    assert "2 could not be evaluated" in sim.message()
    outcomes = {o["outcome"] for o in sim.device_outcomes()}
    assert outcomes == {"evaluation-error"}


def test_insufficient_when_matching_devices_are_spread_over_nodes() -> None:
    state = state_of(b.device_class(), *gpu_node("a-0", 3), *gpu_node("a-1", 3))
    sim = run(state, claim("four", b.request(count=4)))
    assert sim.reason == "insufficient-devices"
    message = sim.message()
    assert "needs 4 devices of class gpu.nvidia.com on one node" in message
    assert "on one node: 6 devices match in the cluster, but at most 3 are on one node (a-0: 3, a-1: 3)" in message


def test_requests_of_one_pod_share_a_node_and_do_not_share_devices() -> None:
    state = state_of(b.device_class(), *gpu_node("a-0", 6))
    first = claim("first", b.request(count=4))
    second = claim("second", b.request(count=4))
    sim = run(state, first, second)
    assert sim.reason == "insufficient-devices"
    assert "other requests already take 4 of the 6 matching devices on a-0, leaving 2" in sim.message()
    assert "of claim second" in sim.message()


def test_devices_in_use_name_the_holders() -> None:
    holder_a = claim("holder-a", b.request(count=2), allocated=[("gpu", "h-0", "gpu-0"), ("gpu", "h-0", "gpu-1")])
    holder_b = claim("holder-b", allocated=[("gpu", "h-0", "gpu-2")])
    state = state_of(b.device_class(), *gpu_node("h-0", 4, b.H100_80GB), holder_a, holder_b)
    sim = run(state, claim("want", b.request(count=2)))
    assert sim.reason == "devices-in-use"
    message = sim.message()
    assert "4 match on h-0, but 3 of them are allocated to other claims" in message
    assert "ml/holder-a (2), ml/holder-b (1)" in message
    held = [o for o in sim.device_outcomes() if o["outcome"] == "held"]
    assert {o["holder"] for o in held} == {"ml/holder-a", "ml/holder-b"}


def test_admin_access_ignores_holders() -> None:
    holder = claim("holder", allocated=[("gpu", "n", "gpu-0")])
    state = state_of(b.device_class(), *gpu_node("n", 1), holder)
    assert run(state, claim("admin", b.request(admin_access=True))).reason is None


def test_taints_block_unless_effect_none_or_tolerated() -> None:
    def state_with(effect: str) -> ClusterState:
        devices = b.gpu_devices("n", 2, taints=[b.taint("nvidia.com/xid", effect, "79")])
        return state_of(b.device_class(), b.node("n", CREATED), b.resource_slice("n", devices))

    blocked = run(state_with("NoSchedule"), claim("c"))
    assert blocked.reason == "devices-tainted"
    assert "carry taints the request does not tolerate: nvidia.com/xid=79:NoSchedule (2)" in blocked.message()
    assert run(state_with("NoExecute"), claim("c")).reason == "devices-tainted"
    assert run(state_with("None"), claim("c")).reason is None
    tolerant = claim("c", b.request(tolerations=[b.toleration("nvidia.com/xid", "Exists")]))
    assert run(state_with("NoSchedule"), tolerant).reason is None


def test_first_available_falls_through_to_the_second_subrequest() -> None:
    state = state_of(b.device_class(), *gpu_node("a-0", 2))
    req = b.first_available_request(
        "gpu",
        [b.subrequest("h100", selectors=[f"{ATTR}.architecture == 'Hopper'"]), b.subrequest("a100", count=2)],
    )
    sim = run(state, claim("sweep", req))
    assert sim.reason is None
    fit = sim.fitting_node
    assert fit is not None
    assert [(a.ask.name, [d.name for d in a.picked]) for a in fit.asks] == [("gpu/a100", ["gpu-0", "gpu-1"])]


def test_first_available_unsatisfiable_names_every_subrequest() -> None:
    state = state_of(b.device_class(), *gpu_node("a-0", 2))
    req = b.first_available_request(
        "gpu",
        [
            b.subrequest("h100", selectors=[f"{ATTR}.architecture == 'Hopper'"]),
            b.subrequest("big", selectors=[f"{MEM}.compareTo(quantity('80Gi')) >= 0"]),
        ],
    )
    sim = run(state, claim("sweep", req))
    assert sim.reason == "selector-unsatisfiable"
    message = sim.message()
    assert "subrequest h100: 2 devices of class gpu.nvidia.com checked, both have architecture Ampere" in message
    assert "subrequest big:" in message and "memory 40Gi" in message


def test_first_available_reports_the_subrequest_that_got_furthest() -> None:
    holder = claim("holder", allocated=[("gpu", "a-0", "gpu-0")])
    state = state_of(b.device_class(), *gpu_node("a-0", 1), holder)
    req = b.first_available_request(
        "gpu", [b.subrequest("h100", selectors=[f"{ATTR}.architecture == 'Hopper'"]), b.subrequest("a100")]
    )
    sim = run(state, claim("sweep", req))
    assert sim.reason == "devices-in-use"
    assert "ml/holder (1)" in sim.message()


def test_all_mode_needs_every_matching_device_free() -> None:
    holder = claim("holder", allocated=[("gpu", "n", "gpu-3")])
    state = state_of(b.device_class(), *gpu_node("n", 4), holder)
    sim = run(state, claim("all", b.request(allocation_mode="All")))
    assert sim.reason == "devices-in-use"
    free_state = state_of(b.device_class(), *gpu_node("n", 4))
    fit = run(free_state, claim("all", b.request(allocation_mode="All"))).fitting_node
    assert fit is not None and len(fit.asks[0].picked) == 4


def test_all_mode_refuses_a_pool_being_updated() -> None:
    partial = b.resource_slice("n", b.gpu_devices("n", 2), slice_count=2)
    state = state_of(b.device_class(), b.node("n", CREATED), partial)
    sim = run(state, claim("all", b.request(allocation_mode="All")))
    assert sim.reason == "insufficient-devices"
    assert "pool n is being updated" in sim.message()


def test_devices_reachable_from_no_node() -> None:
    orphan = b.resource_slice("gone-node", b.gpu_devices("gone-node", 2))
    state = state_of(b.device_class(), b.node("cpu-0", CREATED), orphan)
    sim = run(state, claim("c"))
    assert sim.reason == "insufficient-devices"
    assert "none is reachable from a node of the cluster (they are advertised for gone-node)" in sim.message()


def test_candidate_nodes_can_be_pinned() -> None:
    state = state_of(b.device_class(), *gpu_node("a-0", 1), *gpu_node("a-1", 2))
    assert run(state, claim("c", b.request(count=2)), nodes=["a-0"]).reason == "insufficient-devices"
    fit = run(state, claim("c", b.request(count=2)), nodes=["a-1"]).fitting_node
    assert fit is not None and fit.node == "a-1"


def test_missing_inventory_per_class_driver() -> None:
    state = state_of(b.device_class(), *gpu_node("n", 1))
    inventory = Inventory.of(state)
    assert missing_inventory(inventory, claim("c")) is None
    other = state_of(b.device_class("tpu.example.com", driver="tpu.example.com"), *gpu_node("n", 1))
    why = missing_inventory(Inventory.of(other), claim("c", b.request(device_class="tpu.example.com")))
    assert why == "no ResourceSlice advertises any device of driver tpu.example.com (request gpu)"
    empty = state_of(b.device_class())
    assert missing_inventory(Inventory.of(empty), claim("c")) is not None


def test_stage_order() -> None:
    assert Stage.NO_MATCH < Stage.TOO_FEW < Stage.IN_USE < Stage.TAINTED < Stage.FITS


def test_insufficient_when_the_whole_cluster_has_too_few() -> None:
    state = state_of(b.device_class(), *gpu_node("a-0", 2))
    sim = run(state, claim("eight", b.request(count=8)))
    assert sim.reason == "insufficient-devices"
    assert sim.message() == (
        "request gpu needs 8 devices of class gpu.nvidia.com on one node, but only 2 devices match in the cluster "
        "(a-0: 2)"
    )
