"""GPU-equivalents: allocations and inventory counted in physical devices, not in advertised entries.

A partitionable GPU is advertised as several devices (the whole GPU and its
partitions) drawing on one counter set, and a device with
``allowMultipleAllocations`` is held by several claims at once, so counting
advertised entries or allocation results counts one physical GPU several times.
Here a physical device is a counter set (every device drawing on it) or a device
drawing on none; what an allocation holds of it is ``sharing.held_fraction``
(a whole device 1.0), what all allocations hold together is the largest share of
any of its counters or capacities. The arithmetic stays in ``sharing``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from domain.cluster.claim_summaries import allocation_results
from domain.cluster.state import Object
from domain.inventory.devices import AdvertisedDevice, DeviceId, Inventory
from domain.inventory.sharing import CounterSetKey, device_counters, ledger_of
from domain.inventory.sharing import held_fraction as _held_fraction

MODEL_ATTRIBUTE = "productName"
UNKNOWN_MODEL = "unknown"


def device_model(device: AdvertisedDevice) -> str:
    return str(device.attribute(MODEL_ATTRIBUTE) or UNKNOWN_MODEL)


def held_in_part(device: AdvertisedDevice) -> bool:
    """Whether a claim may hold less than the whole of it (shared, or drawing on a counter set): an
    inventory with no such device counts every allocation whole."""
    return device.shareable or bool(device.entry.get("consumesCounters"))


def result_fraction(inventory: Inventory, result: Mapping[str, Any]) -> float:
    """The share of its physical device one result holds; a device no longer advertised counts whole."""
    device_id = (str(result.get("driver") or ""), str(result.get("pool") or ""), str(result.get("device") or ""))
    device = inventory.by_id.get(device_id)
    if device is None or not held_in_part(device):
        return 1.0  # a whole device, or one no longer advertised (what it was is unknown)
    held = _held_fraction(inventory, result)
    return float(held) if held is not None else 1.0


def claim_fractions(inventory: Inventory, claim: Object) -> list[tuple[DeviceId, float]]:
    """(device, fraction) for each result of the claim's allocation that holds a device (not adminAccess)."""
    out = []
    for r in allocation_results(claim):
        if not r.get("adminAccess"):
            device = (str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
            out.append((device, result_fraction(inventory, r)))
    return out


def equivalent_hours(fractions: list[tuple[DeviceId, float]], hours: float) -> float:
    return round(sum(f for _, f in fractions) * hours, 2)


@dataclass
class PhysicalDevice:
    """One GPU as the hardware has it: a counter set's devices, or one device drawing on none."""

    key: CounterSetKey | DeviceId
    driver: str
    model: str
    devices: list[AdvertisedDevice] = field(default_factory=list)
    partitioned: bool = False

    @property
    def shared(self) -> bool:
        return self.partitioned or any(d.shareable for d in self.devices)


def physical_devices(devices: Iterable[AdvertisedDevice]) -> list[PhysicalDevice]:
    """Advertised devices grouped by the physical device they are (or are part of)."""
    units: dict[Any, PhysicalDevice] = {}
    for device in devices:
        # Most devices draw on no counter set: no need for the ledger to know that.
        sets = sorted(device_counters(device)) if device.entry.get("consumesCounters") else []
        key: Any = sets[0] if sets else device.id
        unit = units.get(key)
        if unit is None:
            unit = units[key] = PhysicalDevice(key, device.driver, device_model(device), partitioned=bool(sets))
        unit.devices.append(device)
        if device.attribute("type") == "gpu":  # the whole device names the model, not a partition
            unit.model = device_model(device)
    return list(units.values())


def held_share(inventory: Inventory, unit: PhysicalDevice) -> Fraction:
    """How much of the physical device allocations hold: the largest share of any counter or capacity."""
    ledger = ledger_of(inventory)
    shares: list[Fraction] = []
    if unit.partitioned:
        totals = ledger.counter_sets.get(unit.key, {})  # type: ignore[call-overload]
        for name, total in totals.items():
            held = sum(h.amount.nanos for h in ledger.counter_holders(unit.key, name))  # type: ignore[arg-type]
            if total.nanos > 0:
                shares.append(Fraction(held, total.nanos))
    for device in unit.devices:
        if device.shareable:
            for name, (total, _policy) in ledger.capacities_of(device).items():
                held = sum(h.amount.nanos for h in ledger.capacity_holders(device.id, name))
                if total.nanos > 0:
                    shares.append(Fraction(held, total.nanos))
        elif not unit.partitioned and device.id in inventory.holders:
            shares.append(Fraction(1))
    return min(max(shares), Fraction(1)) if shares else Fraction(0)


def number(x: float | Fraction) -> float | int:
    """A count for a page or a metric: whole numbers stay integers, shares keep two decimals."""
    value = round(float(x), 2)
    return int(value) if value == int(value) else value


@dataclass
class ModelCount:
    """Physical devices of one driver and model, and the GPU-equivalents allocations hold of them."""

    driver: str
    model: str
    advertised: int = 0
    allocated: Fraction = Fraction(0)
    shared: bool = False  # partitioned or shared by capacity: allocated is a sum of fractions


def equivalents_by_model(inventory: Inventory) -> list[ModelCount]:
    counts: dict[tuple[str, str], ModelCount] = {}
    for unit in physical_devices(inventory.devices):
        row = counts.setdefault((unit.driver, unit.model), ModelCount(unit.driver, unit.model))
        row.advertised += 1
        row.allocated += held_share(inventory, unit)
        row.shared = row.shared or unit.shared
    return [counts[k] for k in sorted(counts)]
