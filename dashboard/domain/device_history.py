"""One device's history: which claims held it, when, and the preparation failures around it.

Repeated preparation failures of different claims on the same device point at
the hardware (or its driver state) rather than at any one workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dashboard.domain.claims import consumers
from dashboard.domain.inventory import DeviceId, allocated_devices
from dashboard.domain.leaks import allocation_time
from dashboard.domain.state import HistoryView, Object, meta, ns_name
from dashboard.domain.timefmt import rfc3339

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


def _holds(claim: Object, device: DeviceId) -> bool:
    return any(d.id == device for d in allocated_devices(claim))


def _consumer_uids(claim: Object) -> set[str]:
    return {str(c["uid"]) for c in consumers(claim) if c.get("uid")}


def holdings(history: HistoryView, device: DeviceId) -> list[_Holding]:
    """Every stretch a claim held ``device``, from its allocation time until released or gone."""
    out: list[_Holding] = []
    for uid, versions in history.all_versions("ResourceClaim").items():
        current: _Holding | None = None
        for version in versions:
            obj = version.obj
            if obj is not None and _holds(obj, device):
                if current is None:
                    namespace, name = ns_name(obj)
                    current = _Holding(uid, namespace, name, allocation_time(obj) or version.at, None, set())
                current.consumers |= _consumer_uids(obj)
            elif current is not None:
                current.until = version.at
                out.append(current)
                current = None
        if current is not None:
            out.append(current)
    return sorted(out, key=lambda h: h.since)


def _events_about(history: HistoryView, uids: set[str]) -> list[Object]:
    events = []
    for versions in history.all_versions("Event").values():
        last = next((v.obj for v in reversed(versions) if v.obj is not None), None)
        involved = (last or {}).get("involvedObject") or {}
        if last is not None and involved.get("uid") in uids and last.get("reason") in PREPARE_FAILURES:
            events.append(last)
    return events


def device_history(history: HistoryView, device: DeviceId) -> dict[str, Any]:
    held = holdings(history, device)
    by_pod = {pod: h for h in held for pod in h.consumers}
    failures = []
    for event in _events_about(history, set(by_pod)):
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
