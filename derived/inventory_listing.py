"""The inventory page's content, unscoped: a page of advertised devices with who holds each, and the
counts above them (total, held, blocked, free, physical GPUs), the partitioned GPUs and the counter sets.

From the layer when it covers the snapshot: a page of ``InventoryDevice`` rows, their holders from the
``AllocationSpan`` rows valid at the asked time, counts in the database and the ``InventoryUsage``
document: no slice or claim of the cluster is decoded. Otherwise from the state's ``Inventory``, as
before the layer. ``listing_on_read`` stays the definition both must agree with (tests compare them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, OuterRef, Q

from collector.history_reader import StoredHistory, readable
from collector.models import ObjectVersion
from derived.inventory_rows import ORDER, advertised_device, inventory_totals, node_of, page_order
from derived.models import AllocationSpan, InventoryDevice, InventoryUsage
from derived.reports import by_code_point, cluster_wide, covers, valid_rows
from derived.writer import held_in_part_of
from domain.cluster.state import Object, meta, uid_of
from domain.inventory.devices import (
    AdvertisedDevice,
    DeviceId,
    Inventory,
    advertised_devices,
    taint_rows,
    typed_value,
)
from domain.inventory.shared_usage import counter_blocked, counter_set_usage, counter_sets_of
from domain.inventory.sharing import device_counters


@dataclass
class InventoryListing:
    page: Page[Any]  # its object_list: the page's rows (``listed_row``'s shape), holders unscoped
    total: int
    held: int
    blocked: int
    gpus: int
    partitioned: list[dict[str, Any]]  # the physical GPUs advertised as several devices: node, devices
    counter_sets: list[dict[str, Any]]  # ``counter_set_usage``'s, holders unscoped


def inventory_listing(history: StoredHistory, node: str, number: str | int | None, per_page: int) -> InventoryListing:
    """The asked page of the inventory (of one node's devices when ``node``) and its counts."""
    if covers(history):
        usage = cluster_wide(history, InventoryUsage, "document")
        if usage is not None:
            return listing_from_rows(history, node, number, per_page, orjson.loads(usage))
    return listing_on_read(history, node, number, per_page)


def listed_row(
    node: str,
    device_id: DeviceId,
    product: Any,
    memory: str | None,
    uuid: str | None,
    taints: list[dict[str, Any]],
    holder: dict[str, Any] | None,
    held_since: Any,
    blocked: dict[str, Any] | None,
) -> dict[str, Any]:
    driver, pool, name = device_id
    return {
        "node": node,
        "driver": driver,
        "pool": pool,
        "name": name,
        "product": product,
        "memory": memory,
        "uuid": uuid,
        "taints": taints,
        "holder": holder,
        "held_since": held_since,
        "blocked": blocked,
    }


def holder_of(claim: Object) -> dict[str, Any]:
    namespace, name = meta(claim).get("namespace") or "", meta(claim).get("name") or ""
    return {"namespace": namespace, "claim": "/".join(filter(None, (namespace, name))), "claim_uid": uid_of(claim)}


def _held_since(claim: Object | None) -> Any:
    return ((claim or {}).get("status") or {}).get("allocation", {}).get("allocationTimestamp")


# --- on read -------------------------------------------------------------------------------------


def listing_on_read(history: StoredHistory, node: str, number: str | int | None, per_page: int) -> InventoryListing:
    known = Inventory.of(history.state)  # built once per snapshot, shared with the other pages
    devices = sorted((d for d in known.devices if not node or node_of(d) == node), key=page_order)
    page = Paginator(devices, per_page).get_page(number)
    # Free of holders, yet not allocatable: the counters a partition holds (the allocator's own check).
    blocked = counter_blocked(known, devices)
    rows = [_row_on_read(history, d, known.holders.get(d.id), blocked.get(d.id)) for d in page.object_list]
    totals = inventory_totals(devices, known.holders)
    return InventoryListing(
        page=Page(rows, page.number, page.paginator),
        total=totals["total"],
        held=totals["held"],
        blocked=len(blocked),
        gpus=totals["gpus"],
        partitioned=totals["partitioned"],
        counter_sets=[u for u in counter_set_usage(known) if not node or u.get("node") == node],
    )


def _row_on_read(
    history: StoredHistory, device: AdvertisedDevice, holder: Object | None, blocked: dict[str, Any] | None
) -> dict[str, Any]:
    return listed_row(
        node_of(device),
        device.id,
        typed_value(device.attributes.get("productName")),
        device.capacity_value("memory"),
        device.uuid,
        taint_rows(device, history.state) if device.taints else [],
        holder_of(holder) if holder is not None else None,
        _held_since(holder),
        blocked,
    )


# --- from the layer ------------------------------------------------------------------------------


def held_spans(cluster_id: int, as_of: datetime) -> Any:
    """The allocation spans holding a device at ``as_of``: shown by then, not ended by then."""
    return AllocationSpan.objects.filter(cluster_id=cluster_id, seen__lte=as_of).filter(
        Q(end__isnull=True) | Q(end__gt=as_of)
    )


def devices_at(history: StoredHistory) -> Any:
    """The device rows valid at the asked snapshot. At the newest (the usual read) no row has closed
    after it: the open rows, read in the page's order from their partial index, not every row sorted."""
    rows = InventoryDevice.objects.filter(cluster=history.cluster)
    if not rows.filter(valid_to__gt=history.as_of).exists():
        return rows.filter(valid_to__isnull=True, valid_from__lte=history.as_of)
    return valid_rows(history, InventoryDevice)


def listing_from_rows(
    history: StoredHistory, node: str, number: str | int | None, per_page: int, usage: dict[str, Any]
) -> InventoryListing:
    cluster_id, as_of = history.cluster.pk, history.as_of
    rows = devices_at(history)
    spans = held_spans(cluster_id, as_of)
    if node:  # one node's few devices, counted here
        rows = rows.filter(node=node)
        held_here = spans.filter(driver=OuterRef("driver"), pool=OuterRef("pool"), device=OuterRef("device"))
        counts = rows.aggregate(
            total=Count("pk"),
            whole=Count("pk", filter=Q(counter_set="")),
            held=Count("pk", filter=Q(Exists(held_here))),
        )
        partitioned, units = _partitioned(rows)
        totals = {**counts, "gpus": counts["whole"] + units, "partitioned": partitioned}
    else:  # the whole inventory's, counted by the derivation
        totals = usage["totals"]
    ordered = rows.order_by(*(by_code_point(f) for f in ORDER))
    paginator = Paginator(
        ordered.values_list("node", "driver", "pool", "device", "product", "memory", "uuid", "taints"), per_page
    )
    paginator.count = totals["total"]  # counted already: no query of its own
    page = paginator.get_page(number)
    shown = list(page.object_list)
    blocked = {tuple(b["device"]): b["entry"] for b in usage["blocked"] if not node or b["node"] == node}
    holders, since = _page_holders(cluster_id, as_of, spans, [(d, p, n) for _node, d, p, n, *_rest in shown])
    listed = [
        listed_row(
            row_node,
            (driver, pool, name),
            orjson.loads(product) if product else None,
            memory,
            uuid,
            orjson.loads(taints) if taints else [],
            holders.get((driver, pool, name)),
            since.get((driver, pool, name)),
            blocked.get((driver, pool, name)),
        )
        for row_node, driver, pool, name, product, memory, uuid, taints in shown
    ]
    return InventoryListing(
        page=Page(listed, page.number, paginator),
        total=totals["total"],
        held=totals["held"],
        blocked=len(blocked),
        gpus=totals["gpus"],
        partitioned=totals["partitioned"],
        counter_sets=[u for u in usage["counter_sets"] if not node or u.get("node") == node],
    )


def _page_holders(
    cluster_id: int, as_of: datetime, spans: Any, devices: list[DeviceId], since: bool = True
) -> tuple[dict[DeviceId, dict[str, Any]], dict[DeviceId, Any]]:
    """Who holds each of the page's devices at ``as_of``, and since when its allocation says: of the
    claims whose spans hold it, the first by namespace and name (as ``device_holders`` picks among a
    shared device's claims); their versions as of then are read for the allocation's time."""
    if not devices:
        return {}, {}
    wanted = set(devices)
    first: dict[DeviceId, tuple[str, str, str]] = {}
    candidates = spans.filter(
        driver__in={d for d, _p, _n in devices},
        pool__in={p for _d, p, _n in devices},
        device__in={n for *_k, n in devices},
    ).values_list("driver", "pool", "device", "namespace", "name", "claim_uid")
    for driver, pool, name, namespace, claim, uid in candidates:
        key = (driver, pool, name)
        if key in wanted and (key not in first or (namespace, claim) < first[key][:2]):
            first[key] = (namespace, claim, uid)
    claims = _claims_as_of(cluster_id, as_of, {uid for _ns, _name, uid in first.values()}) if since else {}
    holders: dict[DeviceId, dict[str, Any]] = {}
    times: dict[DeviceId, Any] = {}
    for key, (namespace, claim, uid) in first.items():
        holders[key] = {"namespace": namespace, "claim": "/".join(filter(None, (namespace, claim))), "claim_uid": uid}
        times[key] = _held_since(claims.get(uid))
    return holders, times


def _claims_as_of(cluster_id: int, as_of: datetime, uids: set[str]) -> dict[str, Object]:
    if not uids:
        return {}
    versions = ObjectVersion.objects.filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=as_of),
        cluster_id=cluster_id,
        kind="ResourceClaim",
        uid__in=sorted(uids),
        valid_from__lte=as_of,
        deleted=False,
    ).values_list("uid", "valid_from", "content", "shapes_checked")
    out: dict[str, Object] = {}
    for uid, at, content, checked in versions:
        claim = readable("ResourceClaim", uid, at, content, checked)
        if claim is not None:
            out[uid] = claim
    return out


