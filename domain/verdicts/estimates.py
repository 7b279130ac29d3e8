"""When a Pod waiting on devices in use is likely to run: from the holders' own history.

Claimline keeps every claim's versions, so it knows how long claims like the holders held their
devices before. Each holder is compared with the finished holds (allocation to deallocation or
deletion, within ``LOOKBACK``) of claims of the same kin, the most specific first: the same
workload (the controller owning the claim's Pod, e.g. ``Job/train``), the same
ResourceClaimTemplate, the same namespace. The first kin with at least ``MIN_SPANS`` finished
holds is the basis: a holder is expected to let go at its start plus their median, or their 75th
percentile once it has outlived the median. A device the Pod could use is free once every claim
keeping it (its holder, or the holders of the shared counters or capacity it lacks) let go; the
device that completes what the Pod lacks on the node dates the estimate. A holder with too thin a
history, or held longer than three in four of its kin, has no expected end, and when the devices
cannot be counted free without it there is no estimate, and the document says why.

What is read (``wait_basis``, stored with the derived document) changes only with the claims; the
estimate is dated from it as of the time asked (``estimate_from``), so a stored document stays right.
Every time is a snapshot's (``history.as_of``, the time asked), never the clock.
"""

from __future__ import annotations

import statistics
import weakref
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from domain.cluster.state import HistoryView, Object, Version, meta, ns_name, spec_of, status_of, uid_of
from domain.cluster.timefmt import parse_time, rfc3339
from domain.inventory.devices import allocation_time, is_allocated

MIN_SPANS = 3  # finished holds of a kin below which its history is too thin to estimate from
LOOKBACK = timedelta(days=30)  # how far back finished holds are compared
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
LEVELS = ("workload", "template", "namespace")


@dataclass(frozen=True)
class Kin:
    """What makes claims comparable: their namespace, their Pod's owning workload, their template."""

    namespace: str
    workload: str | None = None  # "Job/train": the controller of the claim's Pod (or of the claim)
    template: str | None = None  # the ResourceClaimTemplate the claim was generated from

    def key(self, level: str) -> str | None:
        return self.namespace if level == "namespace" else getattr(self, level)

    def describe(self, level: str, claim_name: str) -> str:
        """The kin in words; every form names a ``namespace/name`` reference, which redaction hides."""
        if level == "workload" and self.workload:
            kind, _, name = self.workload.partition("/")
            return f"claims of {kind} {self.namespace}/{name}"
        if level == "template" and self.template:
            return f"claims from template {self.namespace}/{self.template}"
        return f"claims in the namespace of {self.namespace}/{claim_name}"


@dataclass(frozen=True)
class Hold:
    """One finished stretch a claim held devices."""

    claim_uid: str
    kin: Kin
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def holds_of(versions: Sequence[Version], until: datetime) -> list[tuple[datetime, datetime | None]]:
    """``(start, end)`` of each stretch the claim's versions are allocated; ``end`` None while still held
    at ``until``. A start is the allocation's own stamp when it dates the allocation earlier."""
    out: list[tuple[datetime, datetime | None]] = []
    start: datetime | None = None
    previous_at: datetime | None = None
    for version in versions:
        held = version.obj is not None and is_allocated(version.obj)
        if held and start is None:
            stamped = allocation_time(version.obj or {})
            start = version.at
            if stamped is not None and stamped < start and (previous_at is None or stamped >= previous_at):
                start = stamped
        elif not held and start is not None:
            out.append((start, version.at))
            start = None
        previous_at = version.at
    if start is not None:
        out.append((start, None))
    return [(s, e) for s, e in out if e is None or e <= until]


def _controller(obj: Object, skip: tuple[str, ...] = ()) -> str | None:
    refs = [r for r in meta(obj).get("ownerReferences") or () if isinstance(r, dict) and r.get("kind") not in skip]
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return f"{chosen.get('kind')}/{chosen.get('name')}" if chosen else None


def owner_pod_uid(claim: Object) -> str | None:
    for ref in meta(claim).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("kind") == "Pod":
            return str(ref.get("uid") or "") or None
    for consumer in status_of(claim).get("reservedFor") or ():
        if isinstance(consumer, dict) and consumer.get("resource") == "pods":
            return str(consumer.get("uid") or "") or None
    return None


def claim_kin(claim: Object, pods: Mapping[str, Object]) -> Kin:
    """The claim's kin, reading its Pod (owner, else first consumer) among ``pods`` by UID."""
    namespace = ns_name(claim)[0]
    pod_uid = owner_pod_uid(claim)
    pod = pods.get(pod_uid) if pod_uid else None
    workload = _controller(pod, skip=("Node",)) if pod is not None else None
    workload = workload or _controller(claim, skip=("Pod",))
    template = None
    pod_claim = (meta(claim).get("annotations") or {}).get(POD_CLAIM_ANNOTATION)
    if pod is not None and pod_claim:
        for entry in spec_of(pod).get("resourceClaims") or ():
            if isinstance(entry, dict) and entry.get("name") == pod_claim:
                template = entry.get("resourceClaimTemplateName") or None
    return Kin(namespace, workload, template)


