"""A Pod's claims across the four boundaries: inventory and allocation here, preparation in ``preparation``,
runtime in ``runtime``.

Each boundary is judged on its own evidence: an allocated claim says nothing
about preparation, a running container nothing about which GPU it sees. Times
come from the objects' own timestamps (``timeline`` lays them out); a snapshot
time is used only where the API records none.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from domain.allocator.matching import (
    Simulation,
    claim_requests,
    class_drivers,
    describe_device,
    find_class,
    missing_inventory,
    selector_cache,
)
from domain.allocator.shared_simulations import simulate_pod
from domain.boundaries.binding import PENDING_EVENT as BINDING_PENDING_EVENT
from domain.boundaries.binding import binding_wait, is_binding_failure
from domain.boundaries.gang import Gang, judge_gang
from domain.boundaries.judgement import (
    FAILED,
    OK,
    PENDING,
    UNKNOWN,
    AllocationTrial,
    Boundary,
    ClaimLifecycle,
    PodContext,
    condition_evidence,
    containers_started,
    event_count,
    event_evidence,
    event_first,
    event_last,
    is_terminal,
    pod_condition,
    quote,
    related_events,
    short_time,
    time_key,
)
from domain.boundaries.preparation import preparation_boundary
from domain.boundaries.runtime import runtime_boundary
from domain.cluster import extended_resources as ext
from domain.cluster.asks import taint_label
from domain.cluster.gangs import reserved_for_group
from domain.cluster.pod_claims import PodClaim, resolve_pod_claims
from domain.cluster.state import HistoryView, Object, meta, ns_name, uid_of
from domain.cluster.state import status_of as _status
from domain.cluster.timefmt import earliest, rfc3339
from domain.inventory.devices import (
    RULE_KEY,
    AdvertisedDevice,
    Inventory,
    allocated_devices,
    allocation,
    allocation_node,
    allocations_nodes,
    evicting_taints,
    is_allocated,
    rule_evidence,
    taint_evidence,
    taint_source,
)

_MAX_DEVICE_EVIDENCE = 64


# --- the four boundaries ---------------------------------------------------------------------------


@dataclass
class PodLifecycle:
    """A Pod incarnation's claims with their boundaries, and the events they were judged on."""

    claims: list[ClaimLifecycle]
    events: list[Object]
    group: Gang | None = None  # the Pod's PodGroup, when it names one


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
    group = judge_gang(ctx, lifecycles)
    for lc in lifecycles:
        if lc.pod_claim.claim is not None and is_allocated(lc.pod_claim.claim):
            lc.boundaries["preparation"] = preparation_boundary(ctx, lc)
            lc.boundaries["runtime"] = runtime_boundary(ctx, lc)
    return PodLifecycle(lifecycles, ctx.events, group)


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
    if ctx.settled or containers_started(ctx.pod):
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
    # inventory held; whether the devices are still advertised now is shown, not judged. What
    # fails it is a device taken away from under the Pod: a NoExecute taint the claim does not
    # tolerate, on which the device taint eviction controller evicts the Pod.
    evidence = []
    created = []
    for d in lc.devices:
        advertised = ctx.inventory.by_id.get(d.id)
        if advertised is None:
            evidence.append(
                {"kind": "Device", "driver": d.driver, "pool": d.pool, "device": d.device, "advertised": False}
            )
        else:
            entry = {**describe_device(advertised), "advertised": True}
            if advertised.taints:
                entry["taints"] = [taint_evidence(advertised, t) for t in advertised.taints]
            evidence.append(entry)
            created.append(advertised.slice_created)
    evicting = evicting_taints(ctx.inventory, lc.pod_claim.claim, lc.devices)
    evidence += _rule_evidence(ctx, evicting)
    eviction = _eviction_evidence(ctx) if evicting else None
    if eviction is None:
        return Boundary(OK, since=earliest(created), evidence=evidence)
    since, how, seen = eviction
    device, taint, seconds = evicting[0]
    tolerated = f"tolerates for only {seconds}s" if seconds is not None else "does not tolerate"
    more = f" ({len(evicting) - 1} more tainted likewise)" if len(evicting) > 1 else ""
    return Boundary(
        FAILED,
        since=since,
        evidence=evidence + seen,
        reason="device-taint-eviction",
        message=(
            f"device {device.label} of claim {lc.name} carries taint {taint_label(taint)} from "
            f"{taint_source(device, taint)}, which the claim {tolerated}{more}, "
            f"and the device taint eviction controller is evicting the Pod ({how})"
        ),
    )