def _partitioned(rows: Any) -> tuple[list[dict[str, Any]], int]:
    """The physical GPUs among ``rows`` drawing on a counter set (``physical_devices``' units), in the
    page's order: those advertised as several devices (node, devices), and how many units in all."""
    units: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    drawing = rows.exclude(counter_set="").order_by(*(by_code_point(f) for f in ORDER))
    for node, driver, pool, name, counter_set in drawing.values_list("node", "driver", "pool", "device", "counter_set"):
        units.setdefault((driver, pool, counter_set), []).append((node, name))
    partitioned = [
        {"node": members[0][0], "devices": [name for _node, name in members]}
        for members in units.values()
        if len(members) > 1
    ]
    return partitioned, len(units)


# --- one device ----------------------------------------------------------------------------------


@dataclass
class DeviceNow:
    """What the device page shows of a device as of the asked time, beside its history: the device as
    advertised (None when it is not), its taints, who holds it and what its counter sets say."""

    advertised: AdvertisedDevice | None
    taints: list[dict[str, Any]]
    holder: dict[str, Any] | None  # unscoped: namespace, claim, claim_uid
    counter_sets: list[dict[str, Any]]
    blocked: dict[str, Any] | None


def device_now(history: StoredHistory, device_id: DeviceId) -> DeviceNow:
    """From the layer's rows when it covers the snapshot (the device's row, its spans, the usage
    document: nothing of the cluster decoded), else from the state."""
    usage = cluster_wide(history, InventoryUsage, "document") if covers(history) else None
    if usage is None:
        return device_now_on_read(history, device_id)
    return device_now_from_rows(history, device_id, orjson.loads(usage))


