"""A Pod's claims across the four boundaries, and the timeline that led there.

Each boundary is judged on its own evidence: an allocated claim says nothing
about preparation, a running container nothing about which GPU it sees. Times
come from the objects' own timestamps; a snapshot time is used only where the
API records none (a waiting reason, a deletion), and every timeline entry says
which one it used.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dashboard.domain import extended_resources as ext
from dashboard.domain.binding import PENDING_EVENT as BINDING_PENDING_EVENT
from dashboard.domain.binding import binding_condition_types, binding_wait
from dashboard.domain.inventory import (
    AllocatedDevice,
    Inventory,
    allocated_devices,
    allocation,
    allocation_node,
    is_allocated,
)
from dashboard.domain.matching import (
    SelectorCache,
    Simulation,
    claim_requests,
    class_drivers,
    describe_device,
    find_class,
    missing_inventory,
    selector_cache,
    simulate,
)
from dashboard.domain.pod_claims import PodClaim, resolve_pod_claims
from dashboard.domain.state import HistoryView, Object, meta, ns_name, uid_of
from dashboard.domain.state import spec_of as _spec
from dashboard.domain.state import status_of as _status
from dashboard.domain.timefmt import parse_time, rfc3339

BOUNDARIES = ("inventory", "allocation", "preparation", "runtime")
OK, PENDING, FAILED, UNKNOWN = "ok", "pending", "failed", "unknown"

TERMINAL_PHASES = ("Succeeded", "Failed")
PREPARE_FAILURE_REASONS = ("FailedPrepareDynamicResources", "FailedPrepareResources")
RUNTIME_ERROR_REASONS = ("CreateContainerError", "RunContainerError", "StartError", "ContainerCannotRun")
# Kubelet/containerd messages about device injection mention one of these.
_DEVICE_WORDS = re.compile(r"\bcdi\b|device|nvidia|gpu|resourceclaim|claim=", re.IGNORECASE)
_MAX_DEVICE_EVIDENCE = 64
_MAX_QUOTE = 400


@dataclass
class Boundary:
    state: str
    since: str | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None  # a DESIGN.md reason code when the boundary blocks
    message: str | None = None  # one sentence naming the evidence

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "since": self.since, "evidence": self.evidence}
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        return out


@dataclass
class ClaimLifecycle:
    pod_claim: PodClaim
    boundaries: dict[str, Boundary]
    devices: list[AllocatedDevice] = field(default_factory=list)
    node: str | None = None

    @property
    def uid(self) -> str | None:
        return self.pod_claim.uid

    @property
    def name(self) -> str:
        return self.pod_claim.claim_name or self.pod_claim.pod_claim_name

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "name": self.name,
            "pod_claim": self.pod_claim.pod_claim_name,
            "node": self.node,
            "devices": [
                {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device} for d in self.devices
            ],
            "boundaries": {name: self.boundaries[name].to_dict() for name in BOUNDARIES},
        }


# --- small readers ---------------------------------------------------------------------------------


def pod_condition(pod: Object, type_: str) -> dict[str, Any] | None:
    for cond in _status(pod).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


def _condition_evidence(cond: Mapping[str, Any]) -> dict[str, Any]:
    out = {"kind": "Condition", "type": cond.get("type"), "status": cond.get("status")}
    for key in ("reason", "message", "lastTransitionTime"):
        if cond.get(key):
            out[key] = cond[key]
    return out


def event_first(ev: Object) -> str | None:
    return ev.get("firstTimestamp") or ev.get("eventTime") or meta(ev).get("creationTimestamp")


def _series(ev: Object) -> dict[str, Any]:
    series = ev.get("series")
    return series if isinstance(series, dict) else {}


def event_last(ev: Object) -> str | None:
    series = _series(ev)
    return ev.get("lastTimestamp") or series.get("lastObservedTime") or event_first(ev)


def event_count(ev: Object) -> int:
    series = _series(ev)
    try:
        return int(ev.get("count") or series.get("count") or 1)
    except (TypeError, ValueError):
        return 1


def _event_evidence(ev: Object) -> dict[str, Any]:
    return {
        "kind": "Event",
        "reason": ev.get("reason"),
        "message": ev.get("message"),
        "count": event_count(ev),
        "first": event_first(ev),
        "last": event_last(ev),
    }


def _later(a: str | None, b: str | None) -> bool:
    """Whether time ``a`` is strictly after ``b`` (unknown times never are)."""
    ta, tb = parse_time(a), parse_time(b)
    return ta is not None and tb is not None and ta > tb


def _earliest(times: Iterable[str | None]) -> str | None:
    parsed = [(parse_time(t), t) for t in times if t]
    valid = [(p, t) for p, t in parsed if p is not None]
    return min(valid)[1] if valid else None


_NEVER = datetime(1970, 1, 1, tzinfo=UTC)


def time_key(value: str | None) -> datetime:
    """For sorting: unknown times first."""
    return parse_time(value) or _NEVER


def quote(text: str | None) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= _MAX_QUOTE else text[: _MAX_QUOTE - 1] + "…"


def _short_time(value: str | None) -> str:
    return value or "an unknown time"


def is_terminal(pod: Object) -> bool:
    return _status(pod).get("phase") in TERMINAL_PHASES


# --- events ----------------------------------------------------------------------------------------


@dataclass
class _EventIndex:
    """Every event's newest stored content, by the UID (or Pod name) it is about."""

    by_uid: dict[str, list[tuple[datetime, Object]]] = field(default_factory=dict)
    by_pod_name: dict[tuple[str, str], list[tuple[datetime, Object]]] = field(default_factory=dict)