class FinishedHolds(Protocol):
    """Where the finished holds of a history are read from: the derived layer's allocation spans
    (``derived.holds``), or a history's own versions (``VersionHolds``)."""

    def finished_holds(self, namespaces: Collection[str], since: datetime, until: datetime) -> Sequence[Hold]:
        """The holds of claims in ``namespaces`` that ended in ``[since, until]``, each with its kin."""
        ...


class VersionHolds:
    """The finished holds read from ``history``'s claim and Pod versions since the window start, once
    per window: for a history held in memory, or one no derived layer keeps spans of."""

    def __init__(self, history: HistoryView) -> None:
        self._history = history
        self._read: dict[datetime, list[Hold]] = {}

    def finished_holds(self, namespaces: Collection[str], since: datetime, until: datetime) -> Sequence[Hold]:
        found = self._read.get(since)
        if found is None:
            found = self._read[since] = self._holds(since)
        return [h for h in found if h.kin.namespace in namespaces and h.end <= until]

    def _holds(self, since: datetime) -> list[Hold]:
        history = self._history
        pods: dict[str, Object] = {}
        for uid, versions in history.all_versions("Pod", since=since).items():
            last = next((v.obj for v in reversed(versions) if v.obj is not None), None)
            if last is not None:
                pods[uid] = last
        holds: list[Hold] = []
        for uid, versions in history.all_versions("ResourceClaim", since=since).items():
            last = next((v.obj for v in reversed(versions) if v.obj is not None), None)
            if last is None:
                continue
            kin = claim_kin(last, pods)
            holds.extend(
                Hold(uid, kin, start, end)
                for start, end in holds_of(versions, history.as_of)
                if end is not None and end >= since
            )
        return holds


_VERSION_HOLDS: weakref.WeakKeyDictionary[Any, VersionHolds] = weakref.WeakKeyDictionary()


def version_holds(history: HistoryView) -> VersionHolds:
    """One ``VersionHolds`` per history, so Pods judged over one history read its versions once."""
    try:
        return _VERSION_HOLDS.setdefault(history, VersionHolds(history))
    except TypeError:  # a history that cannot be weakly referenced is read every time
        return VersionHolds(history)


def _holder_kin(history: HistoryView, claim: Object) -> Kin:
    """The kin of a claim holding devices now, reading only its own Pod."""
    pod_uid = owner_pod_uid(claim)
    pods: dict[str, Object] = {}
    if pod_uid:
        pod = next((v.obj for v in reversed(history.versions("Pod", pod_uid)) if v.obj is not None), None)
        if pod is not None:
            pods[pod_uid] = pod
    return claim_kin(claim, pods)


def _holding_since(history: HistoryView, claim: Object) -> datetime | None:
    """Since when the claim has held its devices as of ``history.as_of``, from its own versions."""
    runs = holds_of(history.versions("ResourceClaim", uid_of(claim)), history.as_of)
    return runs[-1][0] if runs and runs[-1][1] is None else None


def duration(seconds: float) -> str:
    """A span for a sentence: ``50 min``, ``2h10m``, ``3h``, ``2d4h``."""
    minutes = max(0, round(seconds / 60))
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, interpolated between the nearest ranks."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def wait_basis(
    history: HistoryView,
    blockers: Sequence[Sequence[Object]],
    lacking: int,
    node: str,
    window_start: datetime,
    finished: FinishedHolds | None = None,
) -> dict[str, Any]:
    """What the estimate is computed from, the same at every later time until the claims change.

    ``blockers``: for each device the Pod could use on ``node`` but may not now, the claims keeping
    it (its holder, or the holders of the shared counters or capacity it lacks); ``lacking``: how
    many such devices must be freed for the Pod's request to fit there; ``window_start``: the
    earliest end of a finished hold compared (``LOOKBACK`` before the Pod was created, to the day).
    Stored with the Pod's document (``verdict.wait``); ``estimate_from`` dates it as of a time.
    ``finished``: where the finished holds are read (the history's versions when None); only the
    holders' own claims and Pods are read from ``history``.
    """
    claims: dict[str, Object] = {}
    counts: dict[str, int] = {}
    for keeping in blockers:
        for claim in keeping:
            claims.setdefault(uid_of(claim), claim)
            counts[uid_of(claim)] = counts.get(uid_of(claim), 0) + 1
    holders = [(claims[uid], counts[uid]) for uid in sorted(claims)]
    kins = {uid_of(claim): _holder_kin(history, claim) for claim, _devices in holders}
    source = finished if finished is not None else version_holds(history)
    holds = source.finished_holds({k.namespace for k in kins.values()}, window_start, history.as_of)
    out = []
    for claim, devices in holders:
        uid = uid_of(claim)
        kin = kins[uid]
        namespace, name = ns_name(claim)
        entry: dict[str, Any] = {
            "claim": f"{namespace}/{name}",
            "uid": uid,
            "devices": devices,
            "since": rfc3339(_holding_since(history, claim) or allocation_time(claim) or history.as_of),
            "namespace": namespace,
            "basis": None,
            "level": None,
            "kin": None,
            "spans": 0,
            "median_seconds": None,
            "p75_seconds": None,
        }
        looked = []
        for level in LEVELS:
            key = kin.key(level)
            if key is None:
                continue
            seconds = [
                h.seconds
                for h in holds
                if h.claim_uid != uid and h.kin.namespace == kin.namespace and h.kin.key(level) == key
            ]
            looked.append(f"{kin.describe(level, name)}: {len(seconds)}")
            if len(seconds) >= MIN_SPANS:
                entry.update(
                    basis=kin.describe(level, name),
                    level=level,
                    kin=f"{namespace} {key}",
                    spans=len(seconds),
                    median_seconds=round(statistics.median(seconds)),
                    p75_seconds=round(percentile(seconds, 0.75)),
                )
                break
        entry["looked"] = ", ".join(looked)
        out.append(entry)
    return {
        "node": node,
        "lacking": lacking,
        "window_start": rfc3339(window_start),
        "holders": out,
        "devices": sorted(sorted({uid_of(c) for c in keeping}) for keeping in blockers if keeping),
    }


