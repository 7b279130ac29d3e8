"""DeviceTaintRules in their resource.k8s.io/v1 shape, judged by Claimline's simulation and by Kubernetes 1.37's own
allocator (the oracle patches rules into slices as the scheduler's ResourceSlice tracker does): whether the claim
fits must agree, for each selector form, effect and toleration. Skipped where the oracle is not built."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from domain.allocator.matching import simulate
from domain.cluster.state import MemoryHistory
from domain.inventory.devices import Inventory
from tests.reference_oracle import AllocatorOracle
from tests.test_reference_oracle import DRIVER, gpu_case, needs_oracle, only_node

AT = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
NO_SCHEDULE = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
NO_EXECUTE = {**NO_SCHEDULE, "effect": "NoExecute"}
INFORMS = {**NO_SCHEDULE, "effect": "None"}
TOLERATE = [{"key": "example.com/maintenance", "operator": "Exists"}]


def rule(name: str, taint: dict[str, Any], selector: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": taint}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec}


CASES: dict[str, tuple[int, list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "pool NoSchedule": (1, [rule("r", NO_SCHEDULE, {"driver": DRIVER, "pool": "n1"})], None),
    "pool NoExecute": (1, [rule("r", NO_EXECUTE, {"pool": "n1"})], None),
    "empty selector taints all": (1, [rule("r", NO_SCHEDULE, {})], None),
    "no selector taints none": (1, [rule("r", NO_SCHEDULE, None)], None),
    "other driver": (1, [rule("r", NO_SCHEDULE, {"driver": "other.example.com"})], None),
    "one device of two, one asked": (1, [rule("r", NO_SCHEDULE, {"device": "gpu-0"})], None),
    "one device of two, two asked": (2, [rule("r", NO_SCHEDULE, {"device": "gpu-0"})], None),
    "effect None": (2, [rule("r", INFORMS, {"pool": "n1"})], None),
    "tolerated": (2, [rule("r", NO_EXECUTE, {"pool": "n1"})], TOLERATE),
    "two rules, one tolerated": (
        1,
        [rule("a", NO_SCHEDULE, {"device": "gpu-0"}), rule("b", {**NO_SCHEDULE, "key": "x"}, {"device": "gpu-1"})],
        TOLERATE,
    ),
}


def claimline_fits(case: dict[str, Any]) -> bool:
    """The oracle's case as cluster objects, simulated by Claimline."""
    objects = copy.deepcopy(case["nodes"] + case["resourceSlices"] + case["deviceClasses"] + case["deviceTaintRules"])
    for i, obj in enumerate(objects):
        obj["metadata"].setdefault("uid", f"uid-{i}")  # the oracle's objects need no UID, history's do
    claim = copy.deepcopy(case["claims"][0])
    state = MemoryHistory([(AT, [*objects, claim])]).state
    return simulate(Inventory.of(state), [claim]).fitting_node is not None


@needs_oracle
@pytest.mark.parametrize("name", sorted(CASES))
def test_taint_rules_agree_with_kubernetes(name: str) -> None:
    count, rules, tolerations = CASES[name]
    case = gpu_case(name, count, taint_rules=rules, tolerations=tolerations)
    with AllocatorOracle(timeout=30) as oracle:
        expected = only_node(oracle.judge(case))["fits"]
    assert claimline_fits(case) is expected, name
