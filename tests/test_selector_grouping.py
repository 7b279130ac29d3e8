"""Selectors evaluated once per group of devices that agree on what they read, answering as per device.

``device_checks`` answers a selector that reads devices only through literal attribute and capacity
lookups once per distinct set of the values it reads (a model's GPUs differ only in UUIDs and PCI
addresses). Every answer, errors included, must be what evaluating that device alone gives.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.domain.cel import Device, SelectorEvaluationError, compile_selector
from dashboard.domain.device_checks import SelectorCache, _projectable
from dashboard.domain.inventory import AdvertisedDevice, Reach

DRIVER = "gpu.nvidia.com"
GPU = f"device.attributes['{DRIVER}']"
CAP = f"device.capacity['{DRIVER}']"

GROUPED = [
    f"{GPU}.productName == 'NVIDIA H100 80GB HBM3'",
    f"{GPU}.productName.startsWith('NVIDIA A')",
    f"{CAP}.memory.compareTo(quantity('40Gi')) >= 0",
    f"{GPU}.driverVersion.isGreaterThan(semver('560.0.0'))",
    f"has({GPU}.migProfile) && {GPU}.migProfile == '3g.40gb'",
    f"{GPU}.architecture == 'Hopper' || {GPU}.count > 2",  # count: missing on some, a string on others
    "device.attributes['other.example.com'].thing == 1",  # a domain no device has: an empty map
    f"device.driver == '{DRIVER}' && {GPU}['productName'] != ''",
    f"device.attributes[\"{DRIVER}\"].productName == 'NVIDIA H100 80GB HBM3'",
    f"{GPU}.uuid.endsWith('1') && {GPU}.productName != ''",
    "true",
]
PER_DEVICE = [
    f"{GPU}.exists(k, k == 'uuid')",
    f"size({GPU}) > 4",
    f"'migProfile' in {GPU}",
    "[1].exists(device, device == 1)",
    "device.allowMultipleAllocations",
    "device.attributes['gpu\\x2envidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
]

ATTRIBUTE_VALUES = st.sampled_from(
    [
        {"string": "NVIDIA H100 80GB HBM3"},
        {"string": "NVIDIA A100-SXM4-40GB"},
        {"string": ""},
        {"int": 3},
        {"bool": True},
        {"version": "580.126.20"},
        {"version": "535.1.0"},
        {"string": "3g.40gb"},
        {"version": "not-a-version"},  # does not convert: the whole device fails
    ]
)
NAMES = st.sampled_from(["productName", "architecture", "driverVersion", "migProfile", "count", "uuid"])
MEMORY = st.sampled_from(["40Gi", "80Gi", "24Gi", "1Ti", "nonsense"])


@st.composite
def devices(draw: Any, index: int) -> AdvertisedDevice:
    attributes: dict[str, Any] = {"uuid": {"string": f"GPU-{index}"}}
    for name in draw(st.lists(NAMES, max_size=4, unique=True)):
        key = name if draw(st.booleans()) else f"{DRIVER}/{name}"
        attributes[key] = draw(ATTRIBUTE_VALUES)
    entry: dict[str, Any] = {"name": f"gpu-{index}", "attributes": attributes}
    if draw(st.booleans()):
        entry["capacity"] = {"memory": {"value": draw(MEMORY)}}
    driver = draw(st.sampled_from([DRIVER, DRIVER, "other.example.com"]))
    return AdvertisedDevice(driver, "pool", f"gpu-{index}", entry, Reach(node_name="n-0"), "s", "s-uid", None, 1, True)


@st.composite
def inventories(draw: Any) -> list[AdvertisedDevice]:
    count = draw(st.integers(min_value=1, max_value=12))
    return [draw(devices(i)) for i in range(count)]


def alone(expr: str, device: AdvertisedDevice) -> tuple[bool, str | None]:
    try:
        return bool(compile_selector(expr).matches(Device.from_slice_entry(device.driver, dict(device.entry)))), None
    except SelectorEvaluationError as exc:
        return False, str(exc)


def test_which_selectors_are_answered_per_group() -> None:
    assert all(_projectable(expr) is not None for expr in GROUPED)
    assert all(_projectable(expr) is None for expr in PER_DEVICE)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(inventories())
def test_grouped_answers_are_each_devices_own(inventory: list[AdvertisedDevice]) -> None:
    cache = SelectorCache()
    for expr in GROUPED + PER_DEVICE:
        for device in inventory:
            assert cache.evaluate(expr, device) == alone(expr, device), (expr, device.entry, device.driver)
