"""The allocator oracle (Kubernetes' own DRA allocator) on a hand-built case: fits, no fit, taints, tolerations.

The tests that need the oracle skip when it is not built (scripts/build-reference builds it where Go is installed);
the helper's own failure handling is tested with stand-in scripts.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reference_oracle import AllocatorOracle, OracleError, oracle_path

needs_oracle = pytest.mark.skipif(oracle_path() is None, reason="allocator oracle not built (scripts/build-reference)")

DRIVER = "gpu.example.com"


@pytest.fixture(scope="module")
def oracle() -> Iterator[AllocatorOracle]:
    with AllocatorOracle(timeout=30) as started:
        yield started


def gpu_case(
    name: str,
    count: int,
    taint_rules: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Node n1 with one slice of two GPUs, a class selecting the driver by CEL, one claim asking for ``count``."""
    request: dict[str, Any] = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count}
    if tolerations:
        request["tolerations"] = tolerations
    return {
        "name": name,
        "nodes": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}}],
        "resourceSlices": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "n1-gpu.example.com"},
                "spec": {
                    "driver": DRIVER,
                    "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                    "nodeName": "n1",
                    "devices": [
                        {
                            "name": f"gpu-{index}",
                            "attributes": {"model": {"string": "A100"}},
                            "capacity": {"memory": {"value": "80Gi"}},
                        }
                        for index in range(2)
                    ],
                },
            }
        ],
        "deviceClasses": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        ],
        "deviceTaintRules": taint_rules or [],
        "allocatedClaims": [],
        "claims": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "train", "namespace": "ml", "uid": "0a1b2c3d-0000-4000-8000-000000000001"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
            }
        ],
    }


MAINTENANCE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceTaintRule",
    "metadata": {"name": "n1-maintenance"},
    "spec": {
        "deviceSelector": {"driver": DRIVER, "pool": "n1"},
        "taint": {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"},
    },
}


def only_node(result: dict[str, Any]) -> dict[str, Any]:
    assert result["error"] == "", result
    assert [node["node"] for node in result["nodes"]] == ["n1"]
    node: dict[str, Any] = result["nodes"][0]
    assert node["error"] == "", node
    return node


@needs_oracle
def test_one_gpu_fits(oracle: AllocatorOracle) -> None:
    node = only_node(oracle.judge(gpu_case("one", 1)))
    assert node["fits"] is True
    assert len(node["devices"]) == 1
    device = node["devices"][0]
    assert (device["claim"], device["request"], device["driver"], device["pool"]) == ("ml/train", "gpu", DRIVER, "n1")
    assert device["device"] in {"gpu-0", "gpu-1"}


@needs_oracle
def test_two_gpus_take_both(oracle: AllocatorOracle) -> None:
    node = only_node(oracle.judge(gpu_case("two", 2)))
    assert node["fits"] is True
    assert sorted(device["device"] for device in node["devices"]) == ["gpu-0", "gpu-1"]


@needs_oracle
def test_three_gpus_do_not_fit(oracle: AllocatorOracle) -> None:
    node = only_node(oracle.judge(gpu_case("three", 3)))
    assert node["fits"] is False
    assert node["devices"] == []


@needs_oracle
def test_no_schedule_taint_rule_on_the_pool_blocks(oracle: AllocatorOracle) -> None:
    node = only_node(oracle.judge(gpu_case("tainted", 1, taint_rules=[MAINTENANCE])))
    assert node["fits"] is False


@needs_oracle
def test_toleration_lets_the_claim_through(oracle: AllocatorOracle) -> None:
    toleration = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    node = only_node(oracle.judge(gpu_case("tolerated", 1, taint_rules=[MAINTENANCE], tolerations=[toleration])))
    assert node["fits"] is True
    assert len(node["devices"]) == 1


@needs_oracle
def test_allocated_claims_hold_their_devices(oracle: AllocatorOracle) -> None:
    case = gpu_case("held", 2)
    case["allocatedClaims"] = [
        {
            "metadata": {"name": "other", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}
                }
            },
        }
    ]
    assert only_node(oracle.judge(case))["fits"] is False
    case["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 1
    node = only_node(oracle.judge(case))
    assert node["fits"] is True
    assert [device["device"] for device in node["devices"]] == ["gpu-1"]


@needs_oracle
def test_features_can_be_overridden(oracle: AllocatorOracle) -> None:
    case = gpu_case("taints-off", 1, taint_rules=[MAINTENANCE])
    case["features"] = {"DRADeviceTaints": False}
    assert only_node(oracle.judge(case))["fits"] is True
    case["features"] = {"NoSuchFeature": True}
    result = oracle.judge(case)
    assert "NoSuchFeature" in result["error"]
    assert result["nodes"] == []


@needs_oracle
def test_a_closed_oracle_refuses() -> None:
    oracle = AllocatorOracle()
    assert oracle.judge(gpu_case("before", 1))["nodes"][0]["fits"] is True
    oracle.close()
    oracle.close()
    with pytest.raises(OracleError):
        oracle.judge(gpu_case("after", 1))


def stand_in(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "oracle"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_helper_times_out_and_stops_a_silent_oracle(tmp_path: Path) -> None:
    oracle = AllocatorOracle(stand_in(tmp_path, "exec sleep 30"), timeout=0.2)
    with pytest.raises(OracleError, match="no answer"):
        oracle.judge({"name": "slow"})
    with pytest.raises(OracleError, match="closed"):
        oracle.judge({"name": "later"})
    oracle.close()


def test_helper_reports_a_dead_oracle_with_its_stderr(tmp_path: Path) -> None:
    # It may be gone before the case is written or only after: either way its stderr is in the message.
    with (
        AllocatorOracle(stand_in(tmp_path, "echo broken >&2; exit 3"), timeout=5) as oracle,
        pytest.raises(OracleError, match="broken"),
    ):
        oracle.judge({"name": "any"})