EVICTION_REASON = "DeletionByDeviceTaintManager"  # the Pod's DisruptionTarget condition
EVICTION_EVENT = "DeviceTaintManagerEviction"  # "Marking for deletion", or "Cancelling deletion"


def _eviction_evidence(ctx: PodContext) -> tuple[str | None, str, list[dict[str, Any]]] | None:
    """(since, how it shows, evidence) when the device taint eviction controller is evicting the Pod."""
    events = ctx.events_with((EVICTION_EVENT,))
    cond = pod_condition(ctx.pod, "DisruptionTarget")
    if cond is not None and cond.get("status") == "True" and cond.get("reason") == EVICTION_REASON:
        since = cond.get("lastTransitionTime")
        seen = [condition_evidence(cond), *(event_evidence(e) for e in events)]
        return since, f"DisruptionTarget {EVICTION_REASON} since {short_time(since)}", seen
    latest = max(events, key=lambda e: time_key(event_last(e)), default=None)
    if latest is None or "cancel" in str(latest.get("message") or "").lower():
        return None
    said = quote(latest.get("message"))
    return (
        event_first(latest),
        f'{EVICTION_EVENT} "{said}" at {short_time(event_last(latest))}',
        [event_evidence(e) for e in events],
    )


def _rule_evidence(
    ctx: PodContext, evicting: list[tuple[AdvertisedDevice, Mapping[str, Any], int | None]]
) -> list[dict[str, Any]]:
    """The DeviceTaintRules behind evicting taints, with their EvictionInProgress condition."""
    out = []
    for name in sorted({str(t[RULE_KEY]) for _d, t, _s in evicting if t.get(RULE_KEY)}):
        rule = ctx.inventory.state.find("DeviceTaintRule", "", name)
        if rule is not None:
            out.append(rule_evidence(rule))
    return out


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
        evidence.append(condition_evidence(scheduled))
    since = _allocated_since(ctx, claim)
    # Unbound, the Pod may be held in PreBind by its devices' binding conditions (kubelet never saw it).
    wait = None if ctx.node_name or ctx.settled else binding_wait(claim, lc.name, ctx.history.as_of)
    if wait is not None:
        evidence += wait.evidence + [event_evidence(e) for e in ctx.events_with((BINDING_PENDING_EVENT,))]
        return Boundary(
            wait.state, since=wait.since or since, evidence=evidence, reason=wait.reason, message=wait.message
        )
    pod_uid = uid_of(ctx.pod)
    mine = any(c.get("uid") == pod_uid for c in reserved) or reserved_for_group(reserved, ctx.pod)
    if mine or ctx.node_name or ctx.settled:
        return Boundary(OK, since=since, evidence=evidence)
    deleting = _being_deleted(ctx, lc)
    if deleting is not None:
        return deleting
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
        deleting = _being_deleted(ctx, lc)
        if deleting is not None:
            lc.boundaries["allocation"] = deleting
            continue
        problem = _class_problem(ctx, lc) or _inventory_problem(ctx, lc) or _bypass_problem(ctx, lc)
        if problem is None:
            to_simulate.append(lc)
    if to_simulate:
        _simulate_allocation(ctx, lifecycles, to_simulate)


def _being_deleted(ctx: PodContext, lc: ClaimLifecycle) -> Boundary | None:
    """A claim being deleted is not allocated or reserved for a Pod any more (the scheduler answers
    ``resourceclaim "…" is being deleted``): for a Pod not placed yet, it is as good as missing."""
    claim = lc.pod_claim.claim
    assert claim is not None
    deleted_at = meta(claim).get("deletionTimestamp")
    if not deleted_at or ctx.node_name or ctx.settled:
        return None
    finalizers = ", ".join(str(f) for f in meta(claim).get("finalizers") or ())
    held = f" and finalizers ({finalizers}) keep it" if finalizers else ""
    users = [c for c in reserved_for(claim) if c.get("uid") != uid_of(ctx.pod)]
    reserved = ""
    if users:
        named = ", ".join(f"{c.get('resource') or 'pods'} {c.get('name')}" for c in users)
        reserved = f"; it is still reserved for {named}"
    namespace, name = ns_name(claim)
    return Boundary(
        FAILED,
        since=str(deleted_at),
        evidence=[
            _pod_claim_evidence(ctx.pod, lc.pod_claim),
            {"kind": "ResourceClaim", "name": name, "deletionTimestamp": deleted_at, "finalizers": finalizers},
            *_scheduler_evidence(ctx),
        ],
        reason="claim-missing",
        message=(
            f"the Pod references ResourceClaim {namespace}/{name}, which is being deleted (since {deleted_at}"
            f"{held}): the scheduler will not allocate or reserve it for a new Pod{reserved}"
        ),
    )


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
        evidence.append(condition_evidence(cond))
    evidence += [event_evidence(e) for e in ctx.events_with(("FailedScheduling",))]
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
    since, evidence = ctx.inventory.presence(frozenset(drivers))
    return Boundary(OK, since=since, evidence=[dict(e) for e in evidence])


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
    allocated = [lc.pod_claim.claim for lc in lifecycles if lc.devices and lc.pod_claim.claim is not None]
    nodes = allocations_nodes(allocated, ctx.inventory.nodes)
    for lc in lifecycles:
        extended = lc.pod_claim.extended
        if extended is not None and extended.nodes is not None:
            nodes = set(extended.nodes) if nodes is None else nodes & set(extended.nodes)
    return sorted(nodes) if nodes is not None else None