# One index per history object: a report over thousands of Pods would otherwise reload every
# event once per Pod. Histories are immutable views as of one time, so the index stays valid.
_EVENT_INDEXES: weakref.WeakKeyDictionary[Any, _EventIndex] = weakref.WeakKeyDictionary()


def _event_index(history: HistoryView) -> _EventIndex:
    index = _EVENT_INDEXES.get(history)
    if index is not None:
        return index
    index = _EventIndex()
    for versions in history.all_versions("Event").values():
        latest = next((v for v in reversed(versions) if v.obj is not None), None)
        if latest is None or latest.obj is None:
            continue
        # When the event was last valid: a deletion after it, or still live.
        last_seen = versions[-1].at if versions[-1].obj is None else history.as_of
        event = latest.obj
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if not isinstance(involved, dict):
            continue
        if involved.get("uid"):
            index.by_uid.setdefault(str(involved["uid"]), []).append((last_seen, event))
        elif involved.get("kind") == "Pod":
            key = (str(involved.get("namespace") or ""), str(involved.get("name") or ""))
            index.by_pod_name.setdefault(key, []).append((last_seen, event))
    with contextlib.suppress(TypeError):  # a history that cannot be weakly referenced is not cached
        _EVENT_INDEXES[history] = index
    return index


def related_events(history: HistoryView, pod: Object, claim_uids: Iterable[str] = ()) -> list[Object]:
    """Events about the Pod incarnation (by UID) or its claims, including ones the cluster expired.

    The last stored content of each event counts, so a count that grew is read at its newest.
    """
    index = _event_index(history)
    since = parse_time(meta(pod).get("creationTimestamp"))
    candidates = [entry for uid in {uid_of(pod), *claim_uids} for entry in index.by_uid.get(uid, ())]
    candidates += index.by_pod_name.get(ns_name(pod), [])
    out = [event for last_seen, event in candidates if since is None or last_seen >= since]
    return sorted(out, key=lambda e: (time_key(event_first(e)), str(e.get("reason"))))


# --- the four boundaries ---------------------------------------------------------------------------


@dataclass
class PodContext:
    """Everything the boundaries of one Pod incarnation read, gathered once."""

    history: HistoryView
    pod: Object
    inventory: Inventory
    events: list[Object]
    gone_at: datetime | None = None
    observed_uuids: Mapping[str, str] | None = None
    cache: SelectorCache = field(default_factory=SelectorCache)
    claims: list[ClaimLifecycle] = field(default_factory=list)

    @property
    def node_name(self) -> str | None:
        name = _spec(self.pod).get("nodeName")
        return str(name) if name else None

    @property
    def phase(self) -> str:
        return str(_status(self.pod).get("phase") or "")

    @property
    def settled(self) -> bool:
        """Finished: no scheduler or kubelet will act on it again, so waiting means nothing."""
        return is_terminal(self.pod)

    def events_with(self, reasons: Sequence[str]) -> list[Object]:
        return [e for e in self.events if e.get("reason") in reasons]


@dataclass
class PodLifecycle:
    """A Pod incarnation's claims with their boundaries, and the events they were judged on."""

    claims: list[ClaimLifecycle]
    events: list[Object]


def pod_lifecycle(
    history: HistoryView,
    pod: Object,
    gone_at: datetime | None = None,
    observed_uuids: Mapping[str, str] | None = None,
    inventory: Inventory | None = None,
) -> PodLifecycle:
    """The four boundaries of every claim the Pod uses, as of ``history.as_of``."""
    # A finished or deleted Pod's generated claims are deleted and deallocated after it:
    # judge them as they last were while they served it.
    use_history = gone_at is not None or is_terminal(pod)
    pod_claims = resolve_pod_claims(history, pod, use_history=use_history)
    if use_history:
        for pc in pod_claims:
            pc.claim = _allocated_version(history, pc.claim)
    inventory = inventory or Inventory.of(history.state)
    ctx = PodContext(
        history=history,
        pod=pod,
        inventory=inventory,
        events=related_events(history, pod, [pc.uid for pc in pod_claims if pc.uid]),
        gone_at=gone_at,
        observed_uuids=observed_uuids,
        cache=selector_cache(inventory),
    )
    lifecycles = [_start(ctx, pc) for pc in pod_claims]
    ctx.claims = lifecycles
    _judge_unallocated(ctx, lifecycles)
    for lc in lifecycles:
        if lc.pod_claim.extended is not None and lc.pod_claim.extended.planned:
            _explain_planned(lc)
    for lc in lifecycles:
        if lc.pod_claim.claim is not None and is_allocated(lc.pod_claim.claim):
            lc.boundaries["preparation"] = preparation_boundary(ctx, lc)
            lc.boundaries["runtime"] = runtime_boundary(ctx, lc)
    return PodLifecycle(lifecycles, ctx.events)


