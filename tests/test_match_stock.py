"""match-devices read from the derived layer: the device rows, the spans and the usage document answer
what the state's ``Inventory`` answers, without decoding a slice or a claim (derived.match_stock)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.test import Client

import collector.history_reader
from collector.history_reader import StoredHistory
from collector.models import Cluster, Snapshot
from dashboard.selector_limits import forbid_database
from demo import builders as b
from demo.story import DEMO_BASE, demo_snapshots
from derived.match_stock import stored_stock
from derived.models import DerivedSnapshot, InventoryUsage
from domain.allocator.limits import Limits, match_devices_within_limits
from domain.allocator.matching import match_devices
from tests import test_partitions as partitions
from tests import test_shared_capacity as shared_capacity
from tests.derived_checks import MATCH_EXPRESSIONS, assert_match_devices_match
from tests.snapshot_cli import AT, import_objects

pytestmark = pytest.mark.django_db

MEMORY = MATCH_EXPRESSIONS[1]


def _demo() -> Cluster:
    return Cluster.objects.get(name="demo")


def test_every_demo_snapshot_matches_alike_from_the_rows(demo_history: Any) -> None:
    """The demo has partitioned GPUs (counter sets), a GPU shared by capacity and held devices."""
    cluster = _demo()
    for at in [t for t, _ in demo_snapshots(DEMO_BASE)]:
        assert_match_devices_match(cluster, at)
    # Not vacuous: the newest snapshot has devices held whole and devices a partition's counters block.
    doc = match_devices(StoredHistory(cluster).state, "true", None, stored_stock(StoredHistory(cluster)))
    why = [m["unavailable"] for m in doc["matched"] if "unavailable" in m]
    assert any(w.startswith("allocated to ") for w in why)
    assert any(w.startswith("counter set ") for w in why)


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        # A partitioned H100 with one partition held: the whole GPU's counters are short.
        (partitions.cluster(0), "counter set gpu-0-counters: memory 40Gi of 80Gi free (ml/part-a holds 40Gi)"),
        (partitions.cluster(0, 1, counters_apart=False), "counter set gpu-0-counters: memory 0 of 80Gi free"),
        # A GPU shared by capacity, all of it held by two shares.
        (
            shared_capacity.cluster("50Gi", "30Gi"),
            "capacity memory: 0 of 80Gi free (ml/share-a holds 50Gi and ml/share-b holds 30Gi)",
        ),
    ],
)
def test_partitions_and_shared_capacity_match_alike_from_the_rows(
    tmp_path: Path, objects: list[dict[str, Any]], expected: str
) -> None:
    import_objects(tmp_path, objects)
    cluster = Cluster.objects.get()
    assert_match_devices_match(cluster, AT)
    for expression in ("device.driver == 'gpu.nvidia.com'", "device.allowMultipleAllocations"):
        assert_match_devices_match_for(cluster, expression, None)
    history = StoredHistory(cluster)
    doc = match_devices(history.state, "true", None, stored_stock(history))
    assert any(str(m.get("unavailable", "")).startswith(expected) for m in doc["matched"]), doc["matched"]


def assert_match_devices_match_for(cluster: Cluster, expression: str, class_name: str | None) -> None:
    history = StoredHistory(cluster)
    from_rows = match_devices(history.state, expression, class_name, stored_stock(history))
    assert from_rows == match_devices(StoredHistory(cluster).state, expression, class_name)


def test_the_rows_path_decodes_no_slice_nor_claim(demo_history: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: Counter[str] = Counter()
    readable = collector.history_reader.readable

    def counting(kind: str, *args: Any, **kwargs: Any) -> Any:
        decoded[kind] += 1
        return readable(kind, *args, **kwargs)

    monkeypatch.setattr(collector.history_reader, "readable", counting)
    history = StoredHistory(_demo())
    stock = stored_stock(history)
    assert stock is not None
    doc = match_devices(history.state, MEMORY, "gpu.nvidia.com", stock)
    assert doc["matched"] and decoded["DeviceClass"] > 0  # the class is still read from the state
    assert decoded["ResourceSlice"] == 0 and decoded["ResourceClaim"] == 0, decoded
    # The same over the state's inventory decodes them: the count above can fail.
    match_devices(StoredHistory(_demo()).state, MEMORY, "gpu.nvidia.com")
    assert decoded["ResourceSlice"] > 0 and decoded["ResourceClaim"] > 0


def test_a_dear_selector_forked_reads_the_rows_before_the_fork(demo_history: Any) -> None:
    """A selector over the in-process cost runs in a child that may not query: the rows are read first."""
    history = StoredHistory(_demo())
    expression = "device.attributes['gpu.nvidia.com'].productName.matches('^NVIDIA.*$')"
    forked = match_devices_within_limits(
        history.state, expression, None, Limits(in_process_cost=0), forbid_database, stored_stock(history)
    )
    assert forked == match_devices(StoredHistory(_demo()).state, expression)
    assert forked["matched"]


def test_the_api_answers_alike_from_the_rows_and_for_a_team_member(demo_clients: dict[str, Client]) -> None:
    params = {"expression": "true"}
    from_rows = {who: c.get("/api/match-devices", params).json() for who, c in demo_clients.items()}
    # Without the usage document's unavailable devices (an older derivation's) it reads the state instead.
    for row in InventoryUsage.objects.filter(cluster=_demo()):
        stored = orjson.loads(row.document)
        del stored["unavailable"]
        InventoryUsage.objects.filter(pk=row.pk).update(document=orjson.dumps(stored).decode())
    assert stored_stock(StoredHistory(_demo())) is None
    on_read = {who: c.get("/api/match-devices", params).json() for who, c in demo_clients.items()}
    assert from_rows == on_read
    assert from_rows["alice"] != from_rows["admin"]  # other teams' holders redacted for the member


def test_a_snapshot_the_layer_does_not_cover_reads_the_state(tmp_path: Path) -> None:
    dump = tmp_path / "cluster.json"
    [(at, objects), *_] = demo_snapshots(DEMO_BASE)
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", at.isoformat())
    DerivedSnapshot.objects.filter(snapshot__in=Snapshot.objects.all()).delete()
    history = StoredHistory(_demo())
    assert stored_stock(history) is None
    assert match_devices(history.state, "true")["total"] > 0


def test_a_snapshot_with_the_same_rows_reuses_the_devices_read_before(tmp_path: Path) -> None:
    """Only a claim changed: the next snapshot's devices are not decoded again, its holders are its own."""
    from datetime import timedelta

    from derived import match_stock

    times = [AT, AT + timedelta(minutes=10), AT + timedelta(minutes=20)]
    clusters = [partitions.cluster(0), partitions.cluster(0, 1), shared_capacity.cluster("50Gi")]
    for at, objects in zip(times, clusters, strict=True):
        import_objects(tmp_path, objects, at)
    cluster = Cluster.objects.get()
    match_stock.forget()
    stocks = [stored_stock(StoredHistory(cluster, at)) for at in times]
    assert stocks[0] is not None and stocks[1] is not None and stocks[2] is not None
    assert stocks[1].devices is stocks[0].devices  # the same rows: read once
    assert stocks[2].devices is not stocks[1].devices  # the slices changed
    answers = [
        match_devices(StoredHistory(cluster, at).state, "true", None, stock)
        for at, stock in zip(times, stocks, strict=True)
    ]
    for at, answer in zip(times, answers, strict=True):
        assert answer == match_devices(StoredHistory(cluster, at).state, "true")
    assert answers[0] != answers[1]  # ml/part-b holds a partition in the second


