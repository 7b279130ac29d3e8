"""Pending Pods that ask the same share one simulation per inventory, told with their own claims' names."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from demo import builders as b
from domain.allocator.matching import Simulation, simulate
from domain.allocator.shared_simulations import simulate_pod
from domain.cluster.state import ClusterState, MemoryHistory
from domain.inventory.devices import Inventory

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CREATED = datetime(2026, 10, 1, tzinfo=UTC)
NS = "ml"


def state_of(*objects: dict[str, Any]) -> ClusterState:
    return MemoryHistory([(T0, list(objects))]).state


def cluster(*claims: dict[str, Any]) -> ClusterState:
    """Two nodes of two A100s; node a-0's both held by ``busy``."""
    busy = b.claim(
        NS, "busy", [b.request(count=2)], CREATED, allocated=[("gpu", "a-0", "gpu-0"), ("gpu", "a-0", "gpu-1")]
    )
    return state_of(
        b.device_class(),
        b.node("a-0", CREATED),
        b.resource_slice("a-0", b.gpu_devices("a-0", 2)),
        b.node("a-1", CREATED),
        b.resource_slice("a-1", b.gpu_devices("a-1", 2)),
        busy,
        *claims,
    )


def told(sim: Simulation) -> tuple[Any, ...]:
    """Everything a verdict reads of a simulation."""
    best = sim.best
    return (
        sim.reason,
        sim.message(),
        sim.device_outcomes(),
        sim.claim_names,
        [(a.claim_uid, a.claim_name) for a in sim.requests],
        [(f.node, f.score(), [(a.ask.name, a.stage, [d.id for d in a.picked]) for a in f.asks]) for f in sim.fits],
        best.node if best else None,
    )


def test_equal_asks_share_one_simulation_and_each_is_told_with_its_own_claim() -> None:
    first = b.claim(NS, "sweep-a-gpu", [b.request(count=3)], CREATED)
    second = b.claim(NS, "sweep-b-gpu", [b.request(count=3)], CREATED)
    inventory = Inventory.of(cluster(first, second))
    shared_first = simulate_pod(inventory, [first])
    shared_second = simulate_pod(inventory, [second])
    assert shared_second.requests[0].checks is shared_first.requests[0].checks  # simulated once
    # Each reads exactly as its own simulation would.
    assert told(shared_first) == told(simulate(inventory, [first]))
    assert told(shared_second) == told(simulate(inventory, [second]))
    assert shared_second.reason == "insufficient-devices"
    assert "sweep-b-gpu" not in shared_first.message() or "sweep-a-gpu" not in shared_second.message()


def test_a_pod_of_two_claims_is_told_which_claim_fails() -> None:
    def pod_claims(prefix: str) -> list[dict[str, Any]]:
        return [
            b.claim(NS, f"{prefix}-small", [b.request(count=1)], CREATED),
            b.claim(NS, f"{prefix}-big", [b.request(count=2)], CREATED),
        ]

    one, two = pod_claims("one"), pod_claims("two")
    inventory = Inventory.of(cluster(*one, *two))
    simulate_pod(inventory, one)
    shared = simulate_pod(inventory, two)
    alone = simulate(inventory, two)
    assert told(shared) == told(alone)
    assert shared.reason == "devices-in-use"
    assert "of claim two-" in shared.message() and "one-" not in shared.message()


def test_a_claim_holding_devices_is_simulated_on_its_own() -> None:
    spec = [b.request(count=2)]
    plain = b.claim(NS, "plain", spec, CREATED)
    holding = b.claim(NS, "holding", spec, CREATED, allocated=[("gpu", "a-1", "gpu-0")])
    inventory = Inventory.of(cluster(plain, holding))
    shared = simulate_pod(inventory, [plain])
    own = simulate_pod(inventory, [holding])
    assert own.requests[0].checks is not shared.requests[0].checks
    assert told(own) == told(simulate(inventory, [holding]))
    # Its own device on a-1 is not "held by another claim", as it is for the claim that holds nothing.
    assert "ml/holding (1)" in shared.message() and "ml/holding" not in own.message()


def test_pinned_pods_and_sibling_holders_do_not_share_with_free_ones() -> None:
    free = b.claim(NS, "free", [b.request(count=1)], CREATED)
    pinned = b.claim(NS, "pinned", [b.request(count=1)], CREATED)
    sibling = b.claim(NS, "sibling", [b.request(count=1)], CREATED, allocated=[("gpu", "a-1", "gpu-1")])
    pinned_too = b.claim(NS, "pinned-too", [b.request(count=1)], CREATED)
    inventory = Inventory.of(cluster(free, pinned, sibling, pinned_too))
    assert simulate_pod(inventory, [free]).best.node == "a-1"  # type: ignore[union-attr]
    on_a0 = simulate_pod(inventory, [pinned], nodes=["a-0"])
    assert told(on_a0) == told(simulate(inventory, [pinned], nodes=["a-0"]))
    assert on_a0.reason == "devices-in-use" and on_a0.pinned == ["a-0"]
    with_sibling = simulate_pod(inventory, [pinned_too], nodes=["a-1"], sibling_claims=["sibling"])
    assert told(with_sibling) == told(simulate(inventory, [pinned_too], nodes=["a-1"], sibling_claims=["sibling"]))


def test_a_new_inventory_simulates_again() -> None:
    first = b.claim(NS, "first", [b.request(count=1)], CREATED)
    before = simulate_pod(Inventory.of(cluster(first)), [first])
    after_state = state_of(
        b.device_class(), b.node("a-0", CREATED), b.resource_slice("a-0", b.gpu_devices("a-0", 2)), first
    )
    after = simulate_pod(Inventory.of(after_state), [first])
    assert before.best.node == "a-1" and after.best.node == "a-0"  # type: ignore[union-attr]


def test_past_the_kept_asks_the_oldest_is_simulated_again(monkeypatch: Any) -> None:
    from domain.allocator import shared_simulations

    monkeypatch.setattr(shared_simulations, "_KEPT", 1)
    one = [b.claim(NS, f"one-{i}", [b.request(count=1)], CREATED) for i in range(2)]
    two = [b.claim(NS, f"two-{i}", [b.request(count=3)], CREATED) for i in range(2)]
    inventory = Inventory.of(cluster(*one, *two))
    for claim in (one[0], two[0], one[1], two[1]):  # each ask evicts the other
        assert told(simulate_pod(inventory, [claim])) == told(simulate(inventory, [claim]))