def claim_lifecycles(
    history: HistoryView,
    pod: Object,
    gone_at: datetime | None = None,
    observed_uuids: Mapping[str, str] | None = None,
    inventory: Inventory | None = None,
) -> list[ClaimLifecycle]:
    """The four boundaries of every claim the Pod uses, as of ``history.as_of``."""
    return pod_lifecycle(history, pod, gone_at, observed_uuids, inventory).claims


def _allocated_version(history: HistoryView, claim: Object | None) -> Object | None:
    """For a finished Pod, its claim as last allocated (deallocation after the end is normal)."""
    if claim is None or is_allocated(claim):
        return claim
    for version in reversed(history.versions("ResourceClaim", uid_of(claim))):
        if version.obj is not None and is_allocated(version.obj):
            return version.obj
    return claim


def _missing(ctx: PodContext, pc: PodClaim) -> ClaimLifecycle:
    evidence = [_pod_claim_evidence(ctx.pod, pc)]
    if ctx.settled or _containers_started(ctx.pod):
        # Its containers ran, so the claim existed once; history just never saw it.
        allocation_boundary = Boundary(
            UNKNOWN, evidence=evidence, message=f"claim {pc.claim_name or pc.pod_claim_name} was never observed"
        )
    else:
        allocation_boundary = Boundary(
            FAILED,
            since=meta(ctx.pod).get("creationTimestamp"),
            evidence=evidence,
            reason=pc.problem,
            message=pc.problem_message,
        )
    boundaries = {
        "inventory": Boundary(UNKNOWN),
        "allocation": allocation_boundary,
        "preparation": Boundary(UNKNOWN),
        "runtime": Boundary(UNKNOWN),
    }
    return ClaimLifecycle(pc, boundaries)


def _start(ctx: PodContext, pc: PodClaim) -> ClaimLifecycle:
    if pc.claim is None:
        return _missing(ctx, pc)
    devices = allocated_devices(pc.claim, ctx.inventory.nodes)
    lc = ClaimLifecycle(
        pc,
        {
            "inventory": Boundary(UNKNOWN),
            "allocation": Boundary(PENDING),
            "preparation": Boundary(PENDING),
            "runtime": Boundary(PENDING),
        },
        devices=devices,
        node=allocation_node(pc.claim, ctx.inventory.nodes) if devices else None,
    )
    if devices:
        lc.boundaries["inventory"] = _inventory_of_allocated(ctx, lc)
        lc.boundaries["allocation"] = _allocation_of_allocated(ctx, lc)
    return lc


def _pod_claim_evidence(pod: Object, pc: PodClaim) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "PodClaim", "name": pc.pod_claim_name}
    if pc.template_name:
        out["resourceClaimTemplateName"] = pc.template_name
    if pc.claim_name:
        out["resourceClaimName"] = pc.claim_name
    return out


def _allocation_evidence(ctx: PodContext, lc: ClaimLifecycle) -> list[dict[str, Any]]:
    out = []
    for d in lc.devices:
        entry = d.as_evidence()
        advertised = ctx.inventory.by_id.get(d.id)
        if advertised is not None and advertised.uuid:
            entry["uuid"] = advertised.uuid
        out.append(entry)
    return out


def _inventory_of_allocated(ctx: PodContext, lc: ClaimLifecycle) -> Boundary:
    # The scheduler only allocates advertised devices, so the allocation itself proves the
    # inventory held; whether the devices are still advertised now is shown, not judged.
    evidence = []
    created = []
    for d in lc.devices:
        advertised = ctx.inventory.by_id.get(d.id)
        if advertised is None:
            evidence.append(
                {"kind": "Device", "driver": d.driver, "pool": d.pool, "device": d.device, "advertised": False}
            )
        else:
            evidence.append({**describe_device(advertised), "advertised": True})
            created.append(advertised.slice_created)
    return Boundary(OK, since=_earliest(created), evidence=evidence)


def reserved_for(claim: Object) -> list[dict[str, Any]]:
    return [c for c in _status(claim).get("reservedFor") or () if isinstance(c, dict)]


