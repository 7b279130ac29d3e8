"""match-devices' devices read from the derived layer (``domain.allocator.device_stock.DeviceStock``).

When the layer covers the snapshot: the devices from their ``InventoryDevice`` rows (each row's
document is the device as its slice lists it: attributes and capacity for CEL), who holds each from
the ``AllocationSpan`` rows valid at the asked time, and what cannot be allocated that no claim holds
whole from the ``InventoryUsage`` document. No slice, claim or counter set is decoded; only a device
without a node of its own reads the cluster's Nodes, to say where it is reachable from. A process keeps
each cluster's devices read last: the next snapshot with the same rows decodes none, and one whose
slices changed decodes only the rows written since (a device's row is new when the device changed), and its
selector cache carries what was learnt of the other devices (verdicts, entries, grouped values:
``SelectorCache.carried``), so only the changed devices are judged again. It keeps the holders read last
too: only the devices whose held spans changed have their holder chosen again. The CEL evaluation is the
same; the answer is the same as from the state's ``Inventory`` (tests compare them).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import connections
from django.db.models import QuerySet

from collector.history_reader import StoredHistory
from derived.inventory_listing import devices_at, held_spans
from derived.inventory_rows import advertised_device
from derived.models import AllocationSpan, InventoryDevice, InventoryUsage
from derived.reports import after_key, by_code_point, cluster_wide, covers
from domain.allocator.device_checks import SelectorCache
from domain.allocator.device_stock import DevicePage, DeviceStock
from domain.cluster.state import ClusterState
from domain.inventory.devices import AdvertisedDevice, DeviceId, NodeInfo, cluster_nodes

BATCH = 2000
SORTED_AGAIN = 1000  # more changed devices than this, and the list is sorted again rather than patched
HELD_AGAIN = 1000  # more changed held spans than this, and every held span's holder is read again
KEY = ("driver", "pool", "device")  # the devices' order, as the inventory lists them


class RowStock:
    """One snapshot's devices, holders and unavailable devices as the derivation stored them."""

    def __init__(
        self,
        state: ClusterState,
        devices: list[AdvertisedDevice],
        holders: dict[DeviceId, str],
        unavailable: dict[DeviceId, str],
        selectors: SelectorCache,
    ) -> None:
        self._state = state
        self._devices = devices
        self._holders = holders
        self._unavailable = unavailable
        self._selectors = selectors
        self._nodes: list[NodeInfo] | None = None

    @property
    def devices(self) -> Sequence[AdvertisedDevice]:
        return self._devices

    @property
    def selectors(self) -> SelectorCache:
        return self._selectors

    def holder_label(self, device_id: DeviceId) -> str | None:
        return self._holders.get(device_id)

    def unavailable(self, device: AdvertisedDevice) -> str | None:
        return self._unavailable.get(device.id)

    def nodes_of(self, device: AdvertisedDevice) -> list[str]:
        if self._nodes is None:
            self._nodes = cluster_nodes(self._state)  # Nodes only: most devices name their node
        return [n.name for n in self._nodes if device.reachable_from(n)]

    def preload(self) -> None:
        if any(d.reach.node_name is None for d in self._devices):
            self.nodes_of(self._devices[0])


def stored_stock(history: StoredHistory) -> DeviceStock | None:
    """The snapshot's ``RowStock``, once per loaded snapshot; None when the layer does not cover it (or
    its usage document is an older derivation's, without the unavailable devices)."""
    return history.derived("match-stock", lambda: _read_stock(history))


def _read_stock(history: StoredHistory) -> RowStock | None:
    usage = _usage(history)
    if usage is None:
        return None
    devices, selectors = _devices(history)
    return RowStock(history.state, devices, _holders(history), usage[1], selectors)


