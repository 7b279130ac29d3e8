"""match-devices' refusals assembled pool by pool say what one pass over every device says.

``domain.allocator.refusals`` keeps each pool's part (its devices' entries in ``errors`` and
``rejected``, and the values each failing selector reads of them, counted) and joins the parts; a
part is reused while its pool lists the very same device objects. Here devices of two drivers in
several pools change one at a time (rewritten in the middle of a pool, dropped, added) and every
answer, from a cache carried over the changes, is compared with the lists and ``fail_phrases``
sentences written from every device's check afresh.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from domain.allocator.device_checks import ERROR, MATCH, DeviceCheck, SelectorCache, fail_phrases
from domain.allocator.refusals import _entry, refusals
from domain.inventory.devices import AdvertisedDevice, Reach

DRIVERS = ("gpu.nvidia.com", "gpu.example.com")
MODELS = (("NVIDIA A100-SXM4-40GB", "40Gi"), ("NVIDIA H100 80GB HBM3", "80Gi"), ("NVIDIA H100 80GB HBM3", "81920Mi"))
# Two class selectors, each false on some devices: their sentences come first, in first-seen order.
CLASS = (
    "device.capacity[device.driver].memory.compareTo(quantity('81920Mi')) != 0",
    "device.attributes[device.driver].productName != 'NVIDIA A100-SXM4-40GB' || device.driver == 'gpu.example.com'",
)
ASKED = [
    # Reads the driver: its value is said only when the failing devices have more than one driver.
    "device.driver == 'gpu.nvidia.com' && device.capacity[device.driver].memory.compareTo(quantity('50Gi')) > 0",
    "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",
    "device.attributes['gpu.example.com'].mig == true",  # a bool on some devices, an int on others
    "device.capacity['gpu.nvidia.com'].slots.compareTo(quantity('2')) >= 0",  # an error where none
]


def _device(rng: random.Random, driver: str, pool: str, index: int) -> AdvertisedDevice:
    product, memory = rng.choice(MODELS)
    attributes: dict[str, Any] = {"productName": {"string": product}}
    if rng.random() < 0.5:
        attributes["mig"] = rng.choice([{"bool": True}, {"int": 1}, {"bool": False}])
    capacity: dict[str, Any] = {"memory": {"value": memory}}
    if rng.random() < 0.5:
        capacity["slots"] = {"value": str(rng.randint(1, 3))}
    entry = {"name": f"gpu-{index}", "attributes": attributes, "capacity": capacity}
    return AdvertisedDevice(driver, pool, f"gpu-{index}", entry, Reach(node_name=pool), pool, pool, None, 1, True)


def _afresh(devices: list[AdvertisedDevice], asked: tuple[str | None, tuple[str, ...], str]) -> Any:
    """The errors, rejected and why-not sentences from every device's check, in one pass."""
    verdicts = SelectorCache().verdicts(devices, asked[1], (asked[2],))
    checks = [DeviceCheck(d, *v) for d, v in zip(devices, verdicts, strict=True)]
    errors = [_entry(c.device, v, asked[0]) for c, v in zip(checks, verdicts, strict=True) if c.outcome == ERROR]
    failed = [c for c in checks if c.outcome not in (MATCH, ERROR)]
    rejected = [_entry(c.device, v, asked[0]) for c, v in zip(checks, verdicts, strict=True) if c in failed]
    why_not = []
    for whose, group in (
        ("class", [c for c in failed if c.from_class]),
        ("request", [c for c in failed if not c.from_class]),
    ):
        why_not += fail_phrases(group, whose, len(group)) if group else []
    return errors, rejected, why_not


def _change(rng: random.Random, devices: list[AdvertisedDevice]) -> set[tuple[str, str, str]]:
    """Rewrite a device in the middle of its pool, drop one or add one; the ids of the devices gone."""
    what = rng.choice(["rewrite", "rewrite", "drop", "add"])
    if what == "add":
        driver, pool = rng.choice(sorted({(d.driver, d.pool) for d in devices}))
        devices.append(_device(rng, driver, pool, 100 + len(devices)))
        devices.sort(key=lambda d: d.id)
        return set()
    middle = [i for i, d in enumerate(devices) if i and devices[i - 1].pool == d.pool]
    i = rng.choice(middle)
    gone = devices[i]
    if what == "drop":
        del devices[i]
    else:
        devices[i] = _device(rng, gone.driver, gone.pool, int(gone.name.removeprefix("gpu-")))
    return {gone.id}


@pytest.mark.parametrize("seed", range(4))
def test_refusals_joined_from_pools_equal_one_pass_over_the_devices(seed: int) -> None:
    rng = random.Random(seed)
    devices = sorted(
        (_device(rng, DRIVERS[p % 2], f"node-{p}", i) for p in range(6) for i in range(rng.randint(2, 5))),
        key=lambda d: d.id,
    )
    asked_all = [("gpu" if c else None, c, e) for e in ASKED for c in ((), CLASS)]
    # A cache per question, carried over every change: its pools' parts are never dropped as the
    # least recently asked, so each answer after a change joins parts kept from before it.
    caches = {asked: SelectorCache() for asked in asked_all}
    seen = set()
    for step in range(12):
        if step:
            devices = list(devices)  # a new list, as after a slice change
            gone = _change(rng, devices)
            caches = {asked: cache.carried(gone) for asked, cache in caches.items()}
        for asked in asked_all:
            cache = caches[asked]
            verdicts = cache.verdicts(devices, asked[1], (asked[2],))
            got = refusals(cache, devices, verdicts, asked)
            assert got == _afresh(devices, asked), (seed, step, asked)
            seen |= {"errors"} if got[0] else set()
            seen |= {"driver"} if any("driver gpu" in why for why in got[2]) else set()
            seen |= {"grouped"} if any(" and " in why for why in got[2]) else set()
            seen |= {"class"} if any("class selector" in why for why in got[2]) else set()
    assert seen == {"errors", "driver", "grouped", "class"}