def _allocated_since(ctx: PodContext, claim: Object) -> str | None:
    stamp = (allocation(claim) or {}).get("allocationTimestamp")
    if stamp:
        return str(stamp)
    # No timestamp in the object: the first snapshot of the current allocation is the best we have.
    start = None
    for version in ctx.history.versions("ResourceClaim", uid_of(claim)):
        allocated = version.obj is not None and is_allocated(version.obj)
        if allocated and start is None:
            start = version.at
        elif not allocated:
            start = None
    return rfc3339(start)


def _allocation_of_allocated(ctx: PodContext, lc: ClaimLifecycle) -> Boundary:
    claim = lc.pod_claim.claim
    assert claim is not None
    reserved = reserved_for(claim)
    evidence = _allocation_evidence(ctx, lc)
    if reserved:
        evidence.append(
            {
                "kind": "ReservedFor",
                "consumers": [
                    {"resource": c.get("resource"), "name": c.get("name"), "uid": c.get("uid")} for c in reserved
                ],
            }
        )
    scheduled = pod_condition(ctx.pod, "PodScheduled")
    if scheduled:
        evidence.append(_condition_evidence(scheduled))
    since = _allocated_since(ctx, claim)
    # Unbound, the Pod may be held in PreBind by its devices' binding conditions (kubelet never saw it).
    wait = None if ctx.node_name or ctx.settled else binding_wait(claim, lc.name, ctx.history.as_of)
    if wait is not None:
        evidence += wait.evidence + [_event_evidence(e) for e in ctx.events_with((BINDING_PENDING_EVENT,))]
        return Boundary(
            wait.state, since=wait.since or since, evidence=evidence, reason=wait.reason, message=wait.message
        )
    pod_uid = uid_of(ctx.pod)
    if any(c.get("uid") == pod_uid for c in reserved) or ctx.node_name or ctx.settled:
        return Boundary(OK, since=since, evidence=evidence)
    where = ", ".join(d.device for d in lc.devices) + (f" on {lc.node}" if lc.node else "")
    said = f": {quote(scheduled.get('message'))}" if scheduled and scheduled.get("message") else ""
    return Boundary(
        PENDING,
        since=since,
        evidence=evidence,
        reason="waiting-for-scheduler",
        message=(
            f"claim {lc.name} is allocated ({where}) but not reserved for this Pod, which is not scheduled yet{said}"
        ),
    )


# -- allocation of claims that have none yet --


def _judge_unallocated(ctx: PodContext, lifecycles: list[ClaimLifecycle]) -> None:
    pending = [lc for lc in lifecycles if lc.pod_claim.claim is not None and not lc.devices]
    if not pending:
        return
    if ctx.settled:
        for lc in pending:
            lc.boundaries["allocation"] = Boundary(
                UNKNOWN, message=f"claim {lc.name} was never seen allocated while the Pod was active"
            )
        return
    to_simulate = []
    for lc in pending:
        claim = lc.pod_claim.claim
        assert claim is not None
        problem = _class_problem(ctx, lc) or _inventory_problem(ctx, lc) or _bypass_problem(ctx, lc)
        if problem is None:
            to_simulate.append(lc)
    if to_simulate:
        _simulate_allocation(ctx, lifecycles, to_simulate)


def _explain_planned(lc: ClaimLifecycle) -> None:
    """No claim exists yet: the verdict names the container requests the simulated claim stands for."""
    extended = lc.pod_claim.extended
    assert extended is not None
    said = ext.asks_phrase(extended.asks)
    for name in ("inventory", "allocation"):
        boundary = lc.boundaries[name]
        boundary.evidence = ext.asks_evidence(extended.asks) + boundary.evidence
        if boundary.message:
            detail = boundary.message.replace(f"claim {lc.name}", "the claim")
            boundary.message = f"{said} is served by a claim the scheduler has not created yet: {detail}"


def _scheduler_evidence(ctx: PodContext) -> list[dict[str, Any]]:
    evidence = []
    cond = pod_condition(ctx.pod, "PodScheduled")
    if cond:
        evidence.append(_condition_evidence(cond))
    evidence += [_event_evidence(e) for e in ctx.events_with(("FailedScheduling",))]
    return evidence


def _unscheduled_since(ctx: PodContext, claim: Object) -> str | None:
    cond = pod_condition(ctx.pod, "PodScheduled")
    if cond and cond.get("status") == "False" and cond.get("lastTransitionTime"):
        return str(cond["lastTransitionTime"])
    return meta(claim).get("creationTimestamp")


