"""Writing the inventory as rows: each advertised device as an ``InventoryDevice`` row valid over a
span of snapshots, and what no row can say (counter sets in use, devices their counters block) as one
``InventoryUsage`` document.

The rows change only with slices and taint rules, so a snapshot that changed neither writes none; one
that did compares each device's row with its open one by hash and writes only the devices that
differ. A device's row reads its pool's slices alone (its entry, reach, generation, whether the pool
is complete or invalid) and the taint rules, so after slice changes only the pools those slices
were or are in are compared (``changed_pools``): at thousands of nodes, hashing every device's row
for a change to one node's slice cost seconds. A rule's change compares every device (a selector
may pick any). Who holds a device is not written here: ``AllocationSpan`` says it as of any time, so a
churn of claims rewrites no device row (the usage document, small, follows the holders).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson
from django.db.models import Q

from collector.history_reader import decode_stored
from collector.models import ObjectVersion, Snapshot
from derived.models import InventoryDevice
from domain.allocator.device_stock import match_unavailable
from domain.cluster.state import ClusterState
from domain.inventory.devices import (
    AdvertisedDevice,
    DeviceId,
    Inventory,
    Reach,
    node_reach,
    restored_device,
    slice_pool,
    taint_rows,
    typed_value,
)
from domain.inventory.equivalents import physical_devices
from domain.inventory.shared_usage import counter_blocked, counter_set_usage
from domain.inventory.sharing import device_counters

BATCH = 2000
# The kinds whose change can alter a device's row (its slice, or a rule's taint and condition).
ROW_KINDS = frozenset({"ResourceSlice", "DeviceTaintRule"})
# The inventory page's order (Python's, by code point), which the rows' ordering index follows.
ORDER = ("node", "pool", "device", "driver")


def node_of(device: AdvertisedDevice) -> str:
    """Where the inventory page lists the device: its node, or where else it is reachable from."""
    return device.node_name or device.reach.describe()


def first_counter_set(device: AdvertisedDevice) -> str:
    """The counter set that names the physical device it is part of (``equivalents.physical_devices``)."""
    if not device.entry.get("consumesCounters"):
        return ""
    sets = sorted(device_counters(device))
    return sets[0][2] if sets else ""


def device_document(device: AdvertisedDevice) -> dict[str, Any]:
    """The device as ``advertised_device`` reads it back."""
    reach = device.reach
    return {
        "entry": device.entry,
        "reach": {"node_name": reach.node_name, "node_selector": reach.node_selector, "all_nodes": reach.all_nodes},
        "slice_name": device.slice_name,
        "slice_uid": device.slice_uid,
        "slice_created": device.slice_created,
        "generation": device.generation,
        "pool_complete": device.pool_complete,
        "extra_taints": list(device.extra_taints),
        "pool_problem": device.pool_problem,
        "slice_index": device.slice_index,
    }


def advertised_device(driver: str, pool: str, name: str, document: Mapping[str, Any]) -> AdvertisedDevice:
    """The ``AdvertisedDevice`` a row's document stores."""
    reach = document["reach"]
    selector = reach["node_selector"]
    return restored_device(
        driver,
        pool,
        name,
        document["entry"],
        node_reach(reach["node_name"], bool(reach["all_nodes"]))
        if selector is None
        else Reach(reach["node_name"], selector, bool(reach["all_nodes"])),
        document["slice_name"],
        document["slice_uid"],
        document["slice_created"],
        int(document["generation"]),
        bool(document["pool_complete"]),
        tuple(document["extra_taints"]),
        document["pool_problem"],
        int(document["slice_index"]),
    )


def _fields(device: AdvertisedDevice, state: ClusterState) -> dict[str, Any]:
    return {
        "node": node_of(device),
        "product": orjson.dumps(typed_value(device.attributes.get("productName"))).decode(),
        "memory": device.capacity_value("memory"),
        "uuid": device.uuid,
        "taints": orjson.dumps(taint_rows(device, state)).decode() if device.taints else "",
        "counter_set": first_counter_set(device),
        "document": orjson.dumps(device_document(device)).decode(),
    }


def _digest(fields: Mapping[str, Any]) -> str:
    return hashlib.blake2b(orjson.dumps(fields), digest_size=16).hexdigest()


def changed_pools(cluster_id: int, since: datetime, at: datetime) -> set[tuple[str, str]] | None:
    """The (driver, pool) of every slice version begun or ended in ``(since, at]`` (a slice moved to
    another pool changes both); None when a taint rule changed too (its selector may pick any device) or
    a slice version cannot be read."""
    window = Q(valid_from__gt=since, valid_from__lte=at) | Q(valid_to__gt=since, valid_to__lte=at)
    versions = ObjectVersion.objects.filter(window, cluster_id=cluster_id, kind__in=ROW_KINDS, deleted=False)
    if versions.filter(kind="DeviceTaintRule").exists():
        return None
    pools = set()
    # Only the changed slices' contents are decoded; a deletion's own row is empty, its last version is not.
    for content, checked in versions.values_list("content", "shapes_checked").iterator():
        slice_obj, _problem = decode_stored("ResourceSlice", content, checked)
        if slice_obj is None:
            return None  # which pool it was in is unknown (the reader skips it): compare every device
        pools.add(slice_pool(slice_obj))
    return pools


