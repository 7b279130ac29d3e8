"""The weekly capacity review: what GPUs were allocated, and how much of that was held by leaks.

Computed only from stored history and the arguments, so the same history gives
the same review whenever it is rendered.

How the numbers are made:

- Allocated device-hours: every stretch during which a claim's versions show an
  allocation (from ``allocationTimestamp``, else the first version showing it,
  until the version that drops it or deletes the claim, else ``as_of``),
  times the devices it holds exclusively (admin-access results hold nothing),
  clipped to the week.
- Leaked device-hours: the stretches during which ``leaks.flagged_intervals``
  says the claim was flagged, i.e. from ``observed_since + threshold`` until the
  condition ends (the claim releases its devices or a consumer recovers),
  clipped to the week. The wait up to the threshold is not counted: a claim
  only leaks once it would have been flagged.
- Advertised device-hours: devices of the newest generation of each pool
  (``inventory.advertised_devices``) integrated between ResourceSlice versions.
- A device's model is its ``productName`` attribute as its slices advertised it.
- GPU-equivalent hours: the same stretches, each device weighted by the fraction of
  its physical GPU the claim holds (a partition's share of its counter set, a share
  of a device's capacity; a whole device 1), read against the inventory as of
  ``as_of``. Advertised devices and the device series count physical GPUs: a
  partitioned GPU once, not once per partition.
- Weeks are ``[start, start + 7 days)`` cut at ``as_of``; a cut week is ``partial``.

The claims' stretches can come from elsewhere (``Allocations``): the derived layer stores each
``allocation_runs`` run as a row and hands the review the ones overlapping its weeks, so it reads
only those claims; every number is still made here.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from domain.cluster.state import HistoryView, Object, Version, ns_name
from domain.cluster.timefmt import rfc3339
from domain.inventory.devices import DeviceId, Inventory, allocation_time
from domain.inventory.equivalents import UNKNOWN_MODEL, claim_fractions, number
from domain.inventory.slice_timeline import AdvertisedTimeline, pool_units, slice_pool_changes
from domain.reports.leaks import (
    CachedHistory,
    Thresholds,
    claim_owner,
    flagged_intervals,
    held_devices,
)

WEEK = timedelta(days=7)


def week_containing(t: datetime) -> datetime:
    """Monday 00:00 UTC of the week ``t`` falls in: where the review's weeks start."""
    day = t.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


FLAT_FIELDS = (
    "allocated_device_hours",
    "previous_allocated_device_hours",
    "allocated_delta",
    "leaked_device_hours",
    "previous_leaked_device_hours",
    "leaked_delta",
    # A partition or a share of a device counts the fraction of the physical GPU it holds (whole devices 1).
    "allocated_gpu_equivalent_hours",
    "leaked_gpu_equivalent_hours",
)
Hours = dict[str, float]
# The week's Monday (YYYY-MM-DD) first, so CSVs of several weeks can be concatenated and told apart.
CSV_HEADER = ["week", "scope", "name", *FLAT_FIELDS, "reason"]
# The page's names for the CSV's columns and scopes.
TABLE_HEADER = [
    "Scope",
    "Name",
    "Allocated device-hours",
    "Week before",
    "Change",
    "Leaked device-hours",
    "Week before",
    "Change",
    "Allocated GPU-equivalent hours",
    "Leaked GPU-equivalent hours",
    "Leak reason",
]
SCOPE_NAMES = {"total": "All claims", "namespace": "Namespace", "model": "Model", "claim": "Claim"}


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime  # cut at as_of
    full_end: datetime

    @classmethod
    def week(cls, start: datetime, as_of: datetime) -> Window:
        full_end = start + WEEK
        return cls(start, max(start, min(full_end, as_of)), full_end)

    def hours(self, start: datetime, end: datetime) -> float:
        overlap = (min(end, self.end) - max(start, self.start)).total_seconds()
        return max(overlap, 0.0) / 3600.0

    def as_dict(self) -> dict[str, Any]:
        return {"start": rfc3339(self.start), "end": rfc3339(self.end), "partial": self.end < self.full_end}


