"""Consumable capacity: devices with allowMultipleAllocations give each claim a share of their capacity."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from demo import builders as b
from domain.allocator.matching import match_devices, simulate
from domain.cluster.quantity import Quantity
from domain.cluster.state import ClusterState, MemoryHistory
from domain.inventory.devices import AdvertisedDevice, Inventory, Reach
from domain.inventory.sharing import Unfit, held_fraction, round_request, share_of
from tests.snapshot_cli import AT, explain_verdict

CREATED = datetime(2026, 10, 1, tzinfo=UTC)
NS = "ml"
NODE = "s-0"
GPU = b.GPU_DRIVER
STEPPED = b.request_policy(default="10Gi", min="10Gi", step="10Gi", max="80Gi")


def cluster(*consumed: str, policy: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """gpu-3 on s-0 shares 80Gi of memory; each of ``consumed`` is held by ml/share-<letter>."""
    objects = [
        b.node(NODE, CREATED),
        b.device_class(),
        b.resource_slice(NODE, [b.shared_gpu("gpu-3", NODE, policy=policy)]),
    ]
    for i, amount in enumerate(consumed):
        result = b.shared_result("gpu", NODE, "gpu-3", {"memory": amount})
        objects.append(b.claim(NS, f"share-{'abc'[i]}", [b.request()], CREATED, allocated=[result]))
    return objects


def pending(memory: str | None, name: str = "share") -> list[dict[str, Any]]:
    req = b.request() if memory is None else b.with_capacity(b.request(), {"memory": memory})
    claim = b.claim(NS, name, [req], CREATED)
    pod = b.pod(
        NS,
        "infer",
        CREATED,
        claims=[("gpu", {"claim": name})],
        conditions=[b.unschedulable(AT, "0/1 nodes are available: 1 cannot allocate all claims.")],
    )
    return [claim, pod]


def run(*objects: dict[str, Any], claim: str = "share") -> Any:
    state: ClusterState = MemoryHistory([(AT, list(objects))]).state
    found = state.find("ResourceClaim", NS, claim)
    assert found is not None
    return simulate(Inventory.of(state), [found])


# --- explain, end to end ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_too_little_capacity_left_names_the_holders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdict = explain_verdict(tmp_path, capsys, [*cluster("70Gi"), *pending("20Gi")], f"{NS}/infer")
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "devices-in-use")
    assert "gpu-3 has 10Gi of memory left, the request needs 20Gi: ml/share-a holds 70Gi" in verdict["message"]


@pytest.mark.django_db
def test_a_request_that_fits_the_capacity_left_is_not_blocked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verdict = explain_verdict(tmp_path, capsys, [*cluster("60Gi"), *pending("20Gi")], f"{NS}/infer")
    assert verdict["reason"] == "waiting-for-scheduler"
    assert f"fit on {NODE} ({GPU}/{NODE}/gpu-3)" in verdict["message"]


# --- the simulator ---------------------------------------------------------------------------------


def test_shares_of_several_claims_add_up() -> None:
    assert run(*cluster("30Gi", "30Gi"), *pending("20Gi")).reason is None
    full = run(*cluster("30Gi", "40Gi"), *pending("20Gi"))
    assert full.reason == "devices-in-use"
    assert "ml/share-a holds 30Gi and ml/share-b holds 40Gi" in full.message()


def test_a_request_without_amount_takes_the_whole_capacity_or_the_policy_default() -> None:
    assert run(*cluster("10Gi"), *pending(None)).reason == "devices-in-use"  # no policy: all 80Gi
    assert run(*cluster("10Gi", policy=STEPPED), *pending(None)).reason is None  # default 10Gi


def test_the_request_is_rounded_up_by_the_policy_before_it_is_compared() -> None:
    # 20Gi held leaves 60Gi: 61Gi rounds up to 70Gi and no longer fits
    short = run(*cluster("20Gi", policy=STEPPED), *pending("61Gi"))
    assert short.reason == "devices-in-use"
    assert "gpu-3 has 60Gi of memory left, the request needs 70Gi: ml/share-a holds 20Gi" in short.message()
    assert run(*cluster("20Gi", policy=STEPPED), *pending("60Gi")).reason is None


def test_a_request_the_policy_cannot_grant_matches_no_device() -> None:
    sim = run(
        *cluster(policy=b.request_policy(default="10Gi", valid_values=["10Gi", "20Gi", "40Gi"])), *pending("50Gi")
    )
    assert sim.reason == "selector-unsatisfiable"
    assert "1 cannot give memory 50Gi (gpu-3 its requestPolicy for memory allows at most 40Gi)" in sim.message()
    outcome = next(o for o in sim.device_outcomes() if o["device"] == "gpu-3")
    assert outcome["outcome"] == "capacity-unfit" and outcome["requested"] == "50Gi"


def test_an_unshared_device_with_too_little_capacity_matches_no_device() -> None:
    objects = [b.node(NODE, CREATED), b.device_class(), b.resource_slice(NODE, [b.gpu_device("gpu-0", memory="40Gi")])]
    sim = run(*objects, *pending("80Gi"))
    assert sim.reason == "selector-unsatisfiable" and "gpu-0 has 40Gi" in sim.message()
    assert run(*objects, *pending("40Gi")).reason is None


def test_admin_access_shares_hold_no_capacity() -> None:
    objects = cluster()
    result = {**b.shared_result("gpu", NODE, "gpu-3", {"memory": "80Gi"}), "adminAccess": True}
    objects.append(b.claim(NS, "monitor", [b.request(admin_access=True)], CREATED, allocated=[result]))
    assert run(*objects, *pending("20Gi")).reason is None


def test_two_requests_of_one_pod_share_the_device_while_capacity_lasts() -> None:
    requests = [
        b.with_capacity(b.request("a"), {"memory": "40Gi"}),
        b.with_capacity(b.request("b"), {"memory": "40Gi"}),
    ]
    two = b.claim(NS, "share", requests, CREATED)
    sim = run(*cluster(), two)
    assert sim.reason is None and [[d.name for d in a.picked] for a in sim.fitting_node.asks] == [["gpu-3"], ["gpu-3"]]
    assert run(*cluster("10Gi"), two).reason == "insufficient-devices"  # the second finds 30Gi after the first


def test_match_devices_says_when_no_capacity_is_left() -> None:
    state = MemoryHistory([(AT, cluster("50Gi", "30Gi"))]).state
    [entry] = match_devices(state, "device.allowMultipleAllocations")["matched"]
    assert entry["available"] is False
    assert entry["unavailable"] == "capacity memory: 0 of 80Gi free (ml/share-a holds 50Gi and ml/share-b holds 30Gi)"
    [free] = match_devices(MemoryHistory([(AT, cluster("50Gi"))]).state, "device.allowMultipleAllocations")["matched"]
    assert "available" not in free


def test_held_fraction_of_a_share() -> None:
    state = MemoryHistory([(AT, cluster("20Gi"))]).state
    inventory = Inventory.of(state)
    assert held_fraction(inventory, b.shared_result("gpu", NODE, "gpu-3", {"memory": "20Gi"})) == Fraction(1, 4)


# --- request policies ------------------------------------------------------------------------------

Q = Quantity.parse


@pytest.mark.parametrize(
    ("policy", "requested", "consumed"),
    [
        (None, None, "80Gi"),  # nothing asked, no policy: the whole capacity
        (None, "12Gi", "12Gi"),
        (b.request_policy(default="8Gi"), None, "8Gi"),
        (b.request_policy(default="10Gi", valid_values=["10Gi", "20Gi", "40Gi"]), "15Gi", "20Gi"),
        (b.request_policy(default="10Gi", valid_values=["10Gi", "20Gi", "40Gi"]), "40Gi", "40Gi"),
        (b.request_policy(default="10Gi", valid_values=["10Gi", "20Gi", "40Gi"]), "41Gi", None),
        (STEPPED, "5Gi", "10Gi"),  # below min: min
        (STEPPED, "11Gi", "20Gi"),  # min + k*step, rounded up
        (STEPPED, "80Gi", "80Gi"),
        (STEPPED, "79Gi", "80Gi"),
        (STEPPED, "81Gi", None),  # above max
        (b.request_policy(default="1", min="1", max="4"), "1500m", "1500m"),  # no step: as asked
        (b.request_policy(default="1", min="500m", step="500m"), "1.2", "1500m"),
        (b.request_policy(default="1", min="1"), "100", "100"),  # no max: as asked (the capacity caps it)
    ],
)
def test_round_request(policy: dict[str, Any] | None, requested: str | None, consumed: str | None) -> None:
    got = round_request(Q("80Gi"), policy, Q(requested) if requested else None)
    assert (str(got) if got is not None else None) == (str(Q(consumed)) if consumed else None)


def test_share_of_names_what_a_device_cannot_give() -> None:
    def device(entry: dict[str, Any]) -> AdvertisedDevice:
        return AdvertisedDevice(GPU, "p", entry["name"], entry, Reach(all_nodes=True), "s", "u", None, 1, True)

    shared = device(b.shared_gpu("gpu-3", NODE, policy=STEPPED))
    assert {k: str(v) for k, v in share_of(shared, {"memory": Q("15Gi")}).items()} == {f"{GPU}/memory": "20Gi"}
    spelt_otherwise = share_of(shared, {f"{GPU}/memory": Q("15Gi")})  # the allocator reads names as written
    assert isinstance(spelt_otherwise, Unfit) and spelt_otherwise.why == f"has no {GPU}/memory"
    missing = share_of(shared, {"bandwidth": Q("1")})
    assert isinstance(missing, Unfit) and missing.why == "has no bandwidth"
    too_big = share_of(device(b.shared_gpu("gpu-4", NODE)), {"memory": Q("100Gi")})
    assert isinstance(too_big, Unfit) and too_big.why == "has 80Gi"
    assert share_of(device(b.gpu_device("gpu-0")), {"memory": Q("20Gi")}) == {}  # unshared: a bound, no share