def stored_page(history: StoredHistory, after: DeviceId | None, count: int) -> DevicePage | None:
    """The first ``count`` devices after ``after`` (from the first when None; by driver, pool, name) as a
    page of ``RowStock``, with how many devices the snapshot has; None when the layer does not cover it. One
    page of match-devices (``/api/match-devices?limit=``): its rows alone are read, in order from their
    index, and its devices' holders, so a page costs its devices whatever the cluster's size."""
    usage = _usage(history)
    if usage is None:
        return None
    total, unavailable = usage  # the derivation counted the devices: no count of the rows
    rows = devices_at(history)
    if after is not None:
        rows = after_key(rows, KEY, after)
    read = rows.order_by(*(by_code_point(field) for field in KEY)).values_list(*KEY, "document")[: count + 1]
    devices = [advertised_device(driver, pool, name, orjson.loads(document)) for driver, pool, name, document in read]
    more = len(devices) > count
    del devices[count:]
    spans = held_spans(history.cluster.pk, history.as_of).filter(
        driver__in={d.driver for d in devices}, pool__in={d.pool for d in devices}, device__in={d.name for d in devices}
    )
    shown = {d.id for d in devices}
    read = spans.values_list("driver", "pool", "device", "namespace", "name")
    holders = {key: label for key, label in _first_holders(read).items() if key in shown}
    return DevicePage(RowStock(history.state, devices, holders, unavailable, SelectorCache()), total, more)


def _usage(history: StoredHistory) -> tuple[int, dict[DeviceId, str]] | None:
    """How many devices the snapshot has, and what cannot be allocated that no claim holds whole, from
    the usage document, read once per loaded snapshot; None when the layer does not cover the snapshot,
    or its document is an older derivation's, without those devices."""
    return history.derived("match-usage", lambda: _read_usage(history))


def _read_usage(history: StoredHistory) -> tuple[int, dict[DeviceId, str]] | None:
    if not covers(history):
        return None
    usage = cluster_wide(history, InventoryUsage, "document")
    stored = orjson.loads(usage) if usage is not None else None
    if not isinstance(stored, dict) or "unavailable" not in stored:
        return None
    unavailable = {(driver, pool, name): why for driver, pool, name, why in stored["unavailable"]}
    return int(stored["totals"]["total"]), unavailable


def _first_holders(spans: Iterable[tuple[str, str, str, str, str]]) -> dict[DeviceId, str]:
    """``namespace/name`` of the claim holding each device of ``spans`` (driver, pool, device, namespace,
    claim): as ``device_holders`` picks among a shared device's claims, the first by namespace and name."""
    first: dict[DeviceId, tuple[str, str]] = {}
    for driver, pool, name, namespace, claim in spans:
        key = (driver, pool, name)
        if key not in first or (namespace, claim) < first[key]:
            first[key] = (namespace, claim)
    return {key: f"{namespace}/{claim}" for key, (namespace, claim) in first.items()}


@dataclass(frozen=True)
class _Decoded:
    rows: frozenset[int]  # the InventoryDevice rows' keys
    by_row: dict[int, AdvertisedDevice]
    devices: list[AdvertisedDevice]
    selectors: SelectorCache


@dataclass(frozen=True)
class _Held:
    spans: dict[int, DeviceId]  # the AllocationSpan rows holding a device, and the device each holds
    holders: dict[DeviceId, str]


# Per cluster, the devices read last. A snapshot that changed no slice nor taint rule has the same rows
# (a device's row is never rewritten: a changed device gets a new row and its old one is closed), so its
# first request decodes nothing and finds the verdicts of the expressions asked before: the selector
# cache goes with the devices. One that did decodes only the rows new to it: the others' devices,
# outlines and answers are carried over.
_LAST: dict[int, _Decoded] = {}
# Per cluster, the holders read last, by the same rule: a span's claim and device are never rewritten
# (only its end, which moves it in or out of the held set), so the same held spans hold the same devices.
_LAST_HELD: dict[int, _Held] = {}


def forget() -> None:
    """Drop what this process read last of every cluster (tests: a database reused for another cluster)."""
    _LAST.clear()
    _LAST_HELD.clear()


def _device_id(device: AdvertisedDevice) -> DeviceId:
    return device.id


