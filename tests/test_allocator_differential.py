"""Claimline's allocation simulation against Kubernetes' own allocator, on generated clusters (issue 21).

Hypothesis draws small clusters and a pending Pod's claims (tests/allocator_cases.py); for each, Claimline says on
which nodes the claims can be allocated (``claimline_fits``, the decision behind the allocation verdict) and the
allocator oracle (reference/allocator-oracle: k8s.io/dynamic-resource-allocation v0.37.2's
``Allocator.Allocate``, per node) says the same thing its own way. They must agree on every node.

The normal run judges ``CLAIMLINE_DIFF_EXAMPLES`` cases (default 2,000) from the fixed seed
``CLAIMLINE_DIFF_SEED``, so every run draws the same cases; a longer or other run only needs those two:

    CLAIMLINE_DIFF_EXAMPLES=20000 CLAIMLINE_DIFF_SEED=7 pytest -rA tests/test_allocator_differential.py

A disagreement fails with the case shrunk to a small one, written to
``$CLAIMLINE_VAR_DIR/allocator-diff/disagreement.json``. Those found so far are regression cases in
tests/fixtures/allocator/ (what went wrong in ``why``), each with the allocator's answer, which Claimline must
give without the oracle too.

What the scheduler does around the allocator is modelled where Claimline answers for it: a Pod's already allocated
claims restrict it to the nodes their allocation names (the oracle does as the scheduler's Filter does), and an
allocator error (a DeviceClass that does not exist, a pool being updated under ``allocationMode: All``) fails the
Pod on that node as it fails the scheduling attempt.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings

from tests.allocator_cases import cases, claimline_fits, claimline_simulation
from tests.reference_oracle import AllocatorOracle, oracle_path

EXAMPLES = int(os.environ.get("CLAIMLINE_DIFF_EXAMPLES", "2000"))
SEED = int(os.environ.get("CLAIMLINE_DIFF_SEED", "20260721"))
FIXTURES = Path(__file__).parent / "fixtures" / "allocator"

needs_oracle = pytest.mark.skipif(oracle_path() is None, reason="allocator oracle not built (scripts/build-reference)")


@pytest.fixture(scope="module")
def oracle() -> Iterator[AllocatorOracle]:
    with AllocatorOracle(timeout=60) as started:
        yield started


def oracle_fits(oracle: AllocatorOracle, case: dict[str, Any]) -> tuple[dict[str, bool], dict[str, str]]:
    """Per node, whether the allocator fits the Pod's claims there, and why not where it said so."""
    result = oracle.judge(case)
    assert result["error"] == "", result
    assert not result.get("warnings"), result["warnings"]  # a misspelt field would be judged as absent
    fits = {n["node"]: bool(n["fits"]) for n in result["nodes"]}
    why = {n["node"]: n.get("error") or n.get("reason") or "" for n in result["nodes"] if not n["fits"]}
    return fits, why


def features(case: dict[str, Any]) -> set[str]:
    """What a case exercises, for the summary: a run that never drew one of these proves nothing about it."""
    text = {part: json.dumps(case[part]) for part in ("resourceSlices", "deviceTaintRules", "claims")}
    found = {name for name, (part, marker) in FEATURES.items() if marker in text[part]}
    published = Counter((s["spec"]["driver"], s["spec"]["pool"]["name"]) for s in case["resourceSlices"])
    if any(
        published[(s["spec"]["driver"], s["spec"]["pool"]["name"])] < s["spec"]["pool"]["resourceSliceCount"]
        for s in case["resourceSlices"]
    ):
        found.add("pool being updated")
    if case["allocatedClaims"]:
        found.add("held by others")
    if len(case["claims"]) > 1:
        found.add("several claims")
    if len(case["nodes"]) > 1:
        found.add("several nodes")
    return found


MORE_FEATURES = ("pool being updated", "held by others", "several claims", "several nodes")
FEATURES = {  # name: (where, what shows it)
    "All": ("claims", '"allocationMode": "All"'),
    "firstAvailable": ("claims", "firstAvailable"),
    "matchAttribute": ("claims", "matchAttribute"),
    "distinctAttribute": ("claims", "distinctAttribute"),
    "counter sets": ("resourceSlices", "sharedCounters"),
    "unadvertised counter set": ("resourceSlices", "gpu-ghost-counters"),
    "shared capacity": ("resourceSlices", '"allowMultipleAllocations": true'),
    "request policy": ("resourceSlices", "requestPolicy"),
    "capacity requests": ("claims", '"capacity": {"requests"'),
    "adminAccess": ("claims", '"adminAccess": true'),
    "device taints": ("resourceSlices", '"taints"'),
    "DeviceTaintRule": ("deviceTaintRules", "DeviceTaintRule"),
    "tolerations": ("claims", "tolerations"),
    "Pod's allocated claims": ("claims", '"allocation"'),
    "allNodes": ("resourceSlices", '"allNodes": true'),
    "nodeSelector slice": ("resourceSlices", '"nodeSelector"'),
    "perDeviceNodeSelection": ("resourceSlices", "perDeviceNodeSelection"),
    "semver": ("claims", "semver("),
    "quantity": ("claims", "quantity("),
}