@dataclass(frozen=True)
class Piece:
    """One device held by one claim over ``[start, end)``."""

    claim_uid: str
    namespace: str
    device: DeviceId
    start: datetime
    end: datetime
    reason: str = ""
    fraction: float = 1.0  # of the physical device (equivalents.result_fraction)


# --- allocation stretches ----------------------------------------------------------------------------


def _device_ids(claim: Object) -> tuple[DeviceId, ...]:
    return tuple((d["driver"], d["pool"], d["device"]) for d in held_devices(claim))


def allocation_runs(
    versions: Sequence[Version], until: datetime
) -> list[tuple[datetime, datetime, tuple[DeviceId, ...], datetime]]:
    """``(start, end, devices, seen)`` for each run of versions holding the same devices, zero-length
    ones included; ``seen`` is the version that showed the devices, so a run exists in every history
    from ``seen`` on (the derived layer stores runs and reads them as of a time)."""
    out: list[tuple[datetime, datetime, tuple[DeviceId, ...], datetime]] = []
    previous_at: datetime | None = None
    current: tuple[DeviceId, ...] = ()
    start = seen = until
    for version in versions:
        devices = _device_ids(version.obj) if version.obj is not None else ()
        if devices != current:
            if current:
                out.append((start, version.at, current, seen))
            if devices:
                start = seen = version.at
                stamped = allocation_time(version.obj or {})
                # The stamp dates an allocation first seen later, but never before the version without it.
                if stamped is not None and stamped < start and (previous_at is None or stamped >= previous_at):
                    start = stamped
            current = devices
        previous_at = version.at
    if current:
        out.append((start, until, current, seen))
    return out


def allocation_stretches(
    versions: Sequence[Version], until: datetime
) -> list[tuple[datetime, datetime, tuple[DeviceId, ...]]]:
    """``(start, end, devices)`` for each run of versions holding the same devices."""
    return [(start, end, devices) for start, end, devices, _ in allocation_runs(versions, until) if end > start]


def versions_since(versions: Sequence[tuple[Version, datetime | None]], since: datetime) -> list[Version]:
    """Of ``(version, valid_to)`` pairs, those ``HistoryView.all_versions(since=...)`` returns: valid
    after ``since``, deletions before it left out (the review reads claims through that window)."""
    return [
        v for v, valid_to in versions if (valid_to is None or valid_to > since) and not (v.obj is None and v.at < since)
    ]


def claim_device_fractions(versions: Sequence[Version], inventory: Inventory) -> dict[DeviceId, float]:
    """Each device's fraction as the claim's newest version holding it says, read against ``inventory``."""
    fractions: dict[DeviceId, float] = {}
    for v in versions:
        if v.obj is not None:
            fractions.update(claim_fractions(inventory, v.obj))
    return fractions


def claim_namespace(versions: Sequence[Version]) -> str:
    return next((ns_name(v.obj)[0] for v in versions if v.obj is not None), "")


def _allocated_pieces(claims: Mapping[str, Sequence[Version]], until: datetime, inventory: Inventory) -> list[Piece]:
    """Fractions are read against ``inventory`` (as of the review); devices no longer advertised count whole."""
    pieces: list[Piece] = []
    for uid, versions in claims.items():
        namespace = claim_namespace(versions)
        fractions = claim_device_fractions(versions, inventory)
        for start, end, devices in allocation_stretches(versions, until):
            pieces.extend(Piece(uid, namespace, d, start, end, fraction=fractions.get(d, 1.0)) for d in devices)
    return pieces


def _leaked_pieces(
    history: HistoryView,
    claims: Mapping[str, Sequence[Version]],
    allocated: list[Piece],
    window: Window,
    th: Thresholds,
) -> list[Piece]:
    # The claims given may be only those that can be flagged (``Allocations``): the others have no interval.
    touched = sorted({p.claim_uid for p in allocated if p.claim_uid in claims and window.hours(p.start, p.end) > 0})
    namespaces = {p.claim_uid: p.namespace for p in allocated}
    fractions = {(p.claim_uid, p.device): p.fraction for p in allocated}
    pieces: list[Piece] = []
    for uid in touched:
        versions = history.versions("ResourceClaim", uid) or claims[uid]
        for iv in flagged_intervals(history, versions, window.start, window.end, th):
            pieces.extend(
                Piece(uid, namespaces[uid], d, iv.start, iv.end, iv.reason, fractions.get((uid, d), 1.0))
                for d in iv.devices
            )
    return pieces