def _devices(history: StoredHistory) -> tuple[list[AdvertisedDevice], SelectorCache]:
    rows = devices_at(history)
    cluster_pk = history.cluster.pk
    keys = _keys(rows)
    last = _LAST.get(cluster_pk)
    if last is not None and keys == last.rows:
        return last.devices, last.selectors
    by_row = dict(last.by_row) if last is not None else {}
    # The rows read last that are not among these (a device changed or no longer advertised): C-level
    # set operations on 40,000 keys, then Python only for the few that differ.
    gone = [by_row.pop(pk) for pk in (last.rows - keys if last is not None else ())]
    new = sorted(keys - by_row.keys())
    # A few changed rows by key; most of them (a process's first request) in one pass over the rows.
    chunks = (
        [rows]
        if len(new) > len(keys) // 2
        else [InventoryDevice.objects.filter(pk__in=new[i : i + BATCH]) for i in range(0, len(new), BATCH)]
    )
    for chunk in chunks:
        for pk, driver, pool, name, document in _fetched(
            chunk.values_list("pk", "driver", "pool", "device", "document")
        ):
            if pk in keys and pk not in by_row:
                by_row[pk] = advertised_device(driver, pool, name, orjson.loads(document))
    if last is not None and len(gone) + len(new) <= SORTED_AGAIN:
        # A few devices changed: the last list keeps its order, without them, and they go in their places.
        devices = list(last.devices)
        for device in gone:
            del devices[bisect.bisect_left(devices, device.id, key=_device_id)]
        for pk in new:
            bisect.insort(devices, by_row[pk], key=_device_id)
    else:
        devices = sorted(by_row.values(), key=_device_id)  # as the inventory lists them: by (driver, pool, name)
    selectors = last.selectors.carried({device.id for device in gone}) if last is not None else SelectorCache()
    decoded = _LAST[cluster_pk] = _Decoded(keys, by_row, devices, selectors)
    return decoded.devices, decoded.selectors


def _keys(rows: QuerySet[Any]) -> frozenset[int]:
    """The primary keys ``rows`` selects: 40,000 integers in one fetch, not Django's iteration (a Python
    step per row: as long again as the query)."""
    sql, params = rows.values_list("pk").query.sql_with_params()
    with connections[rows.db].cursor() as cursor:
        cursor.execute(sql, params)
        return frozenset([key for (key,) in cursor.fetchall()])


def _fetched(rows: QuerySet[Any]) -> Iterator[tuple[Any, ...]]:
    """The tuples a ``values_list`` of plain columns selects, ``BATCH`` at a time from a server-side cursor
    (on PostgreSQL), so that 40,000 documents are not all held at once. Django's own iteration takes a
    Python step per row: ~80 ms more for a process's first read of 40,000 device rows."""
    sql, params = rows.query.sql_with_params()
    with connections[rows.db].chunked_cursor() as cursor:
        cursor.execute(sql, params)
        while batch := cursor.fetchmany(BATCH):
            yield from batch


def _holders(history: StoredHistory) -> dict[DeviceId, str]:
    """``_first_holders`` of the spans held at the asked time, patched from the holders read last: only
    the devices whose held spans differ are read and chosen for again (a snapshot where no claim changed
    reads 30,000 integers at 5,000 nodes, not 30,000 rows of names)."""
    cluster_pk = history.cluster.pk
    holding = held_spans(cluster_pk, history.as_of)
    keys = _keys(holding)
    last = _LAST_HELD.get(cluster_pk)
    if last is not None and keys == last.spans.keys():
        return last.holders
    if last is None or len(keys ^ last.spans.keys()) > HELD_AGAIN:
        rows = list(_fetched(holding.values_list("pk", "driver", "pool", "device", "namespace", "name")))
        spans = {pk: (driver, pool, device) for pk, driver, pool, device, _, _ in rows}
        holders = _first_holders(row[1:] for row in rows)
    else:
        spans = dict(last.spans)
        changed = {spans.pop(pk) for pk in last.spans.keys() - keys}
        new = sorted(keys - spans.keys())
        for i in range(0, len(new), BATCH):
            read = AllocationSpan.objects.filter(pk__in=new[i : i + BATCH])
            for pk, driver, pool, name in read.values_list("pk", "driver", "pool", "device"):
                spans[pk] = (driver, pool, name)
                changed.add(spans[pk])
        # Each changed device's held spans, all of them: its first holder is chosen among them again.
        ids = [pk for pk, device in spans.items() if device in changed]
        holders = dict(last.holders)
        for device in changed:
            holders.pop(device, None)
        for i in range(0, len(ids), BATCH):
            read = AllocationSpan.objects.filter(pk__in=ids[i : i + BATCH])
            holders.update(_first_holders(read.values_list("driver", "pool", "device", "namespace", "name")))
    _LAST_HELD[cluster_pk] = _Held(spans, holders)
    return holders