def _class_problem(ctx: PodContext, lc: ClaimLifecycle) -> str | None:
    claim = lc.pod_claim.claim
    assert claim is not None
    for request in claim_requests(claim):
        for ask in request.alternatives:
            if find_class(ctx.inventory.state, ask.class_name) is not None:
                continue
            known = sorted(ns_name(c)[1] for c in ctx.inventory.state.of_kind("DeviceClass"))
            listed = f" (classes: {', '.join(known)})" if known else " (the cluster has no DeviceClass)"
            lc.boundaries["allocation"] = Boundary(
                FAILED,
                since=_unscheduled_since(ctx, claim),
                evidence=[{"kind": "DeviceClass", "name": ask.class_name, "exists": False}, *_scheduler_evidence(ctx)],
                reason="device-class-missing",
                message=(
                    f"request {ask.name} of claim {lc.name} names DeviceClass {ask.class_name or '(none)'}, "
                    f"which does not exist{listed}"
                ),
            )
            return "device-class-missing"
    return None


def _inventory_problem(ctx: PodContext, lc: ClaimLifecycle) -> str | None:
    claim = lc.pod_claim.claim
    assert claim is not None
    why = missing_inventory(ctx.inventory, claim)
    if why is None:
        lc.boundaries["inventory"] = _inventory_present(ctx, claim)
        return None
    slices = ctx.inventory.state.of_kind("ResourceSlice")
    lc.boundaries["inventory"] = Boundary(
        FAILED,
        since=meta(claim).get("creationTimestamp"),
        evidence=[
            {
                "kind": "Inventory",
                "slices": len(slices),
                "devices": len(ctx.inventory.devices),
                "drivers": sorted(ctx.inventory.drivers()),
            }
        ],
        reason="no-inventory",
        message=f"{why}, so claim {lc.name} cannot be allocated",
    )
    lc.boundaries["allocation"] = Boundary(PENDING, evidence=_scheduler_evidence(ctx))
    return "no-inventory"


def _inventory_present(ctx: PodContext, claim: Object) -> Boundary:
    drivers: set[str] = set()
    for request in claim_requests(claim):
        for ask in request.alternatives:
            drivers |= class_drivers(find_class(ctx.inventory.state, ask.class_name))
    devices = [d for d in ctx.inventory.devices if not drivers or d.driver in drivers]
    evidence = []
    for driver in sorted({d.driver for d in devices}):
        of_driver = [d for d in devices if d.driver == driver]
        evidence.append(
            {
                "kind": "Inventory",
                "driver": driver,
                "devices": len(of_driver),
                "pools": len({d.pool for d in of_driver}),
            }
        )
    return Boundary(OK, since=_earliest(d.slice_created for d in devices), evidence=evidence)


def _bypass_problem(ctx: PodContext, lc: ClaimLifecycle) -> str | None:
    if not ctx.node_name:
        return None
    claim = lc.pod_claim.claim
    assert claim is not None
    lc.boundaries["allocation"] = Boundary(
        FAILED,
        since=meta(ctx.pod).get("creationTimestamp"),
        evidence=[{"kind": "PodSpec", "nodeName": ctx.node_name}, *_scheduler_evidence(ctx)],
        reason="scheduler-bypassed",
        message=(
            f"the Pod was created with spec.nodeName {ctx.node_name}, so the scheduler never allocated "
            f"claim {lc.name} and kubelet cannot prepare it"
        ),
    )
    return "scheduler-bypassed"


def _pinned_nodes(ctx: PodContext, lifecycles: list[ClaimLifecycle]) -> list[str] | None:
    """Nodes the Pod can still go to: where its allocated claims already are (and DRA serves its extended resources)."""
    nodes: set[str] | None = None
    for lc in lifecycles:
        if lc.devices and lc.node:
            nodes = {lc.node} if nodes is None else nodes & {lc.node}
        extended = lc.pod_claim.extended
        if extended is not None and extended.nodes is not None:
            nodes = set(extended.nodes) if nodes is None else nodes & set(extended.nodes)
    return sorted(nodes) if nodes is not None else None


def _simulate_allocation(ctx: PodContext, lifecycles: list[ClaimLifecycle], pending: list[ClaimLifecycle]) -> None:
    claims = [lc.pod_claim.claim for lc in pending if lc.pod_claim.claim is not None]
    siblings = [lc.uid for lc in lifecycles if lc.uid and lc.devices]
    sim = simulate(
        ctx.inventory, claims, nodes=_pinned_nodes(ctx, lifecycles), cache=ctx.cache, sibling_claims=siblings
    )
    reason = sim.reason
    message = sim.message()
    evidence = _match_evidence(sim)
    scheduler = _scheduler_evidence(ctx)
    for lc in pending:
        claim = lc.pod_claim.claim
        assert claim is not None
        since = _unscheduled_since(ctx, claim)
        if reason is not None:
            lc.boundaries["allocation"] = Boundary(
                FAILED, since=since, evidence=evidence + scheduler, reason=reason, message=message
            )
        else:
            lc.boundaries["allocation"] = Boundary(
                PENDING,
                since=since,
                evidence=evidence + scheduler,
                reason="waiting-for-scheduler",
                message=_waiting_message(ctx, lc, sim),
            )


