"""Shared devices: counter sets of partitionable devices, and consumable capacity.

A partition (a MIG slice) and its whole GPU are separate devices that draw on
one counter set of their pool (``sharedCounters`` / ``consumesCounters``); a
device with ``allowMultipleAllocations`` hands out shares of its ``capacity``.
What allocation results take from either is what the scheduler's allocator
(k8s.io/dynamic-resource-allocation/structured) subtracts before it allocates
anything else, so the simulator, match-devices and reports read it here.

Rules kept from the allocator:

- A device allocated to a claim consumes its counters once, however many claims
  share it; ``adminAccess`` results consume nothing.
- A device with ``allowMultipleAllocations`` whose capacity is already in use
  does not consume its counters again.
- A share consumes, of every capacity of the device, the amount its result's
  ``consumedCapacity`` names: the request rounded up per ``requestPolicy``, its
  ``default`` when the request does not name it, the whole capacity without a policy.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from domain.cluster.quantity import Quantity, QuantityError
from domain.cluster.state import ClusterState, Object, ns_name, uid_of
from domain.inventory.devices import (
    AdvertisedDevice,
    DeviceId,
    Inventory,
    allocation,
    current_slices,
)

CounterSetKey = tuple[str, str, str]  # (driver, pool, counter set name)
_UNSET = object()
Amounts = dict[str, Quantity]


def _quantity(raw: Any) -> Quantity | None:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        raw = str(raw)
    if not isinstance(raw, str):
        return None
    try:
        return Quantity.parse(raw)
    except QuantityError:
        return None


def _counters(raw: Any) -> Amounts:
    """``{"memory": {"value": "80Gi"}}`` as quantities; entries that do not parse are left out."""
    out: Amounts = {}
    for name, counter in (raw or {}).items() if isinstance(raw, dict) else ():
        value = _quantity(counter.get("value")) if isinstance(counter, dict) else None
        if value is not None:
            out[str(name)] = value
    return out


def qualified(name: str, driver: str) -> str:
    """A capacity or attribute name with its domain: names without one are the driver's."""
    return name if "/" in name else f"{driver}/{name}"


# --- what devices advertise ------------------------------------------------------------------------


def counter_sets(state: ClusterState) -> dict[CounterSetKey, Amounts]:
    """Every counter set of the newest generation of each pool, from whichever of its slices lists it."""
    out: dict[CounterSetKey, Amounts] = {}
    for (driver, pool), slices in current_slices(state).items():
        for slice_obj in slices:
            spec = slice_obj.get("spec") or {}
            for counter_set in spec.get("sharedCounters") or ():
                if isinstance(counter_set, dict) and counter_set.get("name"):
                    out.setdefault((driver, pool, str(counter_set["name"])), _counters(counter_set.get("counters")))
    return out


def device_counters(device: AdvertisedDevice) -> dict[CounterSetKey, Amounts]:
    """What allocating the device takes from each counter set of its pool."""
    out: dict[CounterSetKey, Amounts] = {}
    for use in device.entry.get("consumesCounters") or ():
        if isinstance(use, dict) and use.get("counterSet"):
            out[(device.driver, device.pool, str(use["counterSet"]))] = _counters(use.get("counters"))
    return out


def device_capacities(device: AdvertisedDevice) -> dict[str, tuple[Quantity, Mapping[str, Any] | None]]:
    """Capacity by qualified name: (value, requestPolicy)."""
    out: dict[str, tuple[Quantity, Mapping[str, Any] | None]] = {}
    for name, entry in device.capacity.items():
        value = _quantity(entry.get("value")) if isinstance(entry, dict) else None
        if value is not None:
            policy = entry.get("requestPolicy")
            out[qualified(str(name), device.driver)] = (value, policy if isinstance(policy, dict) else None)
    return out


# --- request policies ------------------------------------------------------------------------------


