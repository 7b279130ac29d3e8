"""Claim constraints: matchAttribute and distinctAttribute limit which devices go together."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from demo import builders as b
from domain.allocator.constraints import MATCH, Constraint, claim_constraints, violated
from domain.allocator.matching import simulate
from domain.allocator.picking import Choice, search
from domain.cluster.state import ClusterState, MemoryHistory
from domain.inventory.devices import AdvertisedDevice, Inventory, Reach
from tests.snapshot_cli import AT, explain_verdict

CREATED = datetime(2026, 10, 1, tzinfo=UTC)
NS = "ml"
NODE = "a-0"
GPU = b.GPU_DRIVER
PRODUCT = f"{GPU}/productName"
BUS = "resource.kubernetes.io/pciBusID"
ATTR = f"device.attributes['{GPU}']"


def node_with(*devices: dict[str, Any], name: str = NODE) -> list[dict[str, Any]]:
    return [b.node(name, CREATED), b.resource_slice(name, list(devices))]


def a100(name: str, **kwargs: Any) -> dict[str, Any]:
    return b.gpu_device(name, node=NODE, **{**b.A100_40GB, **kwargs})


def h100(name: str, **kwargs: Any) -> dict[str, Any]:
    return b.gpu_device(name, node=NODE, **{**b.H100_80GB, **kwargs})


def gpus_claim(*constraints: dict[str, Any], requests: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    reqs = requests or [b.request("gpus", count=2)]
    return b.claim(NS, "gpus", reqs, CREATED, constraints=list(constraints))


def pending_pod(claim: dict[str, Any]) -> list[dict[str, Any]]:
    pod = b.pod(
        NS,
        "train",
        CREATED,
        claims=[("gpus", {"claim": claim["metadata"]["name"]})],
        conditions=[b.unschedulable(AT, "0/1 nodes are available: 1 cannot allocate all claims.")],
    )
    return [claim, pod]


def run(*objects: dict[str, Any]) -> Any:
    state: ClusterState = MemoryHistory([(AT, list(objects))]).state
    claim = state.find("ResourceClaim", NS, "gpus")
    assert claim is not None
    return simulate(Inventory.of(state), [claim])


def picked(sim: Any) -> list[list[str]]:
    return [[d.name for d in a.picked] for a in sim.fitting_node.asks]


# --- explain, end to end ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_two_models_on_one_node_do_not_match_an_attribute(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [
        b.device_class(),
        *node_with(a100("gpu-0"), h100("gpu-1")),
        *pending_pod(gpus_claim(b.match_attribute(PRODUCT))),
    ]
    verdict = explain_verdict(tmp_path, capsys, objects, f"{NS}/train")
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "insufficient-devices")
    assert verdict["message"] == (
        f"request gpus needs 2 devices of class {GPU} with the same {PRODUCT} on one node: {NODE} has 2 free "
        "but productName differs: NVIDIA A100-SXM4-40GB, NVIDIA H100 80GB HBM3"
    )


@pytest.mark.django_db
def test_two_of_one_model_match_the_attribute(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [
        b.device_class(),
        *node_with(a100("gpu-0"), a100("gpu-1")),
        *pending_pod(gpus_claim(b.match_attribute(PRODUCT))),
    ]
    verdict = explain_verdict(tmp_path, capsys, objects, f"{NS}/train")
    assert verdict["reason"] == "waiting-for-scheduler"
    assert f"fit on {NODE} ({GPU}/{NODE}/gpu-0, {GPU}/{NODE}/gpu-1)" in verdict["message"]


# --- the simulator ---------------------------------------------------------------------------------


def test_the_search_skips_a_device_that_breaks_the_match() -> None:
    sim = run(
        b.device_class(),
        *node_with(a100("gpu-0"), h100("gpu-1"), a100("gpu-2")),
        gpus_claim(b.match_attribute(PRODUCT)),
    )
    assert sim.reason is None and picked(sim) == [["gpu-0", "gpu-2"]]


def test_a_device_without_the_attribute_cannot_satisfy_match_attribute() -> None:
    odd = a100("gpu-1")
    odd["attributes"].pop("productName")
    sim = run(b.device_class(), *node_with(a100("gpu-0"), odd), gpus_claim(b.match_attribute(PRODUCT)))
    assert sim.reason == "insufficient-devices"
    assert "productName differs: (none), NVIDIA A100-SXM4-40GB" in sim.message()


def test_distinct_attribute_needs_different_values() -> None:
    same_bus = [a100("gpu-0", pci_bus_id="0000:18:00.0"), a100("gpu-1", pci_bus_id="0000:18:00.0")]
    sim = run(b.device_class(), *node_with(*same_bus), gpus_claim(b.distinct_attribute(BUS)))
    assert sim.reason == "insufficient-devices"
    assert f"with distinct {BUS} on one node" in sim.message() and "pciBusID repeats" in sim.message()
    apart = run(b.device_class(), *node_with(a100("gpu-0"), a100("gpu-1")), gpus_claim(b.distinct_attribute(BUS)))
    assert apart.reason is None


def test_distinct_attribute_keeps_two_requests_off_one_shared_device() -> None:
    """A device with allowMultipleAllocations could serve both requests; distinctAttribute forbids it."""
    requests = [
        b.with_capacity(b.request("a"), {"memory": "10Gi"}),
        b.with_capacity(b.request("b"), {"memory": "10Gi"}),
    ]
    one = node_with(b.shared_gpu("gpu-0", NODE))
    assert picked(run(b.device_class(), *one, gpus_claim(requests=requests))) == [["gpu-0"], ["gpu-0"]]
    sim = run(b.device_class(), *one, gpus_claim(b.distinct_attribute(BUS), requests=requests))
    assert sim.reason == "insufficient-devices"
    two = node_with(b.shared_gpu("gpu-0", NODE), b.shared_gpu("gpu-1", NODE))
    assert picked(run(b.device_class(), *two, gpus_claim(b.distinct_attribute(BUS), requests=requests))) == [
        ["gpu-0"],
        ["gpu-1"],
    ]


def test_a_constraint_naming_the_parent_request_covers_the_chosen_subrequest() -> None:
    any_gpu = b.first_available_request("gpu", [b.subrequest("any", count=2)])
    devices = node_with(a100("gpu-0"), h100("gpu-1"), a100("gpu-2"))
    sim = run(b.device_class(), *devices, gpus_claim(b.match_attribute(PRODUCT, ["gpu"]), requests=[any_gpu]))
    assert picked(sim) == [["gpu-0", "gpu-2"]]
    named = run(b.device_class(), *devices, gpus_claim(b.match_attribute(PRODUCT, ["gpu/any"]), requests=[any_gpu]))
    assert picked(named) == [["gpu-0", "gpu-2"]]
    other = run(b.device_class(), *devices, gpus_claim(b.match_attribute(PRODUCT, ["gpu/other"]), requests=[any_gpu]))
    assert picked(other) == [["gpu-0", "gpu-1"]]


def test_a_constraint_across_requests_searches_the_earlier_requests_choices() -> None:
    """Greedy, "big" takes the A100 and "hopper" finds no match; the claim-wide search gives "big" an H100."""
    requests = [b.request("big", count=1), b.request("hopper", count=1, selectors=[f"{ATTR}.architecture == 'Hopper'"])]
    devices = node_with(a100("gpu-0"), h100("gpu-1"), h100("gpu-2"))
    sim = run(b.device_class(), *devices, gpus_claim(b.match_attribute(PRODUCT), requests=requests))
    assert sim.reason is None and picked(sim) == [["gpu-1"], ["gpu-2"]]
    only_one_h100 = run(
        b.device_class(),
        *node_with(a100("gpu-0"), h100("gpu-1")),
        gpus_claim(b.match_attribute(PRODUCT), requests=requests),
    )
    assert only_one_h100.reason == "insufficient-devices"
    assert "other requests took devices with productName NVIDIA A100-SXM4-40GB" in only_one_h100.message()


def test_constraints_are_read_from_claims_and_templates() -> None:
    constraints = [b.match_attribute(PRODUCT, ["gpus"]), b.distinct_attribute(BUS), {"requests": ["x"]}]
    claim = gpus_claim(*constraints)
    template = b.claim_template(NS, "t", [b.request("gpus")], constraints=constraints)
    expected = (Constraint(MATCH, PRODUCT, ("gpus",)), Constraint("distinctAttribute", BUS, ()))
    assert claim_constraints(claim) == claim_constraints(template) == expected


def test_violated_compares_values_with_their_type() -> None:
    def device(name: str, numa: dict[str, Any]) -> AdvertisedDevice:
        entry = {"name": name, "attributes": {"numa": numa}}
        return AdvertisedDevice(GPU, "p", name, entry, Reach(all_nodes=True), "s", "u", None, 1, True)

    match = [Constraint(MATCH, f"{GPU}/numa")]
    one, one_str = device("d0", {"int": 1}), device("d1", {"string": "1"})
    assert violated(match, [("r", one)], "r", device("d2", {"int": 1})) is None
    assert violated(match, [("r", one)], "r", one_str) == match[0]
    assert violated(match, [("other", one)], "r", one_str) == match[0]  # no request names: every request
    assert violated([Constraint(MATCH, f"{GPU}/numa", ("r",))], [("other", one)], "r", one_str) is None


def test_search_gives_up_after_its_budget() -> None:
    devices = [
        AdvertisedDevice(
            GPU,
            "p",
            f"d{i}",
            {"name": f"d{i}", "attributes": {"v": {"int": i}}},
            Reach(all_nodes=True),
            "s",
            "u",
            None,
            1,
            True,
        )
        for i in range(30)
    ]
    choice = Choice("r", 3, devices)
    outcome = search([[choice]], [Constraint(MATCH, f"{GPU}/v")], lambda c, d: lambda: None, budget=100)
    assert outcome.picks is None and outcome.exhausted
    assert outcome.blocking_constraint() == Constraint(MATCH, f"{GPU}/v")
