"""The preparation boundary: did kubelet and the node's DRA driver prepare the claim's devices?

Evidence: kubelet's ``FailedPrepare…`` events about the claim, the conditions drivers report in the
claim's ``status.devices[]`` and the Pod's ``PodReadyToStartContainers`` condition.
"""

from __future__ import annotations

import re
from typing import Any

from domain.boundaries.binding import binding_condition_types
from domain.boundaries.judgement import (
    FAILED,
    OK,
    PENDING,
    PREPARE_FAILURE_REASONS,
    Boundary,
    ClaimLifecycle,
    PodContext,
    condition_evidence,
    container_statuses,
    containers_started,
    event_count,
    event_evidence,
    event_first,
    event_last,
    events_for_claim,
    later,
    pod_condition,
    quote,
    short_time,
    time_key,
)
from domain.cluster.pod_claims import last_known
from domain.cluster.state import Object, meta, ns_name, uid_of
from domain.cluster.state import status_of as _status
from domain.cluster.timefmt import earliest, rfc3339


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


def preparation_boundary(ctx: PodContext, lc: ClaimLifecycle) -> Boundary:
    claim = lc.pod_claim.claim
    assert claim is not None
    failures = events_for_claim(ctx.events_with(PREPARE_FAILURE_REASONS), lc, ctx.claims)
    cond_evidence, cond_failures = device_conditions(claim)
    ready = pod_condition(ctx.pod, "PodReadyToStartContainers")
    started = containers_started(ctx.pod)
    evidence = [event_evidence(e) for e in failures] + cond_evidence
    if ready:
        evidence.append(condition_evidence(ready))
    last_failure = max((event_last(e) for e in failures), key=time_key, default=None)
    ready_at = ready.get("lastTransitionTime") if ready and ready.get("status") == "True" else None
    if ctx.phase == "Succeeded" or any("running" in (cs.get("state") or {}) for cs in container_statuses(ctx.pod)):
        return Boundary(OK, since=ready_at or earliest(started), evidence=evidence)
    if ready_at and not later(last_failure, ready_at) and not cond_failures:
        return Boundary(OK, since=ready_at, evidence=evidence)
    if failures or cond_failures:
        return _preparation_failed(ctx, lc, failures, cond_failures, evidence)
    if started:
        return Boundary(OK, since=earliest(started), evidence=evidence)
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


# kubelet still holds a claim of that name prepared under another UID: its Pod went without kubelet
# unpreparing it (a force deletion), and the claim was recreated for the Pod's next incarnation.
FORCE_DELETED = re.compile(r"old ResourceClaim with same name (\S+) and different UID (\S+) still exists")


def _force_deleted(ctx: PodContext, node: str, text: str) -> str:
    """What kubelet's "previous pod force-deleted" failure means, with the incarnation that went before."""
    found = FORCE_DELETED.search(text)
    if found is None:
        return ""
    namespace, name = ns_name(ctx.pod)
    earlier = [u for u in ctx.history.uids_named("Pod", namespace, name) if u != uid_of(ctx.pod)]
    before = ""
    if earlier:
        _, gone_at = last_known(ctx.history, "Pod", earlier[-1])
        when = f" (gone at {rfc3339(gone_at)})" if gone_at is not None else ""
        before = f"the Pod's previous incarnation {earlier[-1]}{when} "
    return (
        f"; {before or 'a previous Pod '}was deleted without kubelet unpreparing its claim: kubelet on {node} "
        f"still holds claim {found.group(1)} prepared under its old UID {found.group(2).rstrip(',;')}, and "
        "will not prepare the new one until it has unprepared the old one through the node's DRA driver"
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
        first = earliest(event_first(e) for e in failures)
        span = (
            f"at {short_time(first)}"
            if count == 1
            else f"between {short_time(first)} and {short_time(event_last(ev))}"
        )
        message = f"kubelet on {node} failed to prepare claim {lc.name} {times} {span}: {quote(ev.get('message'))}"
        message += _force_deleted(ctx, node, str(ev.get("message") or ""))
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