def window_start_for(created: datetime) -> datetime:
    """``LOOKBACK`` before ``created``, to the day (Pods created the same day share one reading)."""
    return (created - LOOKBACK).replace(hour=0, minute=0, second=0, microsecond=0)


def estimate_from(wait: Mapping[str, Any], as_of: datetime) -> dict[str, Any]:
    """``{"estimate": …}`` when the holders' history dates the devices' release as of ``as_of``, else
    ``{"no_estimate": "<why>"}``: from ``wait_basis``'s document, nothing else read.

    A holder is expected to let go at its start plus its kin's median, or their p75 once it has outlived
    the median; past the p75 it has no expected end. A device is free once every claim keeping it let go.
    """
    holders = []
    for h in wait["holders"]:
        since = parse_time(h["since"]) or as_of
        held = max(0.0, (as_of - since).total_seconds())
        end = None
        if h["median_seconds"] is not None:
            typical = h["median_seconds"] if held < h["median_seconds"] else h["p75_seconds"]
            if held < typical:
                end = since + timedelta(seconds=typical)
        holders.append({**h, "held_seconds": round(held), "likely_free": rfc3339(end), "_end": end})
    holders.sort(key=lambda h: (h["_end"] is None, h["_end"] or as_of, h["uid"]))
    lacking = wait["lacking"]
    ends = {h["uid"]: h["_end"] for h in holders}
    # A device is free once every claim keeping it let go; the lacking-th freed dates the estimate.
    released = sorted(
        max(ends[uid] for uid in keeping)
        for keeping in wait["devices"]
        if all(ends.get(uid) is not None for uid in keeping)
    )
    at: datetime | None = released[lacking - 1] if len(released) >= lacking else None
    longest = max((h["held_seconds"] for h in holders), default=0)
    noun = "holder has" if len(holders) == 1 else f"{len(holders)} holders have"
    theirs = "their devices up to" if len(holders) > 1 else "its devices"
    held_sentence = f"as of {_clock(as_of)} the {noun} held {theirs} {duration(longest)}"
    if at is None:
        return {"no_estimate": f"{held_sentence}; no estimate: {_why_not(holders)}"}
    bases = _bases(holders, wait["window_start"])
    wait_seconds = max(0.0, (at - as_of).total_seconds())
    which = "the first is" if lacking == 1 else f"the {lacking} it lacks are"
    summary = (
        f"{held_sentence}; {bases}; {which} likely free in ~{duration(wait_seconds)} "
        f"(about {_clock(at)}) on {wait['node']}"
    )
    return {
        "estimate": {
            "at": rfc3339(at),
            "basis": bases,
            "summary": summary,
            "in_seconds": round(wait_seconds),
            "node": wait["node"],
            "lacking": lacking,
            "holders": [{k: v for k, v in h.items() if k not in ("_end", "looked")} for h in holders],
        }
    }


def _bases(holders: Sequence[Mapping[str, Any]], window_start: str) -> str:
    seen: dict[tuple[str, str], Mapping[str, Any]] = {}
    for h in holders:
        if h["basis"] is not None:
            seen.setdefault((h["level"], h["kin"]), h)
    return "; ".join(
        f"{h['basis']} usually held them {duration(h['median_seconds'])} "
        f"(median of {h['spans']} finished since {window_start[:10]}, p75 {duration(h['p75_seconds'])})"
        for h in seen.values()
    )


def _why_not(holders: Sequence[Mapping[str, Any]]) -> str:
    thin = [h for h in holders if h["basis"] is None]
    if thin:
        h = thin[0]
        return f"too little history for {h['claim']} (finished holds: {h['looked']}; at least {MIN_SPANS} are needed)"
    h = next(h for h in holders if h["_end"] is None)  # else enough devices would be released
    return (
        f"{h['claim']} has held its devices {duration(h['held_seconds'])}, longer than 3 in 4 of "
        f"{h['basis']} (p75 {duration(h['p75_seconds'])} of {h['spans']})"
    )


def _clock(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")