def round_request(capacity: Quantity, policy: Mapping[str, Any] | None, requested: Quantity | None) -> Quantity | None:
    """What one share consumes of a capacity, or None when the policy cannot grant the request.

    No request: the policy's default, else the whole capacity. ``validValues``:
    the smallest listed value not below the request. ``validRange``: at least
    ``min``, rounded up to ``min + k*step``, at most ``max``.
    """
    if requested is None:
        default = _quantity((policy or {}).get("default"))
        return default if default is not None else capacity
    if policy is None:
        return requested
    values = sorted(q for q in (_quantity(v) for v in policy.get("validValues") or ()) if q is not None)
    if values:
        return next((v for v in values if v >= requested), None)
    bounds = policy.get("validRange")
    if not isinstance(bounds, dict):
        return requested
    low = _quantity(bounds.get("min")) or Quantity()
    step = _quantity(bounds.get("step"))
    high = _quantity(bounds.get("max"))
    amount = max(requested, low)
    if step is not None and step.nanos > 0:
        steps = -(-(amount.nanos - low.nanos) // step.nanos)
        amount = Quantity(low.nanos + steps * step.nanos, requested.format)
    if high is not None and amount > high:
        return None
    return amount


@dataclass(frozen=True)
class Unfit:
    """Why a device can never give a request the capacity it asks for, whatever is allocated."""

    device: AdvertisedDevice
    capacity: str
    requested: Quantity
    why: str  # "has 40Gi", "has no memory", "its requestPolicy allows at most 40Gi"


def share_of(device: AdvertisedDevice, requests: Mapping[str, Quantity]) -> Amounts | Unfit:
    """What one allocation for ``requests`` consumes of the device's capacities.

    Devices without allowMultipleAllocations are not shared: a capacity request
    only says the device must have that much (as a selector would). A request
    names a capacity as the device spells it: the allocator does not read
    ``memory`` as ``<driver>/memory`` there, as CEL does.
    """
    capacities = device_capacities(device)
    for name, amount in requests.items():
        if name not in device.capacity:
            return Unfit(device, qualified(name, device.driver), amount, f"has no {name}")
    wanted = {qualified(k, device.driver): v for k, v in requests.items()}
    if not device.shareable:
        for name, amount in wanted.items():
            value = capacities[name][0]
            if value < amount:
                return Unfit(device, name, amount, f"has {value}")
        return {}
    out: Amounts = {}
    for name, (value, policy) in capacities.items():
        rounded = round_request(value, policy, wanted.get(name))
        if rounded is None:
            why = f"its requestPolicy for {short_name(name, device.driver)} allows at most {_policy_max(policy)}"
            return Unfit(device, name, wanted[name], why)
        if rounded > value:
            return Unfit(device, name, rounded, f"has {value}")
        out[name] = rounded
    return out


def _policy_max(policy: Mapping[str, Any] | None) -> str:
    values = [q for q in (_quantity(v) for v in (policy or {}).get("validValues") or ()) if q is not None]
    if values:
        return str(max(values))
    return str((((policy or {}).get("validRange") or {}).get("max")) or "?")


def short_name(name: str, driver: str) -> str:
    return name.split("/", 1)[1] if name.startswith(f"{driver}/") else name


# --- what allocations hold -------------------------------------------------------------------------


@dataclass(frozen=True)
class Holding:
    """An amount of a counter or a capacity one claim holds."""

    claim: Object
    amount: Quantity

    @property
    def claim_uid(self) -> str:
        return uid_of(self.claim)

    @property
    def label(self) -> str:
        return "/".join(ns_name(self.claim))


def _consumed_capacity(result: Mapping[str, Any], device: AdvertisedDevice) -> Amounts:
    recorded = result.get("consumedCapacity")
    if isinstance(recorded, dict) and recorded:
        out = {}
        for name, raw in recorded.items():
            amount = _quantity(raw)
            if amount is not None:
                out[qualified(str(name), device.driver)] = amount
        return out
    # Results from before consumedCapacity was recorded hold what a request without amounts gets.
    share = share_of(device, {})
    return share if isinstance(share, dict) else {}


@dataclass
class Ledger:
    """What the allocated claims of a state hold of counter sets and shared capacity."""

    counter_sets: dict[CounterSetKey, Amounts]
    counters: dict[CounterSetKey, dict[str, list[Holding]]] = field(default_factory=dict)
    capacity: dict[DeviceId, dict[str, list[Holding]]] = field(default_factory=dict)
    # Devices whose allocation takes counters or capacity; the others need no accounting (most do not).
    accounted: frozenset[DeviceId] = frozenset()
    sharers: dict[DeviceId, list[str]] = field(default_factory=dict)  # claims holding shares of a device
    uses: dict[DeviceId, dict[CounterSetKey, Amounts]] = field(default_factory=dict)  # devices' consumesCounters
    capacities: dict[DeviceId, dict[str, tuple[Quantity, Mapping[str, Any] | None]]] = field(default_factory=dict)
    holder_uids: frozenset[str] = frozenset()
    _held: dict[tuple[Any, ...], int] = field(default_factory=dict, repr=False)
    shortages: dict[DeviceId, object] = field(default_factory=dict, repr=False)  # see Sharing.shortage

    @classmethod
    def of(cls, inventory: Inventory) -> Ledger:
        ledger = cls(counter_sets(inventory.state))
        for advertised in inventory.devices:  # parsed once: every simulation reads them per node and claim
            if advertised.entry.get("consumesCounters"):
                ledger.uses[advertised.id] = device_counters(advertised)
            if advertised.shareable:
                ledger.capacities[advertised.id] = device_capacities(advertised)
        ledger.accounted = frozenset(ledger.uses) | frozenset(ledger.capacities)
        counted: set[DeviceId] = set()
        for claim in sorted(inventory.state.of_kind("ResourceClaim"), key=ns_name):
            results = ((allocation(claim) or {}).get("devices") or {}).get("results") or ()
            for result in results:
                if not isinstance(result, dict) or result.get("adminAccess"):
                    continue
                device_id = (str(result.get("driver") or ""), str(result.get("pool") or ""), str(result.get("device")))
                device = inventory.by_id.get(device_id)
                if device is None:
                    continue  # no longer advertised: what it took is unknown, and nothing can take it
                if device_id not in counted:  # a shared device takes its counters once
                    counted.add(device_id)
                    for key, amounts in device_counters(device).items():
                        for name, amount in amounts.items():
                            ledger.counters.setdefault(key, {}).setdefault(name, []).append(Holding(claim, amount))
                if device.shareable:
                    ledger.sharers.setdefault(device_id, []).append(uid_of(claim))
                    for name, amount in _consumed_capacity(result, device).items():
                        ledger.capacity.setdefault(device_id, {}).setdefault(name, []).append(Holding(claim, amount))
        ledger.holder_uids = frozenset(
            h.claim_uid
            for by_name in [*ledger.counters.values(), *ledger.capacity.values()]
            for holdings in by_name.values()
            for h in holdings
        ) | frozenset(uid for uids in ledger.sharers.values() for uid in uids)
        return ledger

    def counters_of(self, device: AdvertisedDevice) -> dict[CounterSetKey, Amounts]:
        found = self.uses.get(device.id)
        return found if found is not None else device_counters(device)

    def capacities_of(self, device: AdvertisedDevice) -> dict[str, tuple[Quantity, Mapping[str, Any] | None]]:
        found = self.capacities.get(device.id)
        return found if found is not None else device_capacities(device)

    def held_nanos(self, key: tuple[Any, ...], holdings: Sequence[Holding]) -> int:
        """The sum of every holding of one counter or capacity (none excluded), cached."""
        total = self._held.get(key)
        if total is None:
            total = self._held[key] = sum(h.amount.nanos for h in holdings)
        return total

    def counter_holders(self, key: CounterSetKey, counter: str, exclude: Iterable[str] = ()) -> list[Holding]:
        skip = set(exclude)
        return [h for h in self.counters.get(key, {}).get(counter, ()) if h.claim_uid not in skip]

    def capacity_holders(self, device_id: DeviceId, name: str, exclude: Iterable[str] = ()) -> list[Holding]:
        skip = set(exclude)
        return [h for h in self.capacity.get(device_id, {}).get(name, ()) if h.claim_uid not in skip]

    def shared_in_use(self, device_id: DeviceId, exclude: Iterable[str] = ()) -> bool:
        skip = set(exclude)
        return any(uid not in skip for uid in self.sharers.get(device_id, ()))


_LEDGERS: weakref.WeakKeyDictionary[Inventory, Ledger] = weakref.WeakKeyDictionary()


def ledger_of(inventory: Inventory) -> Ledger:
    """One ledger per inventory, shared by every simulation over it."""
    ledger = _LEDGERS.get(inventory)
    if ledger is None:
        ledger = _LEDGERS[inventory] = Ledger.of(inventory)
    return ledger


# --- what is left ----------------------------------------------------------------------------------


def holders_phrase(holdings: list[Holding]) -> str:
    """ "ml/part-a holds 40Gi and ml/part-b holds 20Gi", one entry per claim."""
    per_claim: dict[str, Quantity] = {}
    for h in holdings:
        per_claim[h.label] = per_claim.get(h.label, Quantity()) + h.amount
    parts = [f"{label} holds {amount}" for label, amount in per_claim.items()]
    if len(parts) > 3:
        parts = [*parts[:3], f"{len(per_claim) - 3} more claims hold the rest"]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else (parts[0] if parts else "")


@dataclass(frozen=True)
class Shortage:
    """A device that cannot be allocated now: a counter or a capacity has too little left."""

    device: AdvertisedDevice
    kind: str  # "counter" | "capacity"
    where: str  # the counter set's name, or the device's
    name: str  # the counter, or the capacity (short form)
    needed: Quantity
    total: Quantity
    free: Quantity
    holders: tuple[Holding, ...]
    pending: Quantity = field(default_factory=Quantity)  # taken by the Pod's own earlier requests

    def sentence(self) -> str:
        """E.g. "gpu-0 needs counter set gpu-0-counters memory 80Gi, but ml/part-a holds 40Gi of it"."""
        who = holders_phrase(list(self.holders))
        if self.pending:
            own = f"the Pod's other requests take {self.pending}"
            who = f"{who} and {own}" if who else own
        if self.kind == "counter":
            return (
                f"{self.device.name} needs counter set {self.where} {self.name} {self.needed}, "
                f"but {who} of it ({self.free} of {self.total} free)"
            )
        return f"{self.device.name} has {self.free} of {self.name} left, the request needs {self.needed}: {who}"

    def availability(self) -> str:
        """For match-devices: "counter set gpu-0-counters: memory 0 of 80Gi free (ml/part-a holds 40Gi, …)"."""
        who = holders_phrase(list(self.holders))
        if self.kind == "counter":
            return f"counter set {self.where}: {self.name} {self.free} of {self.total} free ({who})"
        return f"capacity {self.name}: {self.free} of {self.total} free ({who})"


@dataclass
class Usage:
    """What a simulation's own picks take, on top of the ledger; undone when a search backtracks."""

    counters: dict[CounterSetKey, dict[str, int]] = field(default_factory=dict)  # in nanos, as Quantity keeps them
    capacity: dict[DeviceId, dict[str, int]] = field(default_factory=dict)
    shares: dict[DeviceId, int] = field(default_factory=dict)  # picks of devices with allowMultipleAllocations

    def __bool__(self) -> bool:
        return bool(self.counters or self.capacity or any(self.shares.values()))

    def copy(self) -> Usage:
        counters = {k: dict(v) for k, v in self.counters.items()}
        return Usage(counters, {k: dict(v) for k, v in self.capacity.items()}, dict(self.shares))

    def add(self, take: Take, device: AdvertisedDevice, sign: int = 1) -> None:
        """Counts (``sign=-1``: uncounts) one pick of the device."""
        counters, share, device_id = take.counters, take.share, device.id
        if device.shareable:
            self.shares[device_id] = self.shares.get(device_id, 0) + sign
        for key, amounts in counters.items():
            held = self.counters.setdefault(key, {})
            for name, amount in amounts.items():
                held[name] = held.get(name, 0) + sign * amount.nanos
        if share:
            held = self.capacity.setdefault(device_id, {})
            for name, amount in share.items():
                held[name] = held.get(name, 0) + sign * amount.nanos


@dataclass(frozen=True)
class Take:
    """What allocating one device for one request would take."""

    counters: dict[CounterSetKey, Amounts]
    share: Amounts

    @property
    def empty(self) -> bool:
        return not self.counters and not self.share


class Sharing:
    """Counter and capacity checks for one simulation: the ledger minus the simulated claims' own holdings."""

    def __init__(self, ledger: Ledger, own_claims: Iterable[str] = ()) -> None:
        self.ledger = ledger
        self.exclude = frozenset(own_claims)
        self.clean = not (self.exclude & ledger.holder_uids)  # pending claims usually hold nothing yet

    def accounted(self, device: AdvertisedDevice) -> bool:
        """Whether allocating the device takes counters or capacity (to skip the rest quickly)."""
        return device.id in self.ledger.accounted

    def take(self, device: AdvertisedDevice, share: Amounts, usage: Usage | None = None) -> Take:
        counters = self.ledger.counters_of(device)
        if counters and device.shareable:
            in_use = self.ledger.shared_in_use(device.id, self.exclude) or (
                usage is not None and usage.shares.get(device.id, 0) > 0
            )
            if in_use:
                counters = {}  # an already shared device has taken its counters
        return Take(counters, share)

    def _holdings(self, key: tuple[Any, ...], holdings: list[Holding]) -> tuple[Sequence[Holding], int]:
        if self.clean:
            return holdings, self.ledger.held_nanos(key, holdings)
        kept = [h for h in holdings if h.claim_uid not in self.exclude]
        return kept, sum(h.amount.nanos for h in kept)

    def shortage(self, device: AdvertisedDevice, take: Take, usage: Usage | None = None) -> Shortage | None:
        """What the device lacks for ``take`` (the scarcest counter or capacity); None when it fits."""
        if usage is None and self.clean and not take.share and take.counters is self.ledger.uses.get(device.id):
            # A partition against other claims only: the same answer for every request, node and Pod.
            cached = self.ledger.shortages.get(device.id, _UNSET)
            if cached is _UNSET:
                cached = self.ledger.shortages[device.id] = self._shortage(device, take, None)
            return cached if isinstance(cached, Shortage) else None
        return self._shortage(device, take, usage)

    def _shortage(self, device: AdvertisedDevice, take: Take, usage: Usage | None) -> Shortage | None:
        found: list[Shortage] = []
        for key, amounts in take.counters.items():
            total_set = self.ledger.counter_sets.get(key) or {}
            held_of_set = self.ledger.counters.get(key, {})
            pending_of_set = usage.counters.get(key) if usage else None
            for name, needed in amounts.items():
                total = total_set.get(name)
                if total is None:
                    continue  # not advertised (yet): nothing to compare with
                holders, held = self._holdings(("counter", key, name), held_of_set.get(name, []))
                pending = pending_of_set.get(name, 0) if pending_of_set else 0
                free = total.nanos - held - pending
                if free < needed.nanos:
                    found.append(_shortage(device, "counter", key[2], name, needed, total, free, holders, pending))
        if take.share:
            capacities = self.ledger.capacities_of(device)
            held_of_device = self.ledger.capacity.get(device.id, {})
            pending_of_device = usage.capacity.get(device.id) if usage else None
            for name, needed in take.share.items():
                total = capacities[name][0]
                holders, held = self._holdings(("capacity", device.id, name), held_of_device.get(name, []))
                pending = pending_of_device.get(name, 0) if pending_of_device else 0
                free = total.nanos - held - pending
                if free < needed.nanos:
                    short = short_name(name, device.driver)
                    found.append(
                        _shortage(device, "capacity", device.name, short, needed, total, free, holders, pending)
                    )
        if len(found) > 1:
            return min(found, key=_scarcity)
        return found[0] if found else None

    def unavailable(self, device: AdvertisedDevice) -> Shortage | None:
        """Whether any allocation of the device is impossible now (for match-devices).

        A counter-consuming device needs its full consumption free; a shared device
        needs, of each capacity, at least the smallest amount its policy grants.
        """
        smallest: Amounts = {}
        if device.shareable:
            for name, (value, policy) in self.ledger.capacities_of(device).items():
                smallest[name] = _smallest_share(value, policy)
        return self.shortage(device, self.take(device, smallest))


def _smallest_share(value: Quantity, policy: Mapping[str, Any] | None) -> Quantity:
    if policy is None:
        return Quantity(1)  # any positive amount: only an exhausted capacity refuses every request
    values = sorted(q for q in (_quantity(v) for v in policy.get("validValues") or ()) if q is not None)
    if values:
        return values[0]
    low = _quantity((policy.get("validRange") or {}).get("min"))
    if low is not None and low.nanos > 0:
        return low
    default = _quantity(policy.get("default"))
    return default if default is not None and default.nanos > 0 else Quantity(1)


def _scarcity(s: Shortage) -> tuple[float, str]:
    """Sorts the largest share of the whole missing first; ties by name."""
    return (-(s.needed.nanos - s.free.nanos) / max(s.total.nanos, 1), s.name)


def _shortage(
    device: AdvertisedDevice,
    kind: str,
    where: str,
    name: str,
    needed: Quantity,
    total: Quantity,
    free: int,
    holders: Sequence[Holding],
    pending: int,
) -> Shortage:
    fmt = total.format
    return Shortage(
        device, kind, where, name, needed, total, Quantity(max(free, 0), fmt), tuple(holders), Quantity(pending, fmt)
    )


# --- shares of a physical device -------------------------------------------------------------------


def held_fraction(inventory: Inventory, result: Mapping[str, Any]) -> Fraction | None:
    """The fraction of its physical device one allocation result holds, for GPU-equivalent hours.

    A partition holds its largest share of any counter of the sets it draws on
    (a 3g.40gb MIG of an 80Gi GPU with 7 compute slices: max(40/80, 3/7) = 1/2);
    a share of a device with allowMultipleAllocations its largest share of any
    capacity; a whole device 1. None when the device is no longer advertised.
    """
    device_id = (str(result.get("driver") or ""), str(result.get("pool") or ""), str(result.get("device") or ""))
    device = inventory.by_id.get(device_id)
    if device is None:
        return None
    fractions: list[Fraction] = []
    if device.shareable:
        capacities = device_capacities(device)
        for name, amount in _consumed_capacity(result, device).items():
            total = capacities.get(name, (None, None))[0]
            if total is not None and total.nanos > 0:
                fractions.append(Fraction(amount.nanos, total.nanos))
    else:
        sets = ledger_of(inventory).counter_sets
        for key, amounts in device_counters(device).items():
            for name, amount in amounts.items():
                total = sets.get(key, {}).get(name)
                if total is not None and total.nanos > 0:
                    fractions.append(Fraction(amount.nanos, total.nanos))
    return min(max(fractions), Fraction(1)) if fractions else Fraction(1)
