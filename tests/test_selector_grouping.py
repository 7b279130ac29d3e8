"""Selectors evaluated once per group of devices that agree on what they read, answering as per device.

``device_checks`` answers a selector that reads devices only through literal attribute and capacity
lookups once per distinct set of the values it reads (a model's GPUs differ only in UUIDs and PCI
addresses). Every answer, errors included, must be what evaluating that device alone gives.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.allocator.cel import Device, SelectorEvaluationError, compile_selector
from domain.allocator.device_checks import (
    CLASS_FALSE,
    ERROR,
    MATCH,
    SELECTOR_FALSE,
    DeviceCheck,
    SelectorCache,
    Verdict,
    _projectable,
)
from domain.allocator.device_projection import outline
from domain.inventory.devices import AdvertisedDevice, Reach

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
    f"{GPU}.productName.includes('NVIDIA A100-SXM4-40GB')",  # a list on some devices
    "device.attributes['other.example.com'].productName == 'x'",  # only domain-qualified names have it
    f"{CAP}.memory == quantity('42')",  # capacity given as an int on some devices
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
        {"strings": ["NVIDIA A100-SXM4-40GB", "x"]},
        {"ints": [1, 3]},
        {"versions": ["1.2.3", "580.126.20"]},
        {"versions": ["1.2.3", "nope"]},
        {"bools": [True, False]},
        {"int": True},  # none of these convert either
        {"bool": 1},
        {"string": None},
        {"string": 3},
        {"string": "two", "int": 2},
        {"ints": "12"},
        {},
    ]
)
NAMES = st.sampled_from(["productName", "architecture", "driverVersion", "migProfile", "count", "uuid"])
MEMORY = st.sampled_from(["40Gi", "80Gi", "24Gi", "1Ti", "nonsense", 42, 40, True, None, 1.5])


@st.composite
def devices(draw: Any, index: int) -> AdvertisedDevice:
    attributes: dict[str, Any] = {"uuid": {"string": f"GPU-{index}"}}
    for name in draw(st.lists(NAMES, max_size=4, unique=True)):
        key = draw(st.sampled_from([name, name, f"{DRIVER}/{name}", f"other.example.com/{name}"]))
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


def checked_alone(device: AdvertisedDevice, class_exprs: list[str], request_exprs: list[str]) -> Verdict:
    for exprs, from_class in ((class_exprs, True), (request_exprs, False)):
        for expr in exprs:
            ok, error = alone(expr, device)
            if error is not None:
                return Verdict(ERROR, expr, error, from_class)
            if not ok:
                return Verdict(CLASS_FALSE if from_class else SELECTOR_FALSE, expr, None, from_class)
    return Verdict(MATCH)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    inventories(),
    st.lists(st.sampled_from(GROUPED), max_size=2),
    st.lists(st.sampled_from(GROUPED + PER_DEVICE[:1]), min_size=1, max_size=2),
)
def test_grouped_checks_are_each_devices_own(
    inventory: list[AdvertisedDevice], class_exprs: list[str], request_exprs: list[str]
) -> None:
    """Devices equal on everything a class + request selector set reads share one check."""
    cache = SelectorCache()
    expected = [checked_alone(d, class_exprs, request_exprs) for d in inventory]
    assert cache.verdicts(inventory, class_exprs, request_exprs) == expected
    assert cache.checks(inventory, class_exprs, request_exprs) == [
        DeviceCheck(d, *v) for d, v in zip(inventory, expected, strict=True)
    ]
    assert cache.verdicts(inventory, class_exprs, request_exprs) == expected  # again, from what it kept


def _device(index: int, attributes: dict[str, Any], capacity: dict[str, Any] | None = None) -> AdvertisedDevice:
    entry: dict[str, Any] = {"name": f"gpu-{index}", "attributes": attributes}
    if capacity is not None:
        entry["capacity"] = capacity
    return AdvertisedDevice(DRIVER, "pool", f"gpu-{index}", entry, Reach(node_name="n-0"), "s", "s-uid", None, 1, True)


def test_a_value_the_selector_never_reads_still_fails_the_device_with_its_own_message() -> None:
    model = {"productName": {"string": "NVIDIA H100 80GB HBM3"}}
    devices = [
        _device(0, {**model, "driverVersion": {"version": "580.126.20"}}),
        _device(1, {**model, "driverVersion": {"version": "580.x"}}),
        _device(2, {**model, "count": {"int": True}}),
        _device(3, model, {"memory": {"value": "lots"}}),
        _device(4, {**model, "uuid": {"string": "GPU-4"}}),
    ]
    expr = f"{GPU}.productName == 'NVIDIA H100 80GB HBM3'"
    assert _projectable(expr) is not None
    cache = SelectorCache()
    answers = [cache.evaluate(expr, d) for d in devices]
    assert answers == [alone(expr, d) for d in devices]
    assert [ok for ok, _ in answers] == [True, False, False, False, True]
    assert answers[1][1] is not None and answers[1][1].startswith("attribute driverVersion: parse semantic version")
    assert answers[2][1] == "attribute count: not an int64: True"
    assert answers[3][1] is not None and answers[3][1].startswith("capacity memory: ")
    assert cache.verdicts(devices, [], [expr]) == [checked_alone(d, [], [expr]) for d in devices]
    assert [outline(DRIVER, d.entry).converted is None for d in devices] == [True, False, False, False, True]


def test_lists_qualified_names_and_int_capacities_read_as_converted() -> None:
    devices = [
        _device(0, {"models": {"strings": ["a100", "h100"]}}, {"memory": {"value": 42}}),
        _device(1, {"models": {"strings": ["a100"]}}, {"memory": {"value": "42"}}),
        _device(2, {"other.example.com/models": {"strings": ["h100"]}}, {f"{DRIVER}/memory": {"value": 41}}),
        _device(3, {"models": {"versions": ["1.0.0", "2.0.0"]}}, {"memory": {"value": True}}),
    ]
    cases = {
        f"{GPU}.models.includes('h100')": [(True, None), (False, None)],
        "device.attributes['other.example.com'].models.includes('h100')": [],
        f"{CAP}.memory.compareTo(quantity('42')) == 0": [(True, None), (True, None), (False, None)],
        f"{GPU}.models.includes(semver('2.0.0'))": [],
    }
    cache = SelectorCache()
    for expr, start in cases.items():
        assert _projectable(expr) is not None
        answers = [cache.evaluate(expr, d) for d in devices]
        assert answers == [alone(expr, d) for d in devices], expr
        assert answers[: len(start)] == start, expr
        assert cache.verdicts(devices, [], [expr]) == [checked_alone(d, [], [expr]) for d in devices]
    assert cache.evaluate(f"{CAP}.memory == quantity('42')", devices[3])[1] == "capacity memory: not a string: True"
    # The first three are seen to convert from their raw values; the bool capacity needs the real conversion.
    assert [outline(DRIVER, d.entry).converted is None for d in devices] == [True, True, True, False]


def test_why_not_groups_count_each_spelling_and_keep_types_apart() -> None:
    """The why-not sentence counts devices by the values a selector reads: 1 and true read alike in
    the grouping key but are spelt apart, and the spelling most devices use is the one shown, whichever
    was seen first. Asked again through the selector cache's memo, the sentence is the same."""
    from domain.allocator.device_checks import fail_phrases

    def check(index: int, mig: Any) -> DeviceCheck:
        attributes = {"mig": mig, "productName": {"string": "NVIDIA H100 80GB HBM3"}}
        return DeviceCheck(_device(index, attributes), SELECTOR_FALSE, expr)

    expr = f"has({GPU}.mig) && {GPU}.productName == 'none'"
    checks = [check(0, {"bool": True}), *(check(i, {"int": 1}) for i in range(1, 4)), check(4, {"string": ["x"]})]
    expected = [
        "4 have mig 1 and productName 'NVIDIA H100 80GB HBM3' and 1 has mig ['x'] and productName "
        f"'NVIDIA H100 80GB HBM3', which the request selector `{expr}` rejects"
    ]
    assert fail_phrases(checks, "request", len(checks)) == expected
    cache = SelectorCache()
    assert fail_phrases(checks, "request", len(checks), cache.memo) == expected
    assert fail_phrases(checks, "request", len(checks), cache.memo) == expected  # from the memo


def test_the_selector_cache_keeps_the_memos_asked_most_recently() -> None:
    from domain.allocator.device_checks import MEMOS

    cache = SelectorCache()
    first = cache.memo("first")
    first[(DRIVER, "pool", "gpu-0")] = "kept"
    for i in range(MEMOS - 1):
        cache.memo(i)
    assert cache.memo("first") is first  # asked again: now the most recent
    cache.memo("one more")
    assert cache.memo("first") is first
    assert cache.memo(0) == {}  # the least recently asked was dropped, then asked afresh
    device = _device(0, {})
    carried = cache.carried(set())
    assert carried.memo("first") == {device.id: "kept"}
    assert cache.carried({device.id}).memo("first") == {}