def test_a_slice_change_decodes_only_the_rows_written_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next snapshot's devices: the unchanged ones carried over with what was learnt of them, the
    changed one decoded afresh, and the answers still those over the state's inventory."""
    import derived.match_stock
    from tests.clusters import T0, small_cluster

    objects = small_cluster(pods=2)
    import_objects(tmp_path, objects, T0)
    cluster = Cluster.objects.get()
    expression = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
    assert_match_devices_match(cluster, T0)
    assert_match_devices_match_for(cluster, expression, None)
    decoded: list[str] = []
    advertised = derived.match_stock.advertised_device

    def counting(driver: str, pool: str, name: str, document: Any) -> Any:
        decoded.append(f"{pool}/{name}")
        return advertised(driver, pool, name, document)

    monkeypatch.setattr(derived.match_stock, "advertised_device", counting)
    created = T0 - timedelta(days=30)
    devices = b.gpu_devices("worker-1", 4)
    devices[2] = b.gpu_device("gpu-2", node="worker-1", product="NVIDIA H100 80GB HBM3")
    changed = [o for o in objects if not (o["kind"] == "ResourceSlice" and o["metadata"]["name"].startswith("worker-1"))]
    later = T0 + timedelta(minutes=1)
    import_objects(tmp_path, [*changed, b.resource_slice("worker-1", devices, created=created)], later)
    history = StoredHistory(cluster, later)
    doc = match_devices(history.state, expression, None, stored_stock(history))
    assert decoded == ["worker-1/gpu-2"]
    assert [m["device"] for m in doc["matched"]] == ["gpu-2"]
    assert_match_devices_match(cluster, later)
    assert_match_devices_match_for(cluster, expression, None)