# --- inventory over time ------------------------------------------------------------------------------


@dataclass
class InventoryTimeline:
    """Advertised physical devices (by model) after each ResourceSlice change, from ``start`` on.

    A partitioned GPU counts once (``equivalents.physical_devices``), its partitions take its model.
    """

    times: list[datetime]
    counts: list[Counter[str]]  # model -> devices advertised from times[i] on
    models: dict[DeviceId, str]

    @classmethod
    def build(cls, history: HistoryView, start: datetime) -> InventoryTimeline:
        versions = history.all_versions("ResourceSlice", since=start)
        times: list[datetime] = []
        counts: list[Counter[str]] = []
        models: dict[DeviceId, str] = {}
        # A pool's devices depend only on that pool's slices, so at each change only the pools
        # whose slices changed are counted again (not every device of the cluster per change).
        pool_counts: dict[tuple[str, str], Counter[str]] = {}
        as_pairs = {uid: [(v.at, v.obj) for v in vs] for uid, vs in versions.items()}
        for change in slice_pool_changes(as_pairs, start):
            for key in change.changed:
                counter: Counter[str] = Counter()
                for unit in pool_units(change.at, change.slices.get(key, {})):
                    models.update((d.id, unit.model) for d in unit.devices)
                    counter[unit.model] += 1
                pool_counts[key] = counter
            # Summed in (driver, pool) order, so models come in the order of their first device.
            total: Counter[str] = Counter()
            for key in sorted(pool_counts):
                for model, n in pool_counts[key].items():
                    total[model] += n
            times.append(change.at)
            counts.append(total)
        return cls(times, counts, models)

    def model(self, device: DeviceId) -> str:
        return self.models.get(device, UNKNOWN_MODEL)

    def advertised(self, t: datetime) -> int:
        """Physical devices of every model advertised at ``t``."""
        return sum(self.at(t).values())

    def at(self, t: datetime) -> Counter[str]:
        i = bisect.bisect_right(self.times, t) - 1
        return self.counts[i] if i >= 0 else Counter()

    def device_hours(self, window: Window) -> Hours:
        out: Hours = {}
        bounds = [*self.times[1:], window.end]
        for t, end, counter in zip(self.times, bounds, self.counts, strict=True):
            hours = window.hours(t, end)
            for model, n in counter.items():
                out[model] = out.get(model, 0.0) + n * hours
        return out


# --- tallies ------------------------------------------------------------------------------------------


class Clipped:
    """Pieces, each one's hours within a window worked out once per window: the review adds the same
    pieces up by several keys (all, namespace, model, claim) and week by week."""

    def __init__(self, pieces: list[Piece]) -> None:
        self.pieces = pieces
        self._hours: dict[Window, list[float]] = {}

    def hours(self, window: Window) -> list[float]:
        found = self._hours.get(window)
        if found is None:
            start, end = window.start, window.end
            found = [window.hours(p.start, p.end) if p.end > start and p.start < end else 0.0 for p in self.pieces]
            self._hours[window] = found
        return found

    def sum(self, window: Window, key: Callable[[Piece], str], equivalents: bool = False) -> Hours:
        out: Hours = {}
        for p, hours in zip(self.pieces, self.hours(window), strict=True):
            if equivalents:
                hours *= p.fraction
            if hours > 0:
                k = key(p)
                out[k] = out.get(k, 0.0) + hours
        return out


def _r(x: float) -> float:
    return round(x, 2)


def _flat(
    alloc: Hours, prev_alloc: Hours, leak: Hours, prev_leak: Hours, eq_alloc: Hours, eq_leak: Hours, k: str
) -> dict[str, Any]:
    a, pa, lk, pl = (d.get(k, 0.0) for d in (alloc, prev_alloc, leak, prev_leak))
    return {
        "allocated_device_hours": _r(a),
        "previous_allocated_device_hours": _r(pa),
        "allocated_delta": _r(a - pa),
        "leaked_device_hours": _r(lk),
        "previous_leaked_device_hours": _r(pl),
        "leaked_delta": _r(lk - pl),
        "allocated_gpu_equivalent_hours": _r(eq_alloc.get(k, 0.0)),
        "leaked_gpu_equivalent_hours": _r(eq_leak.get(k, 0.0)),
    }


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole > 0 else None


