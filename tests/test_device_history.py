from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dashboard.domain.device_history import device_history
from dashboard.domain.state import MemoryHistory
from demo import builders as b

T0 = datetime(2026, 11, 20, 12, tzinfo=UTC)
DEVICE = ("gpu.nvidia.com", "n0", "gpu-0")


def _cluster() -> list[dict]:
    return [b.device_class(), b.node("n0", T0 - timedelta(days=9)),
            b.resource_slice("n0", b.gpu_devices("n0", 2), created=T0 - timedelta(days=9))]


def _failing(ns: str, name: str, at: datetime, device: str = "gpu-0") -> list[dict]:
    pod = b.pod(ns, name, at, claims=[("gpu", {"claim": name})], node_name="n0")
    claim = b.claim(ns, name, [b.request()], at, allocated=[("gpu", "n0", device)], allocated_at=at, reserved_for=[pod])
    event = b.event(pod, "FailedPrepareDynamicResources", "NodePrepareResources: device handle from UUID: Not Found",
                    at, at + timedelta(minutes=5), count=6)
    return [pod, claim, event]


def test_claims_that_held_a_device_and_its_preparation_failures() -> None:
    first = _failing("a", "one", T0)
    second = _failing("b", "two", T0 + timedelta(hours=2))
    other = _failing("c", "three", T0 + timedelta(hours=2), device="gpu-1")
    history = MemoryHistory([
        (T0 + timedelta(minutes=10), [*_cluster(), *first]),
        (T0 + timedelta(hours=1), [*_cluster()]),
        (T0 + timedelta(hours=2, minutes=10), [*_cluster(), *second, *other]),
    ])
    doc = device_history(history, DEVICE)
    assert [(c["namespace"], c["name"]) for c in doc["claims"]] == [("a", "one"), ("b", "two")]
    assert doc["claims"][0]["until"] == "2026-11-20T13:00:00Z" and doc["claims"][1]["until"] is None
    assert sorted(f["claim"] for f in doc["preparation_failures"]) == ["one", "two"]
    assert all(f["count"] == 6 for f in doc["preparation_failures"])
    assert doc["suspect"] is True
    # The neighbour failed once: one claim is a workload's problem, not the hardware's.
    assert device_history(history, ("gpu.nvidia.com", "n0", "gpu-1"))["suspect"] is False