def write_inventory_devices(snapshot: Snapshot, inventory: Inventory, after: int | None = None) -> int:
    """Bring the open device rows in line with ``inventory`` (as of ``snapshot``); rows written.

    ``after``: the snapshot the open rows are in line with (the previous one derived), so that only
    the pools whose slices changed since are compared; None compares every device.

    Rows this snapshot wrote before (another version's derivation) are dropped first, and those it
    closed opened again: then the comparison is with the rows before it.
    """
    cluster_id, at = snapshot.cluster_id, snapshot.at
    rows = InventoryDevice.objects.filter(cluster_id=cluster_id)
    rows.filter(valid_from__gte=at).delete()
    rows.filter(valid_to__gte=at).update(valid_to=None)
    since = Snapshot.objects.filter(pk=after).values_list("at", flat=True).first() if after is not None else None
    pools = changed_pools(cluster_id, since, at) if since is not None else None
    heads: dict[DeviceId, tuple[int, str]] = {}
    open_rows = rows.filter(valid_to__isnull=True)
    if pools is not None:
        open_rows = open_rows.filter(pool__in={pool for _driver, pool in pools})
    for pk, driver, pool, name, digest in open_rows.values_list(
        "pk", "driver", "pool", "device", "content_hash"
    ).iterator(BATCH):
        if pools is None or (driver, pool) in pools:
            heads[(driver, pool, name)] = (pk, digest)
    new: list[InventoryDevice] = []
    closed: list[int] = []
    for device in inventory.devices:
        if pools is not None and (device.driver, device.pool) not in pools:
            continue  # its pool's slices did not change: its open row stands
        fields = _fields(device, inventory.state)
        digest = _digest(fields)
        head = heads.pop(device.id, None)
        if head is not None and head[1] == digest:
            continue
        if head is not None:
            closed.append(head[0])
        new.append(
            InventoryDevice(
                cluster_id=cluster_id,
                driver=device.driver,
                pool=device.pool,
                device=device.name,
                content_hash=digest,
                valid_from=at,
                **fields,
            )
        )
    closed.extend(pk for pk, _digest_ in heads.values())  # no longer advertised
    for i in range(0, len(closed), BATCH):
        InventoryDevice.objects.filter(pk__in=closed[i : i + BATCH]).update(valid_to=at)
    InventoryDevice.objects.bulk_create(new, batch_size=BATCH)
    return len(new) + len(closed)


def page_order(device: AdvertisedDevice) -> tuple[str, str, str]:
    """Where the inventory page lists a device (after its driver: devices come sorted by driver first)."""
    return (node_of(device), device.pool, device.name)


def inventory_totals(devices: Iterable[AdvertisedDevice], holders: Mapping[DeviceId, Any]) -> dict[str, Any]:
    """The counts above the inventory page of ``devices``: devices, those held, physical GPUs, and the
    GPUs advertised as several devices (node, devices) in the page's order.

    Written at every snapshot that changed a claim: only the devices drawing on a counter set are
    ordered and grouped (``physical_devices``), each other device is one GPU of its own."""
    total = held = whole = 0
    drawing = []
    for device in devices:
        total += 1
        held += device.id in holders
        if device.entry.get("consumesCounters"):
            drawing.append(device)
        else:
            whole += 1
    # A partitionable GPU is advertised as its whole device and each partition: one physical GPU.
    units = physical_devices(sorted(drawing, key=page_order))
    return {
        "total": total,
        "held": held,
        "gpus": whole + len(units),
        "partitioned": [
            {"node": node_of(u.devices[0]), "devices": [d.name for d in u.devices]} for u in units if len(u.devices) > 1
        ],
    }


def inventory_usage(inventory: Inventory) -> dict[str, Any]:
    """The page's counts (``inventory_totals``), the counter sets in use and the devices their consumed
    counters block (each with its node, for the page's node filter), and match-devices' unavailable
    devices (``match_unavailable``); no counter sets without a device drawing on one."""
    totals = inventory_totals(inventory.devices, inventory.holders)
    # What match-devices says of the devices it cannot allocate that no claim holds whole.
    unavailable = [[*device_id, text] for device_id, text in sorted(match_unavailable(inventory).items())]
    if not any(d.entry.get("consumesCounters") for d in inventory.devices):
        return {"totals": totals, "counter_sets": [], "blocked": [], "unavailable": unavailable}
    blocked = counter_blocked(inventory)
    return {
        "totals": totals,
        "unavailable": unavailable,
        "counter_sets": counter_set_usage(inventory),
        "blocked": [
            {"device": list(device_id), "node": node_of(inventory.by_id[device_id]), "entry": entry}
            for device_id, entry in sorted(blocked.items())
        ],
    }