def _match_evidence(sim: Simulation) -> list[dict[str, Any]]:
    best = sim.best
    summary: list[dict[str, Any]] = []
    if best is not None:
        for on_node in best.asks:
            summary.append(
                {
                    "kind": "DeviceMatch",
                    "request": on_node.ask.name,
                    "class": on_node.ask.class_name,
                    "node": on_node.node,
                    "stage": on_node.stage.name.lower().replace("_", "-"),
                    "needed": on_node.needed,
                    "matching": len(on_node.matching),
                    "held": len(on_node.held),
                    "tainted": len(on_node.tainted),
                    "picked": [d.label for d in on_node.picked],
                }
            )
    outcomes = (o for o in sim.iter_device_outcomes() if o.get("outcome") != "match")
    return summary + list(itertools.islice(outcomes, _MAX_DEVICE_EVIDENCE))


def _waiting_message(ctx: PodContext, lc: ClaimLifecycle, sim: Simulation) -> str:
    fit = sim.fitting_node
    where = ""
    if fit is not None:
        picked = ", ".join(d.label for a in fit.asks for d in a.picked)
        where = f", though its requests fit on {fit.node} ({picked})"
    cond = pod_condition(ctx.pod, "PodScheduled")
    failures = ctx.events_with(("FailedScheduling",))
    if failures:
        ev = failures[-1]
        count = event_count(ev)
        times = f"{count} times since" if count > 1 else "at"
        said = f'; the scheduler reported "{quote(ev.get("message"))}" {times} {_short_time(event_first(ev))}'
    elif cond and cond.get("status") == "False" and cond.get("message"):
        said = f'; the scheduler reported "{quote(cond.get("message"))}"'
    else:
        said = "; the scheduler has not reported on the Pod yet"
    return f"claim {lc.name} is not allocated yet{where}{said}"


# -- preparation --


def _about(text: str, lc: ClaimLifecycle, siblings: Sequence[ClaimLifecycle]) -> bool:
    """Whether a Pod event (events are not per claim) is about this claim.

    An event naming claims (by name or UID) is about those; one naming a driver is
    about the claims with devices of that driver; one naming neither, about all.
    """
    named = [
        o for o in siblings if (o.pod_claim.claim_name and o.pod_claim.claim_name in text) or (o.uid and o.uid in text)
    ]
    if named:
        return any(o is lc for o in named)
    drivers = {d.driver for o in siblings for d in o.devices if d.driver and d.driver in text}
    if drivers:
        return any(d.driver in drivers for d in lc.devices)
    return True


def _for_claim(events: list[Object], lc: ClaimLifecycle, siblings: Sequence[ClaimLifecycle]) -> list[Object]:
    return [e for e in events if _about(str(e.get("message") or ""), lc, siblings)]


