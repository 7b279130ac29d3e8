"""The inventory page read from the derived layer's device rows (``InventoryDevice``) and allocation spans:
as of two times around a slice change, a device held then released, a partitioned GPU, a team member's
view; no ``Inventory.of`` on read, and the rows written only when slices or taint rules change."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from collector.models import Cluster
from demo import builders as b
from derived import inventory_rows
from derived.inventory_rows import changed_pools
from derived.models import DerivedSnapshot, InventoryDevice, InventoryUsage
from derived.retention import prune_derived
from domain.inventory import devices as inventory_module
from tests.snapshot_cli import AT, import_objects
from tests.users import admin_and_alice

pytestmark = pytest.mark.django_db

M = timedelta(minutes=1)
CREATED = AT - timedelta(days=30)
NODE = "worker-0"
NS = "ml-training"
OTHER = "research"


def _refuse(cls: Any, state: Any) -> Any:
    raise AssertionError("Inventory.of on read")


def cluster(gpus: int, *claims: dict[str, Any], model: dict[str, Any] = b.H100_80GB) -> list[dict[str, Any]]:
    return [
        b.namespace(NS, created=CREATED),
        b.namespace(OTHER, created=CREATED),
        b.node(NODE, CREATED),
        b.resource_slice(NODE, b.gpu_devices(NODE, gpus, model), created=CREATED),
        *claims,
    ]


def held(namespace: str, name: str, device: str, at: Any = CREATED) -> dict[str, Any]:
    return b.claim(namespace, name, [b.request()], CREATED, allocated=[("gpu", NODE, device)], allocated_at=at)


def page(client: Client, **params: str) -> str:
    """The inventory page, which may not build the state's inventory (the derivation did): it reads rows."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inventory_module.Inventory, "of", classmethod(_refuse))
        response = client.get("/c/demo/inventory/", params)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def counts(body: str) -> str:
    start = body.index('data-testid="inventory-counts"')
    return " ".join(body[start : body.index("</p>", start)].split())


def test_the_inventory_as_of_two_times_around_a_slice_change(tmp_path: Path, admin_client: Client) -> None:
    import_objects(tmp_path, cluster(2), AT)
    import_objects(tmp_path, cluster(3, model=b.A100_40GB), AT + 5 * M)
    before = page(admin_client, as_of=AT.isoformat())
    after = page(admin_client)
    assert "2 devices advertised: 0 held, 2 free." in counts(before) and "gpu-2" not in before
    assert "3 devices advertised: 0 held, 3 free." in counts(after) and "gpu-2" in after
    assert "NVIDIA H100 80GB HBM3" in before and "NVIDIA H100 80GB HBM3" not in after
    # Every device's row changed (its model): the first rows end where the second begin.
    rows = InventoryDevice.objects.order_by("valid_from", "device")
    assert [(r.device, r.valid_from, r.valid_to) for r in rows] == [
        ("gpu-0", AT, AT + 5 * M),
        ("gpu-1", AT, AT + 5 * M),
        ("gpu-0", AT + 5 * M, None),
        ("gpu-1", AT + 5 * M, None),
        ("gpu-2", AT + 5 * M, None),
    ]


def test_a_snapshot_changing_claims_only_writes_no_device_row(tmp_path: Path) -> None:
    import_objects(tmp_path, cluster(2), AT)
    import_objects(tmp_path, cluster(2, held(NS, "train", "gpu-0")), AT + M)
    assert InventoryDevice.objects.count() == 2
    assert not InventoryDevice.objects.filter(valid_to__isnull=False).exists()


def test_a_device_held_then_released(tmp_path: Path, admin_client: Client) -> None:
    import_objects(tmp_path, cluster(2), AT)
    import_objects(tmp_path, cluster(2, held(NS, "train", "gpu-1", AT + M)), AT + 2 * M)
    import_objects(tmp_path, cluster(2, b.claim(NS, "train", [b.request()], CREATED)), AT + 4 * M)  # deallocated
    free = page(admin_client, as_of=AT.isoformat())
    holding = page(admin_client, as_of=(AT + 3 * M).isoformat())
    released = page(admin_client)
    assert "0 held, 2 free." in counts(free) and f"{NS}/train" not in free
    assert "1 held, 1 free." in counts(holding) and f"{NS}/train" in holding
    assert f"<td>{b.ts(AT + M)}</td>" in holding  # since: the allocation's own time, not the snapshot's
    assert "0 held, 2 free." in counts(released) and f"{NS}/train" not in released