class Tally:
    def __init__(self) -> None:
        self.cases = 0
        self.fitting = 0  # cases that fit on some node
        self.nodes = 0
        self.fits = 0
        self.errors = 0
        self.features: Counter[str] = Counter()

    def add(self, case: dict[str, Any], fits: dict[str, bool], why: dict[str, str]) -> None:
        self.cases += 1
        self.fitting += any(fits.values())
        self.nodes += len(fits)
        self.fits += sum(fits.values())
        self.errors += sum(1 for w in why.values() if w)
        self.features.update(features(case))

    def summary(self, seconds: float) -> str:
        drawn = ", ".join(f"{name} {self.features[name]}" for name in [*FEATURES, *MORE_FEATURES])
        return (
            f"allocator differential: seed {SEED}, {self.cases} cases ({self.fitting} fit on some node), "
            f"{self.nodes} nodes judged "
            f"({self.fits} fit, {self.nodes - self.fits} do not, {self.errors} with an allocator message), "
            f"0 disagreements, {seconds:.1f} s; drawn: {drawn}"
        )


def disagreement(case: dict[str, Any], ours: dict[str, bool], theirs: dict[str, bool], why: dict[str, str]) -> str:
    # Hypothesis replays the shrunk case last, so the file ends up holding the smallest one.
    path = Path(os.environ.get("CLAIMLINE_VAR_DIR", "var")) / "allocator-diff" / "disagreement.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"why": "", "expected": theirs, "case": case}, indent=1) + "\n")
    nodes = ", ".join(
        f"{n}: Claimline {'fits' if ours.get(n) else 'no fit'}, Kubernetes {'fits' if theirs.get(n) else 'no fit'}"
        + (f" ({why[n]})" if why.get(n) else "")
        for n in sorted(theirs)
        if ours.get(n) != theirs.get(n)
    )
    return f"Claimline and Kubernetes' allocator disagree on {nodes}; case written to {path}"


@needs_oracle
def test_claimline_allocates_as_kubernetes_does(oracle: AllocatorOracle) -> None:
    tally = Tally()

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,  # the same cases every run, not ones replayed from an earlier failure
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(case=cases())
    def agree(case: dict[str, Any]) -> None:
        theirs, why = oracle_fits(oracle, case)
        ours = claimline_fits(case)
        assert ours == theirs, disagreement(case, ours, theirs, why)
        tally.add(case, theirs, why)

    started = time.monotonic()
    agree()
    print(tally.summary(time.monotonic() - started))
    assert tally.cases >= EXAMPLES


REGRESSIONS = sorted(FIXTURES.glob("*.json"))


def regression(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression_claimline(path: Path) -> None:
    fixture = regression(path)
    assert claimline_fits(fixture["case"]) == fixture["expected"], fixture["why"]


@needs_oracle
@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression_kubernetes(oracle: AllocatorOracle, path: Path) -> None:
    fixture = regression(path)
    assert oracle_fits(oracle, fixture["case"])[0] == fixture["expected"], fixture["why"]


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("unadvertised-counter-set", "but pool n0 is invalid (device gpu-0 consumes counter set gpu-9-counters, which"),
        ("pool-being-updated", "but pool n0 is being updated (not all of its slices are published)"),
        ("all-on-a-node-reading-a-refused-pool", "of class nic on n0, but pool n0 of driver gpu.example.com is being"),
        ("all-breaking-a-constraint-ends-the-search", "there the allocator gives up on the node"),
        ("all-after-the-pod-took-a-device", "the Pod's other requests already take 1 of the 2 matching devices"),
        ("backtracking-across-claims", "the requests fit on n0 (gpu.example.com/n0/gpu-1, gpu.example.com/n0/gpu-0)"),
    ],
)
def test_verdicts_say_what_the_allocator_did(name: str, said: str) -> None:
    sim = claimline_simulation(regression(FIXTURES / f"{name}.json")["case"])
    assert sim is not None
    assert said in sim.message()