def device_conditions(claim: Object) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Conditions drivers report in ``status.devices[]``: (all as evidence, the failing ones).

    Binding conditions are marked ``binding`` and never fail preparation: they gate the allocation boundary.
    """
    evidence, failing = [], []
    binding = binding_condition_types(claim)
    for dev in _status(claim).get("devices") or ():
        if not isinstance(dev, dict):
            continue
        for cond in dev.get("conditions") or ():
            if not isinstance(cond, dict):
                continue
            entry = {
                "kind": "DeviceCondition",
                "driver": dev.get("driver"),
                "pool": dev.get("pool"),
                "device": dev.get("device"),
                **{k: cond.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")},
            }
            evidence.append(entry)
            ctype, status = str(cond.get("type") or ""), cond.get("status")
            if (dev.get("driver"), dev.get("pool"), dev.get("device"), ctype) in binding:
                entry["binding"] = True
                continue
            negative = re.search(r"fail|error|unhealthy", ctype, re.IGNORECASE) is not None
            if (negative and status == "True") or (not negative and status == "False"):
                failing.append(entry)
    return evidence, failing


def _containers_started(pod: Object) -> list[str]:
    """startedAt of every container run that started (running now, or finished after starting)."""
    out = []
    for cs in container_statuses(pod):
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            if "running" in state and (state["running"] or {}).get("startedAt"):
                out.append(state["running"]["startedAt"])
            term = state.get("terminated") or {}
            if term.get("startedAt") and term.get("reason") not in RUNTIME_ERROR_REASONS:
                out.append(term["startedAt"])
    return out


def preparation_boundary(ctx: PodContext, lc: ClaimLifecycle) -> Boundary:
    claim = lc.pod_claim.claim
    assert claim is not None
    failures = _for_claim(ctx.events_with(PREPARE_FAILURE_REASONS), lc, ctx.claims)
    cond_evidence, cond_failures = device_conditions(claim)
    ready = pod_condition(ctx.pod, "PodReadyToStartContainers")
    started = _containers_started(ctx.pod)
    evidence = [_event_evidence(e) for e in failures] + cond_evidence
    if ready:
        evidence.append(_condition_evidence(ready))
    last_failure = max((event_last(e) for e in failures), key=time_key, default=None)
    ready_at = ready.get("lastTransitionTime") if ready and ready.get("status") == "True" else None
    if ctx.phase == "Succeeded" or any("running" in (cs.get("state") or {}) for cs in container_statuses(ctx.pod)):
        return Boundary(OK, since=ready_at or _earliest(started), evidence=evidence)
    if ready_at and not _later(last_failure, ready_at) and not cond_failures:
        return Boundary(OK, since=ready_at, evidence=evidence)
    if failures or cond_failures:
        return _preparation_failed(ctx, lc, failures, cond_failures, evidence)
    if started:
        return Boundary(OK, since=_earliest(started), evidence=evidence)
    if not ctx.node_name:
        where = f" to {lc.node}" if lc.node else ""
        return Boundary(PENDING, evidence=evidence, message=f"the Pod is not bound{where} yet")
    scheduled = pod_condition(ctx.pod, "PodScheduled")
    since = scheduled.get("lastTransitionTime") if scheduled and scheduled.get("status") == "True" else None
    return Boundary(
        PENDING,
        since=since or meta(ctx.pod).get("creationTimestamp"),
        evidence=evidence,
        message=f"kubelet on {ctx.node_name} has not finished preparing claim {lc.name}, with no errors so far",
    )


def _preparation_failed(
    ctx: PodContext,
    lc: ClaimLifecycle,
    failures: list[Object],
    cond_failures: list[dict[str, Any]],
    evidence: list[dict[str, Any]],
) -> Boundary:
    node = ctx.node_name or lc.node or "its node"
    if failures:
        ev = failures[-1]
        count = sum(event_count(e) for e in failures)
        times = "once" if count == 1 else f"{count} times"
        first = _earliest(event_first(e) for e in failures)
        span = (
            f"at {_short_time(first)}"
            if count == 1
            else f"between {_short_time(first)} and {_short_time(event_last(ev))}"
        )
        message = f"kubelet on {node} failed to prepare claim {lc.name} {times} {span}: {quote(ev.get('message'))}"
        since = first
    else:
        cond = cond_failures[0]
        message = (
            f"driver {cond.get('driver')} reports device {cond.get('pool')}/{cond.get('device')} of claim "
            f"{lc.name} {cond.get('type')}={cond.get('status')}"
            + (f" ({cond.get('reason')}: {quote(cond.get('message'))})" if cond.get("reason") else "")
        )
        since = cond.get("lastTransitionTime")
    return Boundary(FAILED, since=since, evidence=evidence, reason="preparation-failed", message=message)


# -- runtime --


def container_statuses(pod: Object) -> list[dict[str, Any]]:
    status = _status(pod)
    return [
        cs
        for key in ("initContainerStatuses", "containerStatuses")
        for cs in status.get(key) or ()
        if isinstance(cs, dict)
    ]


def _containers_using(pod: Object, pc: PodClaim) -> set[str]:
    if pc.extended is not None:
        return pc.extended.containers
    pod_claim_name = pc.pod_claim_name
    spec = _spec(pod)
    names = set()
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or ():
            claims = ((c.get("resources") or {}).get("claims")) or ()
            if any(isinstance(x, dict) and x.get("name") == pod_claim_name for x in claims):
                names.add(str(c.get("name")))
    return names


def _relevant_statuses(pod: Object, pc: PodClaim) -> list[dict[str, Any]]:
    using = _containers_using(pod, pc)
    statuses = container_statuses(pod)
    chosen = [cs for cs in statuses if cs.get("name") in using]
    return chosen or statuses


def _injection_error(cs: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when the container could not be created/started for a device reason."""
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in RUNTIME_ERROR_REASONS and _DEVICE_WORDS.search(str(waiting.get("message"))):
        return str(waiting["reason"]), str(waiting.get("message"))
    last = (cs.get("lastState") or {}).get("terminated") or {}
    if last.get("reason") in RUNTIME_ERROR_REASONS and _DEVICE_WORDS.search(str(last.get("message"))):
        return str(last["reason"]), str(last.get("message"))
    return None


def _unhealthy(cs: Mapping[str, Any], pod_claim_name: str) -> list[dict[str, Any]]:
    out = []
    prefix = f"claim:{pod_claim_name}/"
    for entry in cs.get("allocatedResourcesStatus") or ():
        if not isinstance(entry, dict) or not str(entry.get("name") or "").startswith(prefix):
            continue
        for res in entry.get("resources") or ():
            out.append(
                {
                    "kind": "ResourceHealth",
                    "container": cs.get("name"),
                    "name": entry.get("name"),
                    "resourceID": res.get("resourceID"),
                    "health": res.get("health"),
                }
            )
    return out