def percent(share: float | None) -> str:
    """A share (``utilization``, ``leaked_share``) as the page and the e-mail show it: ``62.5%``, or
    ``n/a`` when nothing was advertised (or allocated) to divide by."""
    return "n/a" if share is None else f"{share * 100:.1f}%"


def _breakdown(
    allocated: Clipped, leaked: Clipped, week: Window, prev: Window, key: Callable[[Piece], str]
) -> tuple[list[str], Callable[[str], dict[str, Any]]]:
    sums = [allocated.sum(week, key), allocated.sum(prev, key), leaked.sum(week, key), leaked.sum(prev, key)]
    equivalents = [allocated.sum(week, key, True), leaked.sum(week, key, True)]
    keys = sorted(set().union(*sums), key=lambda k: (-sums[0].get(k, 0.0), k))
    return keys, lambda k: _flat(sums[0], sums[1], sums[2], sums[3], equivalents[0], equivalents[1], k)


# --- the review ---------------------------------------------------------------------------------------


# The devices allocated over a window, as steps: the count at the window's start, then at each time it
# changes (sorted, no two at one time). A chart needs no more than these.
AllocatedSteps = list[tuple[datetime, float]]


def allocated_steps(allocated: Sequence[Piece], start: datetime, end: datetime) -> AllocatedSteps:
    """The GPU-equivalents ``allocated`` hold from ``start`` to ``end``: a device counts at most once,
    however many pieces hold it at a time (a partition or a share adds its fraction); stretches still
    open at ``end`` stay counted."""
    events: list[tuple[datetime, int, Piece]] = []
    for p in allocated:
        if p.end > start and p.start < end:
            events.append((max(p.start, start), 1, p))
            if p.end < end:
                events.append((p.end, -1, p))
    events.sort(key=lambda e: (e[0], e[1]))
    held: dict[DeviceId, float] = {}
    total = 0.0  # sum of min(held, 1) over devices, kept as events come
    steps: AllocatedSteps = [(start, 0.0)]
    for at, delta, piece in events:
        before = held.get(piece.device, 0.0)
        after = before + delta * piece.fraction
        if after <= 1e-9:
            held.pop(piece.device, None)
            after = 0.0
        else:
            held[piece.device] = after
        total += min(after, 1.0) - min(before, 1.0)
        if steps[-1][0] == at:
            steps[-1] = (at, total)
        else:
            steps.append((at, total))
    return steps


