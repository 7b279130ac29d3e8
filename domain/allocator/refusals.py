"""match-devices' ``errors``, ``rejected`` and ``why_not``: the devices its selectors did not match.

They are assembled pool by pool. Each pool's part (its devices' entries, and per failing selector the
values its devices read, counted) is kept in the selector cache by the pool's first device and reused
while the pool lists the very same device objects: after a slice change only the pools that changed
are written again, and the answer is the parts joined, not a pass over 40,000 devices in Python. A
device's entry is kept too (``SelectorCache.memo``), so a pool written again writes only its changed
devices' entries.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

from domain.allocator.device_checks import (
    ERROR,
    MATCH,
    SelectorCache,
    Values,
    Verdict,
    rejected_by,
    selector_references,
    values_read,
)
from domain.inventory.devices import AdvertisedDevice, DeviceId

Asked = tuple[str | None, tuple[str, ...], str]  # the class, its selectors, and the expression
Failing = tuple[bool, str]  # a selector that said no: whether it is the class's, and its expression
Reading = tuple[tuple[tuple[str, str, str], ...], dict[DeviceId, Values]]  # its references, their values by device

_by_pool = operator.attrgetter("driver", "pool")


@dataclass(frozen=True)
class PoolPart:
    """One pool's share of the refusals, written for ``devices`` (compared by identity)."""

    devices: tuple[AdvertisedDevice, ...]
    errors: list[dict[str, str]]
    rejected: list[dict[str, str]]
    failing: dict[Failing, Counter[Values]]  # per failing selector, its devices' values counted in order
    drivers: dict[Failing, set[str]]  # and their drivers


def refusals(
    selectors: SelectorCache, devices: Sequence[AdvertisedDevice], verdicts: Sequence[Verdict], asked: Asked
) -> tuple[list[dict[str, str]], list[dict[str, str]], list[str]]:
    """``errors``, ``rejected`` and ``why_not`` of ``devices`` given their ``verdicts`` for ``asked``."""
    parts = selectors.memo(("refusal parts", *asked))
    # Looked up once an answer, not once a pool: each device's entry, and per failing selector the
    # references it reads with the values they read, by device.
    known = selectors.memo(("refusal", *asked))
    read: dict[Failing, Reading] = {}
    errors: list[dict[str, str]] = []
    rejected: list[dict[str, str]] = []
    failing: dict[Failing, Counter[Values]] = {}
    drivers: dict[Failing, set[str]] = {}
    start = 0
    for run in pool_runs(selectors, devices):
        end = start + len(run)
        part: PoolPart | None = parts.get(run[0].id)
        if part is None or len(part.devices) != len(run) or not all(map(operator.is_, part.devices, run)):
            part = parts[run[0].id] = _pool_part(selectors, run, verdicts[start:end], asked[0], known, read)
        start = end
        errors += part.errors
        rejected += part.rejected
        for selector, counted in part.failing.items():
            if selector in failing:
                failing[selector].update(counted)
                drivers[selector] |= part.drivers[selector]
            else:
                failing[selector] = Counter(counted)
                drivers[selector] = set(part.drivers[selector])
    return errors, rejected, _why_not(failing, drivers)


def pool_runs(selectors: SelectorCache, devices: Sequence[AdvertisedDevice]) -> list[tuple[AdvertisedDevice, ...]]:
    """``devices`` (in the inventory's order: by driver, pool, name) cut into their pools, once per list."""
    return selectors.kept(devices, ("pool runs",), lambda: [tuple(run) for _, run in groupby(devices, _by_pool)])


def _pool_part(
    selectors: SelectorCache,
    run: tuple[AdvertisedDevice, ...],
    verdicts: Sequence[Verdict],
    class_name: str | None,
    known: dict[DeviceId, dict[str, str]],
    read: dict[Failing, Reading],
) -> PoolPart:
    part = PoolPart(run, [], [], {}, {})
    for device, verdict in zip(run, verdicts, strict=True):
        if verdict.outcome == MATCH:
            continue
        said = known.get(device.id)
        if said is None:  # all of them the first time; after a slice change, the changed ones
            said = known[device.id] = _entry(device, verdict, class_name)
        if verdict.outcome == ERROR:
            part.errors.append(said)
            continue
        part.rejected.append(said)
        selector = (verdict.from_class, verdict.expression or "")
        if selector not in read:  # the values the selector reads, kept by device (as fail_phrases keeps them)
            refs = tuple(selector_references(selector[1]))
            read[selector] = (refs, selectors.memo(("values", refs)))
        if selector not in part.failing:
            part.failing[selector], part.drivers[selector] = Counter(), set()
        part.failing[selector][values_read(device, *read[selector])] += 1
        part.drivers[selector].add(device.driver)
    return part


def _entry(device: AdvertisedDevice, verdict: Verdict, class_name: str | None) -> dict[str, str]:
    """A device's entry in ``errors`` or ``rejected``."""
    if verdict.outcome == ERROR:
        where = "class selector" if verdict.from_class else "expression"
        return {"device": device.label, "error": f"{where}: {verdict.error}"}
    whose = f"DeviceClass {class_name} selector" if verdict.from_class else "expression"
    return {"device": device.label, "why": f"the {whose} `{verdict.expression}` is false"}


def _why_not(failing: dict[Failing, Counter[Values]], drivers: dict[Failing, set[str]]) -> list[str]:
    """One sentence per failing selector, the class's first, grouped by the values it reads ("all 16 have
    memory 40Gi"), as ``device_checks.fail_phrases`` says them."""
    sentences = []
    for from_class, whose in ((True, "class"), (False, "request")):
        mine = [(expr, counted) for (own, expr), counted in failing.items() if own == from_class]
        total = sum(counted.total() for _, counted in mine)
        sentences += [rejected_by(whose, expr, counted, drivers[(from_class, expr)], total) for expr, counted in mine]
    return sentences
