"""What the inventory and device pages show of shared devices: counter sets and shares of capacity.

For each counter set of a pool: every counter's total, what allocations use and what
is free, and which claim holds which partition (and how much of the set). For a
device with ``allowMultipleAllocations``: each capacity's remaining amount and each
share's holder, ``shareID`` and ``consumedCapacity``. The amounts come from
``sharing``'s ledger, so these pages and the simulator's verdicts agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from domain.cluster.claim_summaries import allocation_results
from domain.cluster.quantity import Quantity
from domain.cluster.state import Object, ns_name, uid_of
from domain.inventory.devices import AdvertisedDevice, DeviceId, Inventory
from domain.inventory.equivalents import result_fraction
from domain.inventory.sharing import CounterSetKey, Holding, Sharing, device_counters, ledger_of, short_name


def _amounts(used: list[Holding], total: Quantity) -> dict[str, str]:
    held = sum((h.amount for h in used), Quantity(0, total.format))
    free = Quantity(max(total.nanos - held.nanos, 0), total.format)
    return {"total": str(total), "used": str(held), "free": str(free)}


def _holding_results(inventory: Inventory) -> Iterator[tuple[Object, dict[str, Any], AdvertisedDevice]]:
    """(claim, result, device) for every result that holds an advertised device (not adminAccess)."""
    for claim in sorted(inventory.state.of_kind("ResourceClaim"), key=ns_name):
        for result in allocation_results(claim):
            driver, pool = str(result.get("driver") or ""), str(result.get("pool") or "")
            device = inventory.by_id.get((driver, pool, str(result.get("device") or "")))
            if device is not None and not result.get("adminAccess"):
                yield claim, result, device


def _holder(claim: Object, inventory: Inventory, result: dict[str, Any]) -> dict[str, Any]:
    namespace, name = ns_name(claim)
    return {
        "namespace": namespace,
        "claim": f"{namespace}/{name}",
        "claim_uid": uid_of(claim),
        "fraction": round(result_fraction(inventory, result), 4),
    }


def counter_set_usage(inventory: Inventory) -> list[dict[str, Any]]:
    """Every counter set: its node and devices, each counter's total/used/free, and who holds which partition."""
    ledger = ledger_of(inventory)
    drawing: dict[CounterSetKey, list[AdvertisedDevice]] = {}
    for device in inventory.devices:
        for key in ledger.counters_of(device):
            drawing.setdefault(key, []).append(device)
    holders: dict[CounterSetKey, list[dict[str, Any]]] = {}
    for claim, result, device in _holding_results(inventory):
        for key, amounts in device_counters(device).items():
            takes = ", ".join(f"{name} {amount}" for name, amount in amounts.items())
            entry = {**_holder(claim, inventory, result), "device": device.name, "takes": takes}
            holders.setdefault(key, []).append(entry)
    out = []
    for key in sorted(ledger.counter_sets):
        driver, pool, name = key
        devices = drawing.get(key, [])
        counters = [
            {"name": counter, **_amounts(ledger.counter_holders(key, counter), total)}
            for counter, total in ledger.counter_sets[key].items()
        ]
        out.append(
            {
                "driver": driver,
                "pool": pool,
                "name": name,
                "node": next((d.node_name for d in devices if d.node_name), ""),
                "devices": [d.name for d in devices],
                "counters": counters,
                "holders": holders.get(key, []),
            }
        )
    return out


def shared_device_usage(inventory: Inventory, device_id: DeviceId) -> dict[str, Any] | None:
    """A device with ``allowMultipleAllocations``: each capacity's total/used/free and each share; else None."""
    device = inventory.by_id.get(device_id)
    if device is None or not device.shareable:
        return None
    ledger = ledger_of(inventory)
    capacities = [
        {"name": short_name(name, device.driver), **_amounts(ledger.capacity_holders(device_id, name), total)}
        for name, (total, _policy) in ledger.capacities_of(device).items()
    ]
    shares = [
        {
            **_holder(claim, inventory, result),
            "share_id": str(result.get("shareID") or ""),
            "consumed": ", ".join(f"{k} {v}" for k, v in sorted((result.get("consumedCapacity") or {}).items())),
        }
        for claim, result, d in _holding_results(inventory)
        if d.id == device_id
    ]
    return {"capacities": capacities, "shares": shares}


def counter_sets_of(inventory: Inventory, device_id: DeviceId) -> list[dict[str, Any]]:
    """The usage of the counter sets one device draws on (for its page)."""
    device = inventory.by_id.get(device_id)
    if device is None:
        return []
    keys = {k[2] for k in ledger_of(inventory).counters_of(device)}
    return [u for u in counter_set_usage(inventory) if (u["driver"], u["pool"]) == device_id[:2] and u["name"] in keys]


def counter_blocked(
    inventory: Inventory, devices: Iterable[AdvertisedDevice] | None = None
) -> dict[DeviceId, dict[str, Any]]:
    """Devices no claim holds that still cannot be allocated: their counter sets are partly consumed.

    The allocator's own check (``Sharing.unavailable``, what ``match-devices`` and the verdicts read)
    decides; for each such device: the scarcest counter (set, name, free, total, what the device
    needs) and which claim holds which partition of the set (``counter_set_usage``'s holders).
    """
    ledger = ledger_of(inventory)
    sharing: Sharing | None = None
    usage: list[dict[str, Any]] | None = None
    out: dict[DeviceId, dict[str, Any]] = {}
    for device in inventory.devices if devices is None else devices:
        if device.id in inventory.holders or device.shareable or not device.entry.get("consumesCounters"):
            continue
        sharing = sharing or Sharing(ledger)
        shortage = sharing.unavailable(device)
        if shortage is None or shortage.kind != "counter":
            continue
        if usage is None:
            usage = counter_set_usage(inventory)
        key = (device.driver, device.pool, shortage.where)
        holders: list[dict[str, Any]] = next(
            (u["holders"] for u in usage if (u["driver"], u["pool"], u["name"]) == key), []
        )
        out[device.id] = {
            "counter_set": shortage.where,
            "counter": shortage.name,
            "needed": str(shortage.needed),
            "free": str(shortage.free),
            "total": str(shortage.total),
            "holders": holders,
        }
    return out