def test_a_team_member_sees_its_holders_and_not_another_teams(tmp_path: Path) -> None:
    import_objects(tmp_path, cluster(2, held(NS, "mine", "gpu-0"), held(OTHER, "theirs", "gpu-1")), AT)
    clients = admin_and_alice()
    admin, alice = page(clients["admin"]), page(clients["alice"])
    assert f"{NS}/mine" in admin and f"{OTHER}/theirs" in admin
    assert f"{NS}/mine" in alice and "theirs" not in alice and OTHER not in alice
    assert "2 held, 0 free." in counts(alice)  # what is held stays counted, whose it is does not


def test_a_partitioned_gpu_is_counted_once(demo_history: Any, admin_client: Client) -> None:
    """The demo's worker-h100-mig-0 advertises its whole GPU and its partitions, drawing on one counter set."""
    body = page(admin_client)
    assert 'data-testid="devices-vs-gpus"' in body
    partitioned = body[body.index('data-testid="devices-vs-gpus"') :]
    assert "worker-h100-mig-0: gpu-0, gpu-0-mig-" in partitioned
    stored = InventoryDevice.objects.filter(valid_to__isnull=True)
    units = {(r.driver, r.pool, r.counter_set) for r in stored.exclude(counter_set="")}
    whole = stored.filter(counter_set="").count()
    assert f"these {stored.count()} devices are {whole + len(units)} physical GPUs" in " ".join(partitioned.split())
    assert 'data-testid="counter-set"' in body  # the partition's claim draws on the set


def test_rebuild_derived_fills_the_rows_of_history_derived_before_them(tmp_path: Path, admin_client: Client) -> None:
    """History derived by code without the rows (another DOMAIN_VERSION): rebuild-derived writes them,
    and the inventory as of the first snapshot reads them."""
    import_objects(tmp_path, cluster(2), AT)
    import_objects(tmp_path, cluster(3), AT + 5 * M)
    InventoryDevice.objects.all().delete()
    InventoryUsage.objects.all().delete()
    DerivedSnapshot.objects.update(version="older")
    call_command("rebuild-derived", stdout=StringIO())
    assert InventoryDevice.objects.filter(valid_to__isnull=True).count() == 3
    assert "2 devices advertised: 0 held, 2 free." in counts(page(admin_client, as_of=AT.isoformat()))


def test_retention_prunes_the_rows_that_ended_before_its_cutoff(tmp_path: Path) -> None:
    import_objects(tmp_path, cluster(2, model=b.A100_40GB), AT)
    import_objects(tmp_path, cluster(2), AT + 5 * M)
    assert InventoryDevice.objects.filter(valid_to=AT + 5 * M).count() == 2
    prune_derived(Cluster.objects.get(name="demo"), AT + 5 * M)
    assert not InventoryDevice.objects.filter(valid_to__isnull=False).exists()
    assert InventoryDevice.objects.filter(valid_to__isnull=True).count() == 2


def _slices(*nodes: str, model: dict[str, Any] = b.A100_40GB) -> list[dict[str, Any]]:
    return [b.resource_slice(n, b.gpu_devices(n, 2, model), created=CREATED) for n in nodes]


def _rows() -> list[tuple[Any, ...]]:
    return sorted(
        InventoryDevice.objects.values_list(
            "driver", "pool", "device", "valid_from", "valid_to", "content_hash", "node"
        )
    )


