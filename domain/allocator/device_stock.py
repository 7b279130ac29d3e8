"""What ``match_devices`` reads of a snapshot's advertised devices: the devices themselves (their
attributes and capacity for CEL), who holds each, and which of the others cannot be allocated now.

``InventoryStock`` reads it from a state's ``Inventory`` (every slice decoded, holders from every live
claim). The derived layer hands in its own, read from the rows it stored when the cluster changed
(``derived.match_stock``); both answer alike, which is what ``match_unavailable`` is for: the
derivation stores the answers ``InventoryStock.unavailable`` gives, so reading them back needs no
claim and no counter set.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from domain.allocator.device_checks import SelectorCache, selector_cache
from domain.cluster.state import ns_name
from domain.inventory.devices import AdvertisedDevice, DeviceId, Inventory
from domain.inventory.sharing import Sharing, ledger_of


class DeviceStock(Protocol):
    """The advertised devices of one snapshot as ``match_devices`` reads them."""

    @property
    def devices(self) -> Sequence[AdvertisedDevice]:
        """Every advertised device, sorted by (driver, pool, name)."""

    @property
    def selectors(self) -> SelectorCache:
        """The snapshot's selector cache: asked again, an expression's verdicts are kept."""

    def holder_label(self, device_id: DeviceId) -> str | None:
        """``namespace/name`` of the claim holding the device (the first by namespace and name), or None."""

    def unavailable(self, device: AdvertisedDevice) -> str | None:
        """Why a device no claim holds whole cannot be allocated now (its counters or capacity), or None."""

    def nodes_of(self, device: AdvertisedDevice) -> list[str]:
        """The nodes a device without a node name of its own is reachable from."""

    def preload(self) -> None:
        """Read everything now: a forked evaluation may not read the database."""


def takes_counters_or_capacity(device: AdvertisedDevice) -> bool:
    """Whether the ledger accounts for the device (``Ledger.of``): shared, or drawing on a counter set."""
    return device.shareable or bool(device.entry.get("consumesCounters"))


class InventoryStock:
    """A state's ``Inventory`` as a ``DeviceStock``."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self._sharing: Sharing | None = None  # the ledger only when a device takes counters or capacity
        self._labels: dict[int, str] = {}  # by the holder's identity: a claim holds several devices

    @property
    def devices(self) -> Sequence[AdvertisedDevice]:
        return self.inventory.devices

    @property
    def selectors(self) -> SelectorCache:
        return selector_cache(self.inventory)  # repeated asks over one state convert its devices once

    def holder_label(self, device_id: DeviceId) -> str | None:
        holder = self.inventory.holders.get(device_id)
        if holder is None:
            return None
        label = self._labels.get(id(holder))
        if label is None:
            namespace, name = ns_name(holder)
            label = self._labels[id(holder)] = f"{namespace}/{name}"
        return label

    def unavailable(self, device: AdvertisedDevice) -> str | None:
        if not takes_counters_or_capacity(device):
            return None
        self._sharing = self._sharing or Sharing(ledger_of(self.inventory))
        shortage = self._sharing.unavailable(device)
        return shortage.availability() if shortage is not None else None

    def nodes_of(self, device: AdvertisedDevice) -> list[str]:
        return self.inventory.nodes_of(device)

    def preload(self) -> None:
        if any(takes_counters_or_capacity(d) for d in self.inventory.devices):
            ledger_of(self.inventory)  # reads the counter sets and every claim's results


@dataclass(frozen=True)
class DevicePage:
    """Some of a snapshot's devices, as one page of match-devices' answer (``/api/match-devices?limit=``)."""

    stock: DeviceStock  # the page's devices, with their holders and availability
    total: int  # every device of the snapshot
    more: bool  # whether devices follow the page's last


class StockPart:
    """Some of a stock's devices; the rest of what it knows (holders, availability, nodes) is the stock's."""

    def __init__(self, stock: DeviceStock, devices: Sequence[AdvertisedDevice]) -> None:
        self._stock = stock
        self._devices = devices

    @property
    def devices(self) -> Sequence[AdvertisedDevice]:
        return self._devices

    @property
    def selectors(self) -> SelectorCache:
        return self._stock.selectors

    def holder_label(self, device_id: DeviceId) -> str | None:
        return self._stock.holder_label(device_id)

    def unavailable(self, device: AdvertisedDevice) -> str | None:
        return self._stock.unavailable(device)

    def nodes_of(self, device: AdvertisedDevice) -> list[str]:
        return self._stock.nodes_of(device)

    def preload(self) -> None:
        self._stock.preload()


def page_of(stock: DeviceStock, after: DeviceId | None, count: int) -> DevicePage:
    """The first ``count`` devices of ``stock`` after ``after`` (from the first when None), by (driver,
    pool, name): a page read from a state's ``Inventory`` (the derived layer reads a page's rows instead)."""
    devices = stock.devices
    start = bisect.bisect_right(devices, after, key=lambda d: d.id) if after is not None else 0
    return DevicePage(StockPart(stock, devices[start : start + count]), len(devices), start + count < len(devices))


def match_unavailable(inventory: Inventory) -> dict[DeviceId, str]:
    """What ``match_devices`` says of each device no claim holds whole that cannot be allocated now:
    the derivation stores it, so that a read of the stored rows needs neither claims nor counter sets."""
    stock = InventoryStock(inventory)
    out: dict[DeviceId, str] = {}
    for device in inventory.devices:
        if device.id in inventory.holders and not device.shareable:
            continue  # "allocated to …" instead
        text = stock.unavailable(device)
        if text is not None:
            out[device.id] = text
    return out
