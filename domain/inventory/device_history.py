"""One device's history: which claims held it, when, and the preparation failures around it.

Repeated preparation failures of different claims on the same device point at
the hardware (or its driver state) rather than at any one workload.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from domain.cluster.claim_summaries import consumers
from domain.cluster.state import HistoryView, Object, Version, meta, ns_name, uid_of
from domain.cluster.timefmt import rfc3339
from domain.inventory.devices import DeviceId, allocated_devices, allocation_time

PREPARE_FAILURES = ("FailedPrepareDynamicResources", "FailedPrepareResources")
# Failures of this many distinct claims on one device make it suspect.
SUSPECT_AFTER_CLAIMS = 2


@dataclass
class _Holding:
    uid: str
    namespace: str
    name: str
    since: datetime
    until: datetime | None
    consumers: set[str]


def _consumer_uids(claim: Object) -> set[str]:
    return {str(c["uid"]) for c in consumers(claim) if c.get("uid")}


@dataclass
class DeviceIndex:
    """Every device's holdings and every Pod's preparation failures, from one pass over history.

    A device page asks about one device, but which claims held it is written only in the
    claims: one pass over every claim version finds it for all devices, so a snapshot's
    device pages share it rather than each reading the cluster's claims and events again.
    """

    holdings: dict[DeviceId, list[_Holding]]
    failures: dict[str, list[Object]]  # FailedPrepare* events (their last content) by Pod UID

    @classmethod
    def of(cls, history: HistoryView) -> DeviceIndex:
        return cls(
            holdings(history.all_versions("ResourceClaim").items()),
            preparation_failures(history.all_versions("Event").values()),
        )


def devices_named(claim: Object) -> set[DeviceId]:
    """The devices a claim version's allocation names, adminAccess results included: the device's
    page lists an admin's access next to the holders (a reader may ask who touched it)."""
    return {d.id for d in allocated_devices(claim)}


def holdings(claims: Iterable[tuple[str, Sequence[Version]]]) -> dict[DeviceId, list[_Holding]]:
    """Every stretch a claim held a device, from its allocation time until released or gone.

    ``claims``: (UID, versions) in UID order, every claim of the history or only those that may
    have named the asked device (the derived layer's lookup); a claim that never named a device
    adds nothing to its stretches, so both give the same answer for it.
    """
    out: dict[DeviceId, list[_Holding]] = {}
    for uid, versions in claims:
        current: dict[DeviceId, _Holding] = {}
        for version in versions:
            obj = version.obj
            held = devices_named(obj) if obj is not None else set()
            for device in [d for d in current if d not in held]:
                ended = current.pop(device)
                ended.until = version.at
                out.setdefault(device, []).append(ended)
            if obj is None or not held:
                continue
            namespace, name = ns_name(obj)
            who = _consumer_uids(obj)
            for device in held:
                holding = current.get(device)
                if holding is None:
                    since = allocation_time(obj) or version.at
                    holding = current[device] = _Holding(uid, namespace, name, since, None, set())
                holding.consumers |= who
        for device, holding in current.items():
            out.setdefault(device, []).append(holding)
    for stretches in out.values():
        stretches.sort(key=lambda h: h.since)
    return out


def failing_pod(event: Object) -> str | None:
    """The UID of the Pod a FailedPrepare* event is about; None for any other event."""
    involved = event.get("involvedObject") or {}
    if involved.get("uid") and event.get("reason") in PREPARE_FAILURES:
        return str(involved["uid"])
    return None


def preparation_failures(events: Iterable[Sequence[Version]]) -> dict[str, list[Object]]:
    """FailedPrepare* events by Pod UID, each as its last stored content says (a count that grew
    is read at its newest). ``events``: each Event's versions, every Event of the history or only
    those that were ever about the Pods asked (an Event about no asked Pod adds nothing for them)."""
    out: dict[str, list[Object]] = {}
    for versions in events:
        last = next((v.obj for v in reversed(versions) if v.obj is not None), None)
        pod = failing_pod(last) if last is not None else None
        if last is not None and pod is not None:
            out.setdefault(pod, []).append(last)
    return out


def consumers_of(index: DeviceIndex, device: DeviceId) -> set[str]:
    """The UIDs of the Pods that consumed a claim while it held ``device``: whose failures count."""
    return {pod for holding in index.holdings.get(device, ()) for pod in holding.consumers}


def device_history(history: HistoryView, device: DeviceId, index: DeviceIndex | None = None) -> dict[str, Any]:
    """``index``: the snapshot's ``DeviceIndex`` when the caller keeps one (built here otherwise)."""
    index = index or DeviceIndex.of(history)
    held = index.holdings.get(device, [])
    by_pod = {pod: h for h in held for pod in h.consumers}
    failures = []
    about = [event for pod in by_pod for event in index.failures.get(pod, ())]
    for event in sorted(about, key=uid_of):  # in the events' order, as they are stored
        holding = by_pod[str((event.get("involvedObject") or {}).get("uid"))]
        failures.append(
            {
                "namespace": holding.namespace,
                "claim": holding.name,
                "claim_uid": holding.uid,
                "pod": (event.get("involvedObject") or {}).get("name"),
                "count": int(event.get("count") or 1),
                "first": event.get("firstTimestamp") or meta(event).get("creationTimestamp"),
                "last": event.get("lastTimestamp") or event.get("eventTime"),
                "message": str(event.get("message") or ""),
            }
        )
    failing_claims = {f["claim_uid"] for f in failures}
    driver, pool, name = device
    return {
        "as_of": rfc3339(history.as_of),
        "device": {"driver": driver, "pool": pool, "device": name},
        "claims": [
            {
                "uid": h.uid,
                "namespace": h.namespace,
                "name": h.name,
                "since": rfc3339(h.since),
                "until": rfc3339(h.until),
            }
            for h in held
        ],
        "preparation_failures": failures,
        "suspect": len(failing_claims) >= SUSPECT_AFTER_CLAIMS,
    }
