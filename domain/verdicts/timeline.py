"""A Pod incarnation's timeline: transitions of the Pod, its claims and their events, oldest first.

Every entry says which timestamp it used: the objects' own (creationTimestamp,
allocationTimestamp, condition lastTransitionTime, event first/last times,
container startedAt) where the API records one, the snapshot that first saw it
otherwise (a waiting reason, a reservation, a deletion).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from domain.boundaries.binding import PENDING_EVENT as BINDING_PENDING_EVENT
from domain.boundaries.judgement import (
    ClaimLifecycle,
    container_statuses,
    event_count,
    event_first,
    event_last,
    quote,
    related_events,
    time_key,
)
from domain.boundaries.lifecycle import reserved_for
from domain.boundaries.preparation import device_conditions
from domain.cluster.state import HistoryView, Object, Version, meta, ns_name, status_of, uid_of
from domain.cluster.timefmt import rfc3339
from domain.inventory.devices import Inventory, NodeInfo, allocated_devices, allocation, is_allocated


def _entry(
    at: str | datetime | None, boundary: str | None, what: str, source: str, claim: str | None = None
) -> dict[str, Any] | None:
    when = rfc3339(at) if isinstance(at, datetime) else (str(at) if at else None)
    if when is None:
        return None
    return {"at": when, "boundary": boundary, "claim": claim, "what": what, "source": source}


_CONDITION_BOUNDARY = {
    "DisruptionTarget": "inventory",  # e.g. the device taint eviction controller deleting the Pod
    "PodScheduled": "allocation",
    "PodReadyToStartContainers": "preparation",
    "ContainersReady": "runtime",
    "Ready": "runtime",
}
_EVENT_BOUNDARY = {
    "DeviceTaintManagerEviction": "inventory",
    "FailedScheduling": "allocation",
    "Scheduled": "allocation",
    BINDING_PENDING_EVENT: "allocation",
    "FailedPrepareDynamicResources": "preparation",
    "FailedPrepareResources": "preparation",
    "Failed": "runtime",
    "Started": "runtime",
    "Created": "runtime",
    "BackOff": "runtime",
}


def _pod_entries(versions: list[Version]) -> list[dict[str, Any] | None]:
    out: list[dict[str, Any] | None] = []
    seen: set[tuple[Any, ...]] = set()
    created_done = False
    for version in versions:
        pod = version.obj
        if pod is None:
            out.append(_entry(version.at, None, "Pod deleted", "snapshot"))
            continue
        if not created_done:
            out.append(
                _entry(meta(pod).get("creationTimestamp"), None, "Pod created", "Pod.metadata.creationTimestamp")
            )
            created_done = True
        for cond in status_of(pod).get("conditions") or ():
            ctype = cond.get("type")
            if ctype not in _CONDITION_BOUNDARY:
                continue
            key = ("cond", ctype, cond.get("status"), cond.get("lastTransitionTime"))
            if key in seen:
                continue
            seen.add(key)
            text = f"{ctype}={cond.get('status')}" + (f" ({cond['reason']})" if cond.get("reason") else "")
            if cond.get("message"):
                text += f": {quote(cond['message'])}"
            out.append(
                _entry(
                    cond.get("lastTransitionTime"),
                    _CONDITION_BOUNDARY[ctype],
                    text,
                    f"Pod.status.conditions[{ctype}].lastTransitionTime",
                )
            )
        for cs in container_statuses(pod):
            out += _container_entries(cs, version.at, seen)
        if meta(pod).get("deletionTimestamp") and ("del",) not in seen:
            seen.add(("del",))
            out.append(
                _entry(meta(pod)["deletionTimestamp"], None, "Pod deletion requested", "Pod.metadata.deletionTimestamp")
            )
    return out


def _container_entries(cs: Mapping[str, Any], at: datetime, seen: set[tuple[Any, ...]]) -> list[dict[str, Any] | None]:
    name = cs.get("name")
    out: list[dict[str, Any] | None] = []
    for state in (cs.get("lastState") or {}, cs.get("state") or {}):
        running = state.get("running") or {}
        if running.get("startedAt") and ("run", name, running["startedAt"]) not in seen:
            seen.add(("run", name, running["startedAt"]))
            out.append(
                _entry(
                    running["startedAt"],
                    "runtime",
                    f"container {name} started",
                    f"Pod.status.containerStatuses[{name}].state.running.startedAt",
                )
            )
        term = state.get("terminated") or {}
        if term.get("finishedAt") and ("term", name, term["finishedAt"]) not in seen:
            seen.add(("term", name, term["finishedAt"]))
            if term.get("startedAt") and ("run", name, term["startedAt"]) not in seen:
                seen.add(("run", name, term["startedAt"]))
                out.append(
                    _entry(
                        term["startedAt"],
                        "runtime",
                        f"container {name} started",
                        f"Pod.status.containerStatuses[{name}].state.terminated.startedAt",
                    )
                )
            out.append(
                _entry(
                    term["finishedAt"],
                    "runtime",
                    f"container {name} terminated ({term.get('reason')}, exit {term.get('exitCode')})",
                    f"Pod.status.containerStatuses[{name}].state.terminated.finishedAt",
                )
            )
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") and ("wait", name, waiting["reason"], waiting.get("message")) not in seen:
        seen.add(("wait", name, waiting["reason"], waiting.get("message")))
        detail = f": {quote(waiting['message'])}" if waiting.get("message") else ""
        # The API records no time for a waiting reason: the snapshot that first saw it is the best we have.
        out.append(_entry(at, "runtime", f"container {name} waiting ({waiting['reason']}){detail}", "snapshot"))
    return out


def _claim_entries(versions: list[Version], nodes: Sequence[NodeInfo]) -> list[dict[str, Any] | None]:
    out: list[dict[str, Any] | None] = []
    was_allocated = False
    reserved_before: tuple[str, ...] = ()
    seen: set[tuple[Any, ...]] = set()
    known = next((v.obj for v in versions if v.obj is not None), None)
    claim_uid, claim_name = (uid_of(known), ns_name(known)[1]) if known else (None, "")
    for i, version in enumerate(versions):
        claim = version.obj
        if claim is None:
            out.append(_entry(version.at, None, f"claim {claim_name} deleted", "snapshot", claim_uid))
            was_allocated = False
            continue
        uid, name = uid_of(claim), ns_name(claim)[1]
        if i == 0 or versions[i - 1].obj is None:
            out.append(
                _entry(
                    meta(claim).get("creationTimestamp"),
                    "allocation",
                    f"claim {name} created",
                    "ResourceClaim.metadata.creationTimestamp",
                    uid,
                )
            )
        if is_allocated(claim) and not was_allocated:
            devices = allocated_devices(claim, nodes)
            node = devices[0].node if devices else None
            what = f"claim {name} allocated " + ", ".join(f"{d.pool}/{d.device}" for d in devices)
            what += f" on {node}" if node else ""
            stamp = (allocation(claim) or {}).get("allocationTimestamp")
            if stamp:
                out.append(
                    _entry(stamp, "allocation", what, "ResourceClaim.status.allocation.allocationTimestamp", uid)
                )
            else:
                out.append(_entry(version.at, "allocation", what, "snapshot", uid))
        elif was_allocated and not is_allocated(claim):
            out.append(_entry(version.at, "allocation", f"claim {name} deallocated", "snapshot", uid))
        was_allocated = is_allocated(claim)
        reserved = tuple(str(c.get("name")) for c in reserved_for(claim))
        if reserved != reserved_before:
            what = f"claim {name} reserved for {', '.join(reserved)}" if reserved else f"claim {name} unreserved"
            if i == 0:
                what += " (when first seen)"  # the API keeps no reservation time
            out.append(_entry(version.at, "allocation", what, "snapshot", uid))
            reserved_before = reserved
        for cond in device_conditions(claim)[0]:
            key = (cond.get("device"), cond.get("type"), cond.get("status"), cond.get("lastTransitionTime"))
            if key in seen:
                continue
            seen.add(key)
            out.append(
                _entry(
                    cond.get("lastTransitionTime"),
                    "allocation" if cond.get("binding") else "preparation",
                    f"device {cond.get('pool')}/{cond.get('device')} {cond.get('type')}={cond.get('status')}"
                    + (f" ({cond.get('reason')})" if cond.get("reason") else ""),
                    "ResourceClaim.status.devices[].conditions[].lastTransitionTime",
                    uid,
                )
            )
        if meta(claim).get("deletionTimestamp") and ("del",) not in seen:
            seen.add(("del",))
            out.append(
                _entry(
                    meta(claim)["deletionTimestamp"],
                    None,
                    f"claim {name} deletion requested",
                    "ResourceClaim.metadata.deletionTimestamp",
                    uid,
                )
            )
    return out


def _event_entries(ev: Object) -> list[dict[str, Any] | None]:
    reason = str(ev.get("reason") or "")
    boundary = _EVENT_BOUNDARY.get(reason)
    text = f"{reason}: {quote(ev.get('message'))}"
    count = event_count(ev)
    involved = ev.get("involvedObject") or {}
    claim = involved.get("uid") if involved.get("kind") == "ResourceClaim" else None
    first_source = "Event.firstTimestamp" if ev.get("firstTimestamp") else "Event.eventTime"
    out = [_entry(event_first(ev), boundary, text, first_source, claim)]
    if count > 1 and event_last(ev) != event_first(ev):
        out.append(
            _entry(event_last(ev), boundary, f"{reason} again (seen {count} times)", "Event.lastTimestamp", claim)
        )
    return out


def timeline(
    history: HistoryView,
    pod: Object,
    lifecycles: Sequence[ClaimLifecycle],
    events: Sequence[Object] | None = None,
    nodes: Sequence[NodeInfo] | None = None,
) -> list[dict[str, Any]]:
    """Transitions of the Pod incarnation, its claims and their events, oldest first."""
    if nodes is None:
        nodes = Inventory.of(history.state).nodes
    # Claims first, then the Pod, then events: within one second and one boundary that is
    # the causal order (allocated, then PodScheduled, then the Scheduled event).
    entries: list[dict[str, Any] | None] = []
    for lc in lifecycles:
        if lc.uid:
            versions = history.versions("ResourceClaim", lc.uid)
            if not versions and lc.pod_claim.claim is not None:
                versions = [Version(history.as_of, lc.pod_claim.claim)]
            entries += _claim_entries(versions, nodes)
    entries += _pod_entries(history.versions("Pod", uid_of(pod)) or [Version(history.as_of, pod)])
    claim_uids = [lc.uid for lc in lifecycles if lc.uid]
    for ev in events if events is not None else related_events(history, pod, claim_uids):
        entries += _event_entries(ev)
    unique: dict[tuple[str, str, str], dict[str, Any]] = {}
    for e in entries:
        if e is not None:
            unique.setdefault((e["at"], e["what"], e["source"]), e)
    ordered = list(unique.values())
    position = {id(e): i for i, e in enumerate(ordered)}
    return sorted(ordered, key=lambda e: (time_key(e["at"]), _BOUNDARY_RANK.get(e["boundary"], 0), position[id(e)]))


_BOUNDARY_RANK = {None: 0, "inventory": 1, "allocation": 2, "preparation": 3, "runtime": 4}
