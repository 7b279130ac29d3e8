"""Which slices each pool has after every ResourceSlice change, and how many physical devices it then
advertises: the inventory over time that the review's device-hours and the overview's chart count.

A slice counts from its first stored version on; one first seen later than its ``creationTimestamp``
was advertising since then, as an allocation counts from its own ``allocationTimestamp``, even before
history began. Between two changes nothing moves, so the sweep visits each slice only at the times its
state changes (its versions, and the first change at or after its creation), not every slice at every
change: a cluster whose slices change every minute has thousands of changes a day.

The same sweep runs over the slices themselves (``capacity.InventoryTimeline``, by model) and over what
the derived layer stored of each slice version (``SliceFacts``), which needs no slice decoded unless a
pool has several slices at once.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from domain.cluster.state import ClusterState, Object, meta
from domain.cluster.timefmt import parse_time
from domain.inventory.devices import advertised_devices, slice_pool
from domain.inventory.equivalents import PhysicalDevice, physical_devices

S = TypeVar("S")  # what a version holds: the slice itself, or its stored facts
PoolKey = tuple[str, str]  # (driver, pool)


@dataclass(frozen=True)
class SliceFacts:
    """What counting its pool's devices reads of one ResourceSlice version."""

    pool: PoolKey
    created: datetime | None  # its creationTimestamp
    alone: int  # physical devices its pool advertises when it is the pool's only slice
    version: int  # the stored version's key, to read the slice when its pool has several


def pool_units(at: datetime, slices: Mapping[str, Object]) -> list[PhysicalDevice]:
    """The physical devices a pool advertises with ``slices`` (its slices by UID), as the inventory
    groups them (``equivalents.physical_devices``). Nothing but the slices counts: not the time."""
    return physical_devices(advertised_devices(ClusterState(at, {"ResourceSlice": dict(slices)})))


def slice_created(slice_obj: Object) -> datetime | None:
    return parse_time(meta(slice_obj).get("creationTimestamp"))


@dataclass
class PoolChange(Generic[S]):
    """At ``at``: the pools whose slices changed, and every pool's slices by UID (shared; read only)."""

    at: datetime
    changed: set[PoolKey]
    slices: dict[PoolKey, dict[str, S]]


def pool_changes(
    versions: Mapping[str, Sequence[tuple[datetime, S | None]]],
    start: datetime,
    pool_of: Callable[[S], PoolKey],
    created_of: Callable[[S], datetime | None],
) -> Iterator[PoolChange[S]]:
    """``start`` and every later change of the slices' ``versions`` (each slice's, by UID, in time
    order; None for a deletion), with the pools whose slices changed then."""
    times = sorted({start, *(at for vs in versions.values() for at, _ in vs if at > start)})
    index = {t: i for i, t in enumerate(times)}
    events: list[list[tuple[str, S | None]]] = [[] for _ in times]
    for uid, vs in versions.items():
        for i, state in _states(vs, times, index, start, created_of):
            events[i].append((uid, state))
    live: dict[str, S] = {}
    slices: dict[PoolKey, dict[str, S]] = {}
    for t, happened in zip(times, events, strict=True):
        changed: set[PoolKey] = set()
        for uid, now in happened:
            was = live.get(uid)
            if now is was:
                continue
            if was is not None:
                key = pool_of(was)
                changed.add(key)
                del slices[key][uid], live[uid]
            if now is not None:
                key = pool_of(now)
                changed.add(key)
                slices.setdefault(key, {})[uid] = live[uid] = now
        yield PoolChange(t, changed, slices)


def _states(
    versions: Sequence[tuple[datetime, S | None]],
    times: list[datetime],
    index: dict[datetime, int],
    start: datetime,
    created_of: Callable[[S], datetime | None],
) -> Iterator[tuple[int, S | None]]:
    """(time index, the slice then) wherever its state may change: at ``start``, at the first change
    at or after its creation when it was first seen later, and at each of its versions."""
    yield 0, _at(versions, start, created_of)
    first_at, first = versions[0]
    if first is not None and first_at > start:
        created = created_of(first)
        if created is not None and start < created < first_at:
            i = bisect.bisect_left(times, created)
            if times[i] < first_at:
                yield i, first
    # At a version's time the slice is the last version of that time (``_at``): read in one pass, not
    # searched from the first version again for each (a slice republished every minute has 1,440 a day).
    for k, (at, state) in enumerate(versions):
        if at > start and (k + 1 == len(versions) or versions[k + 1][0] != at):
            yield index[at], state


def _at(
    versions: Sequence[tuple[datetime, S | None]], t: datetime, created_of: Callable[[S], datetime | None]
) -> S | None:
    current = None
    for at, state in versions:
        if at > t:
            break
        current = state
    first_at, first = versions[0]
    if current is None and first is not None and first_at > t:
        # A slice first seen later was advertising since its creationTimestamp.
        created = created_of(first)
        if created is not None and created <= t:
            return first
    return current


def slice_pool_changes(
    versions: Mapping[str, Sequence[tuple[datetime, Object | None]]], start: datetime
) -> Iterator[PoolChange[Object]]:
    """``pool_changes`` of the slices themselves."""
    return pool_changes(versions, start, slice_pool, slice_created)


@dataclass(frozen=True)
class AdvertisedTimeline:
    """Physical devices advertised from each change on (``times[i]`` until the next): what the overview's
    chart reads of the inventory over time."""

    times: list[datetime]
    totals: list[int]

    def advertised(self, t: datetime) -> int:
        i = bisect.bisect_right(self.times, t) - 1
        return self.totals[i] if i >= 0 else 0


def advertised_from_facts(
    versions: Mapping[str, Sequence[tuple[datetime, SliceFacts | None]]],
    start: datetime,
    several: Callable[[Sequence[SliceFacts]], int],
) -> AdvertisedTimeline:
    """The timeline from each slice version's stored facts: a pool with one slice advertises that
    slice's ``alone``; one with several, ``several(their facts)`` (which reads the slices)."""
    times: list[datetime] = []
    totals: list[int] = []
    counts: dict[PoolKey, int] = {}
    running = 0
    for change in pool_changes(versions, start, lambda f: f.pool, lambda f: f.created):
        for key in change.changed:
            members = list(change.slices.get(key, {}).values())
            n = members[0].alone if len(members) == 1 else several(members) if members else 0
            running += n - counts.get(key, 0)
            counts[key] = n
        times.append(change.at)
        totals.append(running)
    return AdvertisedTimeline(times, totals)
