"""Partitionable devices: a whole GPU and its MIG partitions draw on one counter set of their pool."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from demo import builders as b
from domain.allocator.matching import Stage, simulate
from domain.cluster.state import ClusterState, MemoryHistory
from domain.inventory.devices import Inventory
from domain.inventory.sharing import Ledger, counter_sets, held_fraction
from tests.snapshot_cli import AT, cli_json, explain_verdict, import_objects

CREATED = datetime(2026, 10, 1, tzinfo=UTC)
NS = "ml"
NODE = "h100-0"
GPU = b.GPU_DRIVER
MIG_CLASS = "mig.nvidia.com"
ANY_CLASS = "any.nvidia.com"
MIG = f"device.driver == '{GPU}' && device.attributes['{GPU}'].type == 'mig'"


def cluster(*allocated_partitions: int, counters_apart: bool = True) -> list[dict[str, Any]]:
    """One H100 advertised whole (gpu-0) and as two 3g.40gb partitions; ``allocated_partitions`` held by ml/part-N."""
    counters, devices = b.partitioned_gpu(NODE)
    if counters_apart:  # 1.35+: counter sets in a slice of their own
        slices = [b.counter_slice(NODE, [counters]), b.resource_slice(NODE, devices, slice_count=2)]
    else:  # 1.33/1.34: one slice listed both
        one = b.resource_slice(NODE, devices)
        one["spec"]["sharedCounters"] = [counters]
        slices = [one]
    objects = [
        b.node(NODE, CREATED),
        b.device_class(),
        b.device_class(MIG_CLASS, selectors=[MIG]),
        b.device_class(ANY_CLASS, selectors=[f"device.driver == '{GPU}'"]),
        *slices,
    ]
    for i in allocated_partitions:
        name = f"part-{'ab'[i]}"
        holder = b.claim(
            NS, name, [b.request(device_class=MIG_CLASS)], CREATED, allocated=[("gpu", NODE, f"gpu-0-mig-3g-{i}")]
        )
        objects.append(holder)
    return objects


def pending_pod(*claims: dict[str, Any]) -> list[dict[str, Any]]:
    pod = b.pod(
        NS,
        "train",
        AT - (AT - CREATED) / 2,
        claims=[(c["metadata"]["name"], {"claim": c["metadata"]["name"]}) for c in claims],
        conditions=[b.unschedulable(AT, "0/1 nodes are available: 1 cannot allocate all claims.")],
    )
    return [*claims, pod]


def whole_gpu_claim(name: str = "whole") -> dict[str, Any]:
    return b.claim(NS, name, [b.request()], CREATED)


def state_of(*objects: dict[str, Any]) -> ClusterState:
    return MemoryHistory([(AT, list(objects))]).state


def run(state: ClusterState, *claim_names: str) -> Any:
    claims = [state.find("ResourceClaim", NS, n) for n in claim_names]
    return simulate(Inventory.of(state), [c for c in claims if c is not None])


# --- explain, end to end ---------------------------------------------------------------------------

pytestmark_db = pytest.mark.django_db


@pytestmark_db
def test_a_held_partition_keeps_the_whole_gpu_from_fitting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdict = explain_verdict(tmp_path, capsys, [*cluster(0), *pending_pod(whole_gpu_claim())], f"{NS}/train")
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "devices-in-use")
    message = verdict["message"]
    assert "gpu-0 needs counter set gpu-0-counters memory 80Gi" in message
    assert "ml/part-a holds 40Gi of it" in message


@pytestmark_db
def test_with_no_partition_held_the_whole_gpu_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdict = explain_verdict(tmp_path, capsys, [*cluster(), *pending_pod(whole_gpu_claim())], f"{NS}/train")
    assert verdict["reason"] == "waiting-for-scheduler"
    assert f"fit on {NODE} ({GPU}/{NODE}/gpu-0)" in verdict["message"]


@pytestmark_db
def test_a_partition_fits_next_to_a_held_partition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = b.claim(NS, "part", [b.request(device_class=MIG_CLASS)], CREATED)
    verdict = explain_verdict(tmp_path, capsys, [*cluster(0), *pending_pod(part)], f"{NS}/train")
    assert verdict["reason"] == "waiting-for-scheduler"
    assert "gpu-0-mig-3g-1" in verdict["message"]


@pytestmark_db
def test_match_devices_says_which_matching_devices_counters_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import_objects(tmp_path, cluster(0))
    doc = cli_json(capsys, "match-devices", "--expression", f"device.driver == '{GPU}'")
    by_name = {m["device"]: m for m in doc["matched"]}
    assert by_name["gpu-0"]["available"] is False
    assert (
        by_name["gpu-0"]["unavailable"] == "counter set gpu-0-counters: memory 40Gi of 80Gi free (ml/part-a holds 40Gi)"
    )
    assert by_name["gpu-0-mig-3g-0"] == {**by_name["gpu-0-mig-3g-0"], "available": False}
    assert "ml/part-a" in by_name["gpu-0-mig-3g-0"]["unavailable"]
    assert "available" not in by_name["gpu-0-mig-3g-1"]  # free: the entry keeps its old shape


# --- the simulator ---------------------------------------------------------------------------------


def test_counter_sets_are_read_from_either_slice_layout() -> None:
    for apart in (True, False):
        sets = counter_sets(state_of(*cluster(counters_apart=apart)))
        assert {k: {n: str(q) for n, q in v.items()} for k, v in sets.items()} == {
            (GPU, NODE, "gpu-0-counters"): {"memory": "80Gi", "compute-slices": "7"}
        }
        sim = run(state_of(*cluster(1, counters_apart=apart), whole_gpu_claim()), "whole")
        assert sim.reason == "devices-in-use", apart


def test_both_partitions_held_name_both_holders() -> None:
    sim = run(state_of(*cluster(0, 1), whole_gpu_claim()), "whole")
    assert sim.reason == "devices-in-use"
    assert "ml/part-a holds 40Gi and ml/part-b holds 40Gi of it (0 of 80Gi free)" in sim.message()


def test_admin_access_results_consume_no_counters() -> None:
    objects = cluster()
    objects.append(
        b.claim(
            NS,
            "monitor",
            [b.request(device_class=MIG_CLASS, admin_access=True)],
            CREATED,
            allocated=[("gpu", NODE, "gpu-0-mig-3g-0")],
            admin_access=True,
        )
    )
    sim = run(state_of(*objects, whole_gpu_claim()), "whole")
    assert sim.reason is None and sim.fitting_node is not None


def test_a_pods_earlier_request_takes_counters_from_its_later_ones() -> None:
    part = b.claim(NS, "part", [b.request(device_class=MIG_CLASS)], CREATED)
    sim = run(state_of(*cluster(), part, whole_gpu_claim()), "part", "whole")
    assert sim.reason == "insufficient-devices"
    failing = sim.best.failing
    assert failing.ask.name == "gpu" and sim.analysis_for(failing).claim_name == "whole" and failing.taken_by_siblings == 1
    assert "the Pod's other requests already take 1 of the 1 matching devices on h100-0" in sim.message()


def test_two_partitions_are_found_past_the_whole_gpu() -> None:
    """Any device of the GPU, count 2: the whole GPU leaves nothing for a second, so the search backtracks."""
    claim = b.claim(NS, "two", [b.request(device_class=ANY_CLASS, count=2)], CREATED)
    sim = run(state_of(*cluster(), claim), "two")
    assert sim.reason is None
    assert [d.name for d in sim.fitting_node.asks[0].picked] == ["gpu-0-mig-3g-0", "gpu-0-mig-3g-1"]


def test_three_devices_of_one_gpu_do_not_fit_together() -> None:
    claim = b.claim(NS, "three", [b.request(device_class=ANY_CLASS, count=3)], CREATED)
    sim = run(state_of(*cluster(), claim), "three")
    assert sim.reason == "insufficient-devices"
    assert sim.message() == (
        "request gpu needs 3 devices of class any.nvidia.com on one node: h100-0 has 3 free, "
        "but no 3 of them fit counter set gpu-0-counters together"
    )


def test_all_mode_needs_counters_for_every_matching_device() -> None:
    whole_and_parts = b.claim(NS, "all", [b.request(device_class=ANY_CLASS, allocation_mode="All")], CREATED)
    sim = run(state_of(*cluster(), whole_and_parts), "all")
    assert sim.reason == "insufficient-devices"
    assert "counter set gpu-0-counters" in sim.message()
    all_whole = b.claim(NS, "all-whole", [b.request(allocation_mode="All")], CREATED)
    held = run(state_of(*cluster(0), all_whole), "all-whole")
    assert held.reason == "devices-in-use" and held.best.stage is Stage.IN_USE
    assert "ml/part-a holds 40Gi" in held.message()
    free = run(state_of(*cluster(), all_whole), "all-whole")
    assert free.reason is None and [d.name for d in free.fitting_node.asks[0].picked] == ["gpu-0"]


def test_device_outcomes_say_what_the_counters_lack() -> None:
    sim = run(state_of(*cluster(0), whole_gpu_claim()), "whole")
    outcomes = {o["device"]: o for o in sim.device_outcomes()}
    assert outcomes["gpu-0"]["outcome"] == "short"
    assert "ml/part-a holds 40Gi" in outcomes["gpu-0"]["unavailable"]


def test_held_fraction_of_a_partition_is_its_largest_counter_share() -> None:
    state = state_of(*cluster(0))
    inventory = Inventory.of(state)
    partition = {"driver": GPU, "pool": NODE, "device": "gpu-0-mig-3g-0"}
    assert held_fraction(inventory, partition) == Fraction(1, 2)  # max(40Gi/80Gi, 3/7)
    assert held_fraction(inventory, {**partition, "device": "gpu-0"}) == 1
    assert held_fraction(inventory, {**partition, "device": "gone"}) is None
    ledger = Ledger.of(inventory)
    holders = ledger.counter_holders((GPU, NODE, "gpu-0-counters"), "compute-slices")
    assert [(h.label, str(h.amount)) for h in holders] == [("ml/part-a", "3")]


@pytestmark_db
def test_the_playground_and_the_api_show_unavailable_matches(tmp_path: Path, admin_client: Any) -> None:
    import_objects(tmp_path, cluster(0))
    expression = f"device.attributes['{GPU}'].type == 'gpu'"
    page = admin_client.get("/c/demo/playground/", {"expression": expression}).content.decode()
    assert "no: counter set gpu-0-counters: memory 40Gi of 80Gi free (ml/part-a holds 40Gi)" in page
    api = admin_client.get("/api/match-devices", {"expression": expression}).json()
    assert [(m["device"], m["available"]) for m in api["matched"]] == [("gpu-0", False)]
    text = StringIO()
    call_command("match-devices", "--expression", expression, stdout=text)
    assert "gpu-0 on h100-0 (unavailable: counter set gpu-0-counters" in text.getvalue()


def test_a_shared_device_takes_its_counters_once() -> None:
    """A GPU with allowMultipleAllocations on the counter set: its second share takes no counters again."""
    counters, devices = b.partitioned_gpu(NODE, partitions=1)
    shared = {**b.shared_gpu("gpu-0", NODE), "consumesCounters": devices[0]["consumesCounters"]}
    objects = [
        b.node(NODE, CREATED),
        b.device_class(),
        b.device_class(MIG_CLASS, selectors=[MIG]),
        b.counter_slice(NODE, [counters]),
        b.resource_slice(NODE, [shared, devices[1]], slice_count=2),
        b.claim(
            NS, "share-a", [b.request()], CREATED, allocated=[b.shared_result("gpu", NODE, "gpu-0", {"memory": "20Gi"})]
        ),
        b.claim(NS, "share", [b.with_capacity(b.request(), {"memory": "20Gi"})], CREATED),
        b.claim(NS, "part", [b.request(device_class=MIG_CLASS)], CREATED),
    ]
    state = state_of(*objects)
    assert run(state, "share").reason is None
    two = b.claim(
        NS,
        "two",
        [b.with_capacity(b.request("a"), {"memory": "20Gi"}), b.with_capacity(b.request("b"), {"memory": "20Gi"})],
        CREATED,
    )
    assert run(state_of(*objects, two), "two").reason is None
    partition = run(state, "part")
    assert partition.reason == "devices-in-use"
    assert (
        "gpu-0-mig-3g-0 needs counter set gpu-0-counters memory 40Gi, but ml/share-a holds 80Gi of it"
        in partition.message()
    )