def _simulate_allocation(ctx: PodContext, lifecycles: list[ClaimLifecycle], pending: list[ClaimLifecycle]) -> None:
    claims = [lc.pod_claim.claim for lc in pending if lc.pod_claim.claim is not None]
    siblings = [lc.uid for lc in lifecycles if lc.uid and lc.devices]
    pinned = _pinned_nodes(ctx, lifecycles)
    sim = simulate_pod(ctx.inventory, claims, nodes=pinned, cache=ctx.cache, sibling_claims=siblings)
    reason = sim.reason
    message = sim.message()
    evidence = _match_evidence(sim)
    scheduler = _scheduler_evidence(ctx)
    trial = AllocationTrial(
        sim, tuple(claims), tuple(pinned) if pinned is not None else None, tuple(siblings), ctx.cache, ctx.inventory
    )
    for lc in pending:
        claim = lc.pod_claim.claim
        assert claim is not None
        since = _unscheduled_since(ctx, claim)
        if reason is not None:
            lc.boundaries["allocation"] = Boundary(
                FAILED,
                since=since,
                evidence=evidence + scheduler,
                reason=reason,
                message=message + _scheduler_reported(ctx, condition=False),
                basis=trial,
            )
        elif (failed_binding := _binding_failure(ctx)) is not None:
            lc.boundaries["allocation"] = Boundary(
                FAILED,
                since=event_first(failed_binding),
                evidence=evidence + scheduler,
                reason="binding-failed",
                message=(
                    f"the scheduler's last attempt to bind the Pod failed at {short_time(event_last(failed_binding))}"
                    f': "{quote(failed_binding.get("message"))}"; claim {lc.name} was deallocated for a retry'
                ),
            )
        else:
            lc.boundaries["allocation"] = Boundary(
                PENDING,
                since=since,
                evidence=evidence + scheduler,
                reason="waiting-for-scheduler",
                message=_waiting_message(ctx, lc, sim),
            )


def _binding_failure(ctx: PodContext) -> Object | None:
    """The scheduler's latest FailedScheduling event, when it says binding conditions failed or timed out."""
    failures = ctx.events_with(("FailedScheduling",))
    latest = max(failures, key=lambda e: time_key(event_last(e)), default=None)
    return latest if latest is not None and is_binding_failure(str(latest.get("message") or "")) else None


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
                    # free of holders, but short of shared counters or capacity other claims hold
                    "short": len(on_node.short),
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
    said = _scheduler_reported(ctx, condition=True) or "; the scheduler has not reported on the Pod yet"
    return f"claim {lc.name} is not allocated yet{where}{said}"


def _scheduler_reported(ctx: PodContext, *, condition: bool) -> str:
    """The scheduler's own words on the Pod, as a clause: its latest FailedScheduling event, else (when asked)
    the PodScheduled=False condition's message; empty when it said neither."""
    failures = ctx.events_with(("FailedScheduling",))
    if failures:
        ev = failures[-1]
        count = event_count(ev)
        times = f"{count} times since" if count > 1 else "at"
        return f'; the scheduler reported "{quote(ev.get("message"))}" {times} {short_time(event_first(ev))}'
    cond = pod_condition(ctx.pod, "PodScheduled")
    if condition and cond and cond.get("status") == "False" and cond.get("message"):
        return f'; the scheduler reported "{quote(cond.get("message"))}"'
    return ""