def device_now_on_read(history: StoredHistory, device_id: DeviceId) -> DeviceNow:
    # Who holds what is read from every live claim: a snapshot the layer says has no device held in
    # part needs no counter sets, and only its slices are read (nor is a holder named then).
    inventory = None if held_in_part_of(history.snapshot_pk) is False else Inventory.of(history.state)
    if inventory is not None:
        advertised = inventory.by_id.get(device_id)
    else:
        advertised = next((d for d in advertised_devices(history.state) if d.id == device_id), None)
    holder = inventory.holders.get(device_id) if inventory is not None else None
    blocked = counter_blocked(inventory, [advertised]).get(device_id) if inventory and advertised else None
    return DeviceNow(
        advertised=advertised,
        taints=taint_rows(advertised, history.state) if advertised is not None and advertised.taints else [],
        holder=holder_of(holder) if holder is not None else None,
        counter_sets=counter_sets_of(inventory, device_id) if inventory is not None else [],
        blocked=blocked,
    )


def device_now_from_rows(history: StoredHistory, device_id: DeviceId, stored: dict[str, Any]) -> DeviceNow:
    driver, pool, name = device_id
    row = valid_rows(history, InventoryDevice).filter(driver=driver, pool=pool, device=name)
    found = row.values_list("document", "taints").first()
    advertised = advertised_device(driver, pool, name, orjson.loads(found[0])) if found is not None else None
    spans = held_spans(history.cluster.pk, history.as_of)
    holders, _since = _page_holders(history.cluster.pk, history.as_of, spans, [device_id], since=False)
    keys = {key[2] for key in device_counters(advertised)} if advertised is not None else set()
    return DeviceNow(
        advertised=advertised,
        taints=orjson.loads(found[1]) if found is not None and found[1] else [],
        holder=holders.get(device_id),
        counter_sets=[
            u for u in stored["counter_sets"] if (u["driver"], u["pool"]) == (driver, pool) and u["name"] in keys
        ],
        blocked=next((b["entry"] for b in stored["blocked"] if tuple(b["device"]) == device_id), None),
    )