def _device_series(
    allocated: list[Piece], inventory: InventoryTimeline | AdvertisedTimeline, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """Allocated vs advertised devices at ``start`` and at every change up to ``end``."""
    return _series(allocated_steps(allocated, start, end), inventory, start, end)


def _series(
    steps: AllocatedSteps, inventory: InventoryTimeline | AdvertisedTimeline, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """The chart's points: advertised and allocated at ``start`` and wherever either changes up to ``end``."""
    times = sorted({start, *(t for t in inventory.times if start <= t <= end), *(t for t, _ in steps)})
    series: list[dict[str, Any]] = []
    i, total = 0, 0.0
    for t in times:
        while i < len(steps) and steps[i][0] <= t:
            total = steps[i][1]
            i += 1
        point = {"at": rfc3339(t), "advertised": inventory.advertised(t), "allocated": number(total)}
        if not series or (series[-1]["advertised"], series[-1]["allocated"]) != (
            point["advertised"],
            point["allocated"],
        ):
            series.append(point)
    if series and series[-1]["at"] != rfc3339(end):
        series.append({**series[-1], "at": rfc3339(end)})  # so a step chart reaches the end
    return series


def allocation_series(
    history: HistoryView,
    start: datetime,
    allocations: Allocations | None = None,
    advertised: AdvertisedSource | None = None,
    steps: StepsSource | None = None,
) -> list[dict[str, Any]]:
    """Devices advertised and allocated from ``start`` to ``history.as_of``, at every change, as the review
    counts. ``advertised`` may give the devices advertised over time (the derived layer's, from facts it
    stored of each slice version); when it has none, the slices are counted here. ``steps`` may give the
    devices allocated over time (the derived layer's, counted where its spans are stored); when it has
    none, the pieces ``allocations`` gives are counted here."""
    counted = steps(history, start) if steps is not None else None
    if counted is None:
        _claims, allocated = (allocations or allocations_on_read)(CachedHistory(history), start, history.as_of)
        counted = allocated_steps(allocated, start, history.as_of)
    inventory = advertised(history, start) if advertised is not None else None
    return _series(counted, inventory or InventoryTimeline.build(history, start), start, history.as_of)


# Where the devices advertised over time come from, for ``(history, start)``; None: count the slices.
AdvertisedSource = Callable[[HistoryView, datetime], AdvertisedTimeline | None]

# Where the devices allocated over time come from, for ``(history, start)`` (``allocated_steps`` up to
# ``history.as_of``); None: count the pieces.
StepsSource = Callable[[HistoryView, datetime], AllocatedSteps | None]


# Where the review's claims come from, for ``(history, since, until)``: the claims allocated within
# ``[since, until)`` that a leak condition may have held for (all of them, or only those the source
# knows were under one: no other is flagged) with their versions as ``all_versions(since=since)`` has
# them, and every allocated claim's pieces in that order (claims, then time, then each stretch's
# devices: sums add up in the same order). Pieces outside the span may be left out; they add nothing.
# The derived layer has one that reads stored spans and its leak candidates (derived.review), and
# fills ``history`` with the claims' and consumers' versions.
Allocations = Callable[[CachedHistory, datetime, datetime], tuple[Mapping[str, Sequence[Version]], list[Piece]]]


def allocations_on_read(
    history: CachedHistory, since: datetime, until: datetime
) -> tuple[Mapping[str, Sequence[Version]], list[Piece]]:
    claims = history.all_versions("ResourceClaim", since=since)
    return claims, _allocated_pieces(claims, history.as_of, Inventory.of(history.state))


def weekly_review(
    history: HistoryView,
    week_start: datetime,
    thresholds: Thresholds | None = None,
    *,
    weeks_in_series: int = 8,
    top: int = 10,
    allocations: Allocations = allocations_on_read,
) -> dict[str, Any]:
    """The review of ``[week_start, week_start + 7 days)`` next to the week before, as of ``history.as_of``."""
    if week_start.tzinfo is None:
        raise ValueError("week_start must be timezone-aware")
    th = thresholds or Thresholds()
    history = CachedHistory(history)
    as_of = history.as_of
    week = Window.week(week_start, as_of)
    prev = Window.week(week_start - WEEK, as_of)
    series_start = week_start - WEEK * max(weeks_in_series - 1, 1)
    span = Window(series_start, week.end, week.full_end)

    claims, allocated = allocations(history, series_start, week.end)
    leaked = _leaked_pieces(history, claims, allocated, span, th)
    inventory = InventoryTimeline.build(history, prev.start)

    held, flagged = Clipped(allocated), Clipped(leaked)
    _, total = _breakdown(held, flagged, week, prev, lambda p: "")
    ns_keys, by_ns = _breakdown(held, flagged, week, prev, lambda p: p.namespace)
    model_keys, by_model = _breakdown(held, flagged, week, prev, lambda p: inventory.model(p.device))
    advertised, prev_advertised = inventory.device_hours(week), inventory.device_hours(prev)

    totals = total("")
    totals.update(
        advertised_device_hours=_r(sum(advertised.values())),
        previous_advertised_device_hours=_r(sum(prev_advertised.values())),
        utilization=_share(totals["allocated_device_hours"], sum(advertised.values())),
        previous_utilization=_share(totals["previous_allocated_device_hours"], sum(prev_advertised.values())),
        leaked_share=_share(totals["leaked_device_hours"], totals["allocated_device_hours"]),
    )
    # Models in allocation order, then models that were only advertised.
    rank = {m: i for i, m in enumerate(model_keys)}
    models = []
    for m in sorted(set(rank) | set(advertised) | set(prev_advertised), key=lambda m: (rank.get(m, len(rank)), m)):
        row = {"model": m, **by_model(m)}
        row["advertised_device_hours"] = _r(advertised.get(m, 0.0))
        row["utilization"] = _share(row["allocated_device_hours"], advertised.get(m, 0.0))
        models.append(row)

    return {
        "as_of": rfc3339(as_of),
        "week": week.as_dict(),
        "previous_week": prev.as_dict(),
        "thresholds": th.as_dict(),
        "totals": totals,
        "by_namespace": [{"namespace": k, **by_ns(k)} for k in ns_keys],
        "by_model": models,
        "top_offenders": _offenders(history, claims, held, flagged, week, prev, inventory, top),
        "series": {
            "devices": _device_series(allocated, inventory, prev.start, week.end),
            "weekly": _weekly(held, flagged, series_start, weeks_in_series, as_of),
        },
    }


def _weekly(allocated: Clipped, leaked: Clipped, start: datetime, weeks: int, as_of: datetime) -> list[dict[str, Any]]:
    out = []
    for i in range(max(weeks, 2)):
        w = Window.week(start + WEEK * i, as_of)
        out.append(
            {
                "week_start": rfc3339(w.start),
                "partial": w.end < w.full_end,
                "allocated_device_hours": _r(sum(allocated.sum(w, lambda p: "").values())),
                "leaked_device_hours": _r(sum(leaked.sum(w, lambda p: "").values())),
            }
        )
    return out


def _offenders(
    history: HistoryView,
    claims: Mapping[str, Sequence[Version]],
    allocated: Clipped,
    leaked: Clipped,
    week: Window,
    prev: Window,
    inventory: InventoryTimeline,
    top: int,
) -> list[dict[str, Any]]:
    keys, flat = _breakdown(allocated, leaked, week, prev, lambda p: p.claim_uid)
    ranked = sorted(
        (k for k in keys if flat(k)["leaked_device_hours"] > 0), key=lambda k: -flat(k)["leaked_device_hours"]
    )
    out = []
    for uid in ranked[:top]:
        last = next(v.obj for v in reversed(claims[uid]) if v.obj is not None)
        namespace, name = ns_name(last)
        mine = sorted(
            (p for p in leaked.pieces if p.claim_uid == uid and week.hours(p.start, p.end) > 0), key=lambda p: p.start
        )
        devices = sorted({p.device for p in mine})
        out.append(
            {
                "uid": uid,
                "namespace": namespace,
                "name": name,
                "reason": mine[-1].reason if mine else "",
                "devices": [{"driver": d, "pool": p, "device": n} for d, p, n in devices],
                "models": sorted({inventory.model(d) for d in devices}),
                "owner": claim_owner(history, last, history.as_of),
                **flat(uid),
            }
        )
    return out


def review_csv_rows(review: dict[str, Any]) -> list[list[str]]:
    """The review's table as CSV rows: a header, the total, then namespaces, models and top offenders,
    each starting with the week's Monday."""

    week = str(review["week"]["start"])[:10]

    def row(scope: str, name: str, values: dict[str, Any], reason: str = "") -> list[str]:
        return [week, scope, name, *(f"{float(values[f]):.2f}" for f in FLAT_FIELDS), reason]

    rows = [list(CSV_HEADER), row("total", "", review["totals"])]
    rows += [row("namespace", r["namespace"], r) for r in review["by_namespace"]]
    rows += [row("model", r["model"], r) for r in review["by_model"]]
    rows += [row("claim", f"{r['namespace']}/{r['name']}", r, r["reason"]) for r in review["top_offenders"]]
    return rows


def _signed(value: str) -> str:
    return value if value.startswith("-") or float(value) == 0 else f"+{value}"


def review_table(review: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The CSV's rows for reading on a page: column and scope names in words, changes signed."""
    rows = []
    for _week, scope, name, a, pa, da, lk, pl, dl, eq_a, eq_l, reason in review_csv_rows(review)[1:]:
        rows.append([SCOPE_NAMES.get(scope, scope), name, a, pa, _signed(da), lk, pl, _signed(dl), eq_a, eq_l, reason])
    return list(TABLE_HEADER), rows