def runtime_boundary(ctx: PodContext, lc: ClaimLifecycle) -> Boundary:
    statuses = _relevant_statuses(ctx.pod, lc.pod_claim)
    evidence: list[dict[str, Any]] = []
    started: list[str] = []
    running_now = False
    injection: list[tuple[str, str, str]] = []
    for cs in statuses:
        state = cs.get("state") or {}
        evidence.append(
            {
                "kind": "ContainerState",
                "container": cs.get("name"),
                "state": state,
                "restartCount": cs.get("restartCount", 0),
            }
        )
        run_started = _containers_started({"status": {"containerStatuses": [cs]}})
        started += run_started
        running_now = running_now or "running" in state
        err = _injection_error(cs)
        if err is not None and "running" not in state:
            injection.append((str(cs.get("name")), *err))
    health = [h for cs in statuses for h in _unhealthy(cs, lc.pod_claim.pod_claim_name)]
    evidence += health
    identity = _identity_evidence(ctx, lc, statuses)
    evidence += identity
    device_errors = [e for e in ctx.events_with(("Failed",)) if _DEVICE_WORDS.search(str(e.get("message") or ""))]
    cdi_events = _for_claim(device_errors, lc, ctx.claims)
    evidence += [_event_evidence(e) for e in cdi_events]

    unhealthy = [h for h in health if h.get("health") == "Unhealthy"]
    mismatched = [i for i in identity if i.get("match") is False]
    if unhealthy:
        h = unhealthy[0]
        return Boundary(
            FAILED,
            since=None,
            evidence=evidence,
            reason="runtime-injection-failed",
            message=(
                f"kubelet reports device {h.get('resourceID')} of claim {lc.name} Unhealthy for container "
                f"{h.get('container')}"
            ),
        )
    if mismatched:
        m = mismatched[0]
        return Boundary(
            FAILED,
            since=None,
            evidence=evidence,
            reason="runtime-injection-failed",
            message=(
                f"container {m['container']} sees GPU {m['observed']}, but claim {lc.name} was allocated "
                f"{', '.join(m['expected'])}"
            ),
        )
    if not injection and cdi_events and not running_now:
        # No container status says it (yet), but kubelet's events do, and nothing started since.
        latest = max(cdi_events, key=lambda e: time_key(event_last(e)))
        if not any(_later(t, event_last(latest)) for t in started):
            injection.append(("", f"{event_count(latest)}x {latest.get('reason')} event", str(latest.get("message"))))
    if injection:
        container, reason, text = injection[0]
        since = _earliest(event_first(e) for e in cdi_events) if cdi_events else None
        who = f"container {container}" if container else "a container"
        return Boundary(
            FAILED,
            since=since,
            evidence=evidence,
            reason="runtime-injection-failed",
            message=(
                f"{who} cannot be created on {ctx.node_name or lc.node or 'its node'} with "
                f"claim {lc.name}'s devices ({reason}): {quote(text)}"
            ),
        )
    if started or ctx.phase == "Succeeded":
        since = max(started, key=time_key) if running_now else _earliest(started)
        return Boundary(OK, since=since if started else None, evidence=evidence)
    return Boundary(PENDING, evidence=evidence, message=_runtime_waiting(statuses))


def _runtime_waiting(statuses: list[dict[str, Any]]) -> str | None:
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            detail = f": {quote(waiting.get('message'))}" if waiting.get("message") else ""
            return f"container {cs.get('name')} is waiting ({waiting['reason']}){detail}"
    return None


def _identity_evidence(ctx: PodContext, lc: ClaimLifecycle, statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPU UUID each container saw against the ``uuid`` attributes of the devices it was given.

    A container using several claims may see any of their devices; without any
    known uuid there is nothing to compare (``match`` is None).
    """
    if not ctx.observed_uuids:
        return []
    names = {str(cs.get("name")) for cs in statuses} | _containers_using(ctx.pod, lc.pod_claim)
    out = []
    for container, observed in sorted(ctx.observed_uuids.items()):
        if container not in names:
            continue
        given = [o for o in ctx.claims if container in _containers_using(ctx.pod, o.pod_claim)]
        expected = _uuids(ctx, given or [lc])
        out.append(
            {
                "kind": "Identity",
                "container": container,
                "observed": observed,
                "expected": expected,
                "match": (observed in expected) if expected else None,
            }
        )
    return out


def _uuids(ctx: PodContext, lifecycles: Iterable[ClaimLifecycle]) -> list[str]:
    out = []
    for lc in lifecycles:
        for d in lc.devices:
            advertised = ctx.inventory.by_id.get(d.id)
            if advertised is not None and advertised.uuid:
                out.append(advertised.uuid)
    return out