def test_incremental_rows_are_a_full_rewrites_over_a_sequence_of_changes(tmp_path: Path) -> None:
    """Each snapshot compares only the pools whose slices changed (``changed_pools``); the rows over a
    sequence of slice, node, class and rule changes are those of comparing every device each time."""
    base = [b.namespace(NS, created=CREATED), b.device_class(created=CREATED)]
    nodes = [b.node(f"worker-{i}", CREATED) for i in range(3)]
    # A pool of two slices (shared, reached from every node), each listing one device.
    shared = [
        b.resource_slice(
            None,
            [b.gpu_device(f"gpu-{i}", node="shared")],
            pool="shared",
            slice_count=2,
            all_nodes=True,
            name=f"shared-{i}",
            created=CREATED,
        )
        for i in range(2)
    ]
    moved = b.resource_slice(None, [b.gpu_device("gpu-9", node="x")], pool="other", all_nodes=True, name="moved")
    moved_back = b.resource_slice(
        None, [b.gpu_device("gpu-9", node="x")], pool="shared-b", all_nodes=True, name="moved"
    )
    rule = b.device_taint_rule("drain-1", b.taint("maintenance"), pool="worker-1", created=CREATED)
    narrow_class = b.device_class(selectors=['device.attributes["gpu.nvidia.com"].productName != ""'], created=CREATED)
    stages = [
        [*base, *nodes, *_slices("worker-0", "worker-1"), *shared, moved],
        [*base, *nodes, *_slices("worker-0", "worker-1", "worker-2"), *shared, moved],  # a slice added
        [*base, *nodes, *_slices("worker-0", "worker-2"), *_slices("worker-1", model=b.H100_80GB), *shared, moved],
        [*base, *nodes, *_slices("worker-0"), *_slices("worker-1", model=b.H100_80GB), *shared, moved],  # removed
        [*base, *nodes[1:], *_slices("worker-0"), *_slices("worker-1", model=b.H100_80GB), *shared, moved],  # node
        [
            *base[:1],
            narrow_class,
            *nodes[1:],
            *_slices("worker-0"),
            *_slices("worker-1", model=b.H100_80GB),
            *shared,
            moved,
        ],
        [
            *base,
            *nodes[1:],
            *_slices("worker-0"),
            *_slices("worker-1", model=b.H100_80GB),
            shared[0],
            moved,
        ],  # pool incomplete
        [*base, *nodes[1:], *_slices("worker-0"), *_slices("worker-1", model=b.H100_80GB), shared[0], moved_back],
        [*base, *nodes[1:], *_slices("worker-0"), *_slices("worker-1", model=b.H100_80GB), shared[0], moved_back, rule],
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inventory_rows, "changed_pools", lambda *_args: None)  # every device compared
        for i, objects in enumerate(stages):
            import_objects(tmp_path, objects, AT + i * M)
    full = _rows()
    # Every stage but the node's and the class's changed some row (the sequence exercises each case).
    moments = {row[3] for row in full} | {row[4] for row in full if row[4] is not None}
    assert moments == {AT + i * M for i in range(len(stages)) if i not in (4, 5)}, sorted(moments)
    assert any(
        row[1] == "shared" and row[2] == "gpu-0" and row[3] == AT + 6 * M for row in full
    )  # same slice, pool incomplete
    InventoryDevice.objects.all().delete()
    DerivedSnapshot.objects.update(version="older")
    compared: list[set[tuple[str, str]] | None] = []

    def spy(*args: Any) -> set[tuple[str, str]] | None:
        compared.append(changed_pools(*args))
        return compared[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inventory_rows, "changed_pools", spy)
        call_command("rebuild-derived", stdout=StringIO())  # the first snapshot in full, the rest incrementally
    assert _rows() == full
    # Neither the node's removal nor the class's change compares any device (no slice or rule changed).
    gpu = b.GPU_DRIVER
    assert compared == [
        {(gpu, "worker-2")},
        {(gpu, "worker-1")},
        {(gpu, "worker-2")},
        {(gpu, "shared")},
        {(gpu, "other"), (gpu, "shared-b")},
        None,  # the rule's change: every device
    ]


def test_an_unchanged_pools_rows_are_not_read_again(tmp_path: Path) -> None:
    """A slice change compares the rows of its own pool only: an open row of another pool (marked here)
    is neither compared nor rewritten; a taint rule's change compares every device."""
    base = [b.namespace(NS, created=CREATED), b.node(NODE, CREATED), b.node("worker-1", CREATED)]
    import_objects(tmp_path, [*base, *_slices(NODE, "worker-1")], AT)
    untouched = InventoryDevice.objects.filter(pool=NODE)
    kept = sorted(untouched.values_list("pk", flat=True))
    untouched.update(content_hash="marked")
    import_objects(tmp_path, [*base, *_slices(NODE), *_slices("worker-1", model=b.H100_80GB)], AT + M)
    assert sorted(InventoryDevice.objects.filter(pool=NODE, valid_to__isnull=True).values_list("pk", flat=True)) == kept
    assert set(InventoryDevice.objects.filter(pool=NODE).values_list("content_hash", flat=True)) == {"marked"}
    changed = InventoryDevice.objects.filter(pool="worker-1")
    assert [r.valid_to for r in changed.order_by("valid_from", "device")] == [AT + M, AT + M, None, None]
    rule = b.device_taint_rule("drain", b.taint("maintenance"), pool="worker-1", created=CREATED)
    import_objects(tmp_path, [*base, *_slices(NODE), *_slices("worker-1", model=b.H100_80GB), rule], AT + 2 * M)
    # Every device compared: the marked rows are told apart from what the slices say and written again.
    assert not InventoryDevice.objects.filter(valid_to__isnull=True, content_hash="marked").exists()
