from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from collector.history_reader import StoredHistory
from collector.models import Cluster, Snapshot
from demo import builders as b
from derived.reading import covers, device_history_read
from domain.cluster.state import MemoryHistory, uid_of
from domain.inventory.device_history import device_history

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


# --- read from the derived layer -------------------------------------------------------------------


def _import(tmp_path: Path, snapshots: list[tuple[datetime, list[dict]]]) -> None:
    for i, (at, objects) in enumerate(snapshots):
        dump = tmp_path / f"snapshot-{i}.json"
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat())


def _observer(at: datetime) -> list[dict]:
    """A claim whose results have adminAccess to gpu-0: no allocation span, still on the device's page."""
    return [b.claim("ops", "inspect", [b.request()], at, allocated=[("gpu", "n0", "gpu-0")], admin_access=True)]


@pytest.mark.django_db
def test_the_layer_reads_only_the_claims_and_events_about_the_device(tmp_path: Path) -> None:
    first = _failing("a", "one", T0)
    other = _failing("c", "three", T0, device="gpu-1")
    _import(tmp_path, [
        (T0 + timedelta(minutes=10), [*_cluster(), *first, *other]),
        (T0 + timedelta(hours=1), [*_cluster(), *other, *_observer(T0 + timedelta(minutes=30))]),
        (T0 + timedelta(hours=2), [*_cluster(), *other]),
    ])
    cluster = Cluster.objects.get(name="demo")
    unrelated = [uid_of(o) for o in other]  # gpu-1's claim, its Pod and its failure
    for at in Snapshot.objects.filter(cluster=cluster).order_by("at").values_list("at", flat=True):
        on_read = StoredHistory(cluster, at)
        for device in (DEVICE, ("gpu.nvidia.com", "n0", "gpu-1")):
            history = StoredHistory(cluster, at)
            assert covers(history)
            with CaptureQueriesContext(connection) as ctx:
                layer = device_history_read(history, device)
            assert layer == device_history(on_read, device), (at, device)
            if device == DEVICE:  # content is read only by UID, and never gpu-1's
                read = [q["sql"] for q in ctx.captured_queries if "collector_objectversion" in q["sql"]]
                assert read and all('"uid" IN' in q for q in read), read
                assert not [q for q in read if any(uid in q for uid in unrelated)], read
    doc = device_history_read(StoredHistory(cluster), DEVICE)
    assert [(c["namespace"], c["name"]) for c in doc["claims"]] == [("a", "one"), ("ops", "inspect")]
    assert [f["claim"] for f in doc["preparation_failures"]] == ["one"]
