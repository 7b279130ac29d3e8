"""What a selector reading only literal attribute and capacity lookups can see of a device, from its raw entry.

Such a selector answers alike for devices that agree on the driver, on whether the device converts
for CEL at all (a value that does not convert fails every selector, even one it never reads), on
which domains exist (an absent one reads as an empty map) and on the raw entries it looks up: see
``Device.projection``. Converting a device for CEL only to learn the first three is most of what
grouping 40,000 devices cost (~12 µs a device); the types of its values usually show it converts, and
its attribute names give its domains. A device whose values might not convert, or whose shape is
unusual, is converted for real, so its error and its key are what ``Device.projection`` says.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from domain.allocator.cel import Device, _capacity_value, _version_value
from domain.cluster.quantity import QuantityError
from domain.cluster.semver import SemverError

Ref = tuple[str, str, str]  # (kind, domain, name), as selector_references gives them

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# What the real conversion catches (cel._by_domain): a value raising it makes the device an error.
_CONVERSION_ERRORS = (QuantityError, SemverError, TypeError, ValueError)


class Outline(NamedTuple):
    """A device as far as grouping needs it, computed once per device and state."""

    driver: str
    attributes: Mapping[str, Any]
    capacity: Mapping[str, Any]
    # (driver, attribute domains, capacity domains): shared by the devices with the same names
    domains: tuple[str, frozenset[str], frozenset[str]]
    converted: Device | None  # set when the entry needed the real conversion: keys come from it then


def outline(driver: str, entry: Mapping[str, Any]) -> Outline:
    body: Mapping[str, Any] = entry
    if "attributes" not in entry and "capacity" not in entry and isinstance(entry.get("basic"), Mapping):
        body = entry["basic"]  # v1beta1 layout, as Device.from_slice_entry reads it
    attributes = body.get("attributes") or {}
    capacity = body.get("capacity") or {}
    if type(attributes) is dict and type(capacity) is dict:
        domains = _domains(driver, tuple(attributes), tuple(capacity))
        if domains is not None and _converts(attributes, capacity):
            return Outline(driver, attributes, capacity, domains, None)
    device = Device.from_slice_entry(driver, dict(entry))
    return Outline(driver, attributes, capacity, (driver, frozenset(), frozenset()), device)


def projection_keys(devices: Iterable[Outline], refs: tuple[Ref, ...]) -> list[Hashable]:
    """Per device, a key equal for two devices only when a selector reading only ``refs`` sees them alike.

    That is what ``Device.projection(refs)`` tells, but from the raw entries: the values are those
    of entries that convert (see ``_converts``), so equal raw values read alike.
    """
    lookups = _lookups(refs)
    keys: list[Hashable] = []
    for device in devices:
        if device.converted is not None:
            keys.append(orjson.dumps(device.converted.projection(refs), option=orjson.OPT_SORT_KEYS))
            continue
        driver, attributes, capacities = device.driver, device.attributes, device.capacity
        key: list[Any] = [device.domains]
        for capacity, domain, name, qualified in lookups:
            if capacity:
                raw = capacities.get(name) if domain == driver else None
                key.append(None if raw is None else raw["value"])  # all CEL reads of a capacity
                raw = capacities.get(qualified)
                key.append(None if raw is None else raw["value"])
                continue
            for raw in (attributes.get(name) if domain == driver else None, attributes.get(qualified)):
                if raw is None:
                    key.append(None)
                    continue
                # One kind with a value of its own type (``_converts`` saw to it): 1 and True never meet.
                [(kind, value)] = raw.items()
                key.append((kind, tuple(value) if type(value) is list else value))
        keys.append(tuple(key))
    return keys


@functools.lru_cache(maxsize=1024)
def _lookups(refs: tuple[Ref, ...]) -> tuple[tuple[bool, str, str, str], ...]:
    return tuple((kind == "capacity", domain, name, f"{domain}/{name}") for kind, domain, name in refs)


_DOMAINS: dict[tuple[str, tuple[Any, ...], tuple[Any, ...]], tuple[str, frozenset[str], frozenset[str]] | None] = {}
_KNOWN_MAX = 10_000
_UNSET = object()


def _domains(
    driver: str, attributes: tuple[Any, ...], capacity: tuple[Any, ...]
) -> tuple[str, frozenset[str], frozenset[str]] | None:
    """The domains the names place entries in (unqualified names are the driver's), as cel._by_domain
    does; None when a name is no string (the real conversion tells what then)."""
    key = (driver, attributes, capacity)
    found = _DOMAINS.get(key, _UNSET)
    if found is not _UNSET:
        return found  # type: ignore[return-value]
    found = None
    if all(type(n) is str for n in (*attributes, *capacity)):
        found = (driver, _domains_of(driver, attributes), _domains_of(driver, capacity))
    return _remember(_DOMAINS, key, found)


def _domains_of(driver: str, names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(n.partition("/")[0] if "/" in n else driver for n in names)


def _remember(known: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(known) >= _KNOWN_MAX:
        known.clear()
    known[key] = value
    return value


def _converts(attributes: dict[str, Any], capacity: dict[str, Any]) -> bool:
    """Whether cel._by_domain surely converts every value; False when unsure (the real conversion tells)."""
    for attr in attributes.values():
        if type(attr) is not dict or len(attr) != 1:
            return False
        value = attr.get("string")
        if type(value) is str:
            continue
        value = attr.get("version")
        if type(value) is str and (value in _VERSIONS or _version(value)):
            continue
        value = attr.get("int")
        if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
            continue
        if type(attr.get("bool")) is bool or _list_converts(attr):
            continue
        return False  # no known kind, or a value of another type: the conversion says how it fails
    for cap in capacity.values():
        if type(cap) is not dict:
            return False
        value = cap.get("value")
        if type(value) is str and value in _QUANTITIES:
            continue
        if type(value) is int:  # as the conversion reads it (a bool is no int here: it refuses that)
            value = str(value)
        if type(value) is not str or not _quantity(value):
            return False
    return True


def _list_converts(attr: dict[str, Any]) -> bool:
    values = attr.get("strings")
    if type(values) is list:
        return all(type(v) is str for v in values)
    values = attr.get("ints")
    if type(values) is list:
        return all(type(v) is int and _INT64_MIN <= v <= _INT64_MAX for v in values)
    values = attr.get("bools")
    if type(values) is list:
        return all(type(v) is bool for v in values)
    values = attr.get("versions")
    if type(values) is list:
        return all(type(v) is str and (v in _VERSIONS or _version(v)) for v in values)
    return False


# Values seen to convert; a cluster's devices share a few versions and capacities.
_VERSIONS: set[str] = set()
_QUANTITIES: set[str] = set()


def _version(value: str) -> bool:
    return _seen_to_convert(value, _version_value, _VERSIONS)


def _quantity(value: str) -> bool:
    return _seen_to_convert(value, _capacity_value, _QUANTITIES)


def _seen_to_convert(value: str, convert: Callable[[str], Any], known: set[str]) -> bool:
    try:
        convert(value)
    except _CONVERSION_ERRORS:
        return False
    if len(known) >= _KNOWN_MAX:
        known.clear()
    known.add(value)
    return True
