"""The runtime boundary: did the containers using a claim start with its devices injected (CDI)?

Judged on container states and waiting/terminated reasons, kubelet's device
health (``allocatedResourcesStatus``), its ``Failed`` events, and optionally the
GPU UUID each container saw against the allocated devices' ``uuid`` attribute.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from domain.boundaries.judgement import (
    FAILED,
    OK,
    PENDING,
    RUNTIME_ERROR_REASONS,
    Boundary,
    ClaimLifecycle,
    PodContext,
    container_statuses,
    containers_started,
    event_count,
    event_evidence,
    event_first,
    event_last,
    events_for_claim,
    later,
    quote,
    time_key,
)
from domain.cluster.pod_claims import PodClaim
from domain.cluster.state import Object, spec_of
from domain.cluster.timefmt import earliest

# Kubelet/containerd messages about device injection mention one of these.
_DEVICE_WORDS = re.compile(r"\bcdi\b|device|nvidia|gpu|resourceclaim|claim=", re.IGNORECASE)


def _containers_using(pod: Object, pc: PodClaim) -> set[str]:
    if pc.extended is not None:
        return pc.extended.containers
    pod_claim_name = pc.pod_claim_name
    spec = spec_of(pod)
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


def _unhealthy(cs: Mapping[str, Any], pc: PodClaim) -> list[dict[str, Any]]:
    """kubelet's health of the claim's devices in one container status (``allocatedResourcesStatus``).

    An entry is named ``claim:<pod claim>/<request>``, or ``claim:<pod claim>`` when the container's claim
    entry names no request; a claim behind extended resources has no pod claim name, so kubelet names the
    claim itself.
    """
    names = [pc.pod_claim_name]
    if pc.extended is not None and pc.claim_name:
        names.append(pc.claim_name)
    whole = {f"claim:{n}" for n in names}
    prefixes = tuple(f"claim:{n}/" for n in names)
    out = []
    for entry in cs.get("allocatedResourcesStatus") or ():
        name = str(entry.get("name") or "") if isinstance(entry, dict) else ""
        if name not in whole and not name.startswith(prefixes):
            continue
        for res in entry.get("resources") or ():
            if not isinstance(res, dict):
                continue
            health = {
                "kind": "ResourceHealth",
                "container": cs.get("name"),
                "name": name,
                "resourceID": res.get("resourceID"),
                "health": res.get("health"),
            }
            if res.get("message"):
                health["message"] = res["message"]
            out.append(health)
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
        run_started = containers_started({"status": {"containerStatuses": [cs]}})
        started += run_started
        running_now = running_now or "running" in state
        err = _injection_error(cs)
        if err is not None and "running" not in state:
            injection.append((str(cs.get("name")), *err))
    health = [h for cs in statuses for h in _unhealthy(cs, lc.pod_claim)]
    evidence += health
    identity = _identity_evidence(ctx, lc, statuses)
    evidence += identity
    device_errors = [e for e in ctx.events_with(("Failed",)) if _DEVICE_WORDS.search(str(e.get("message") or ""))]
    cdi_events = events_for_claim(device_errors, lc, ctx.claims)
    evidence += [event_evidence(e) for e in cdi_events]

    unhealthy = [h for h in health if h.get("health") == "Unhealthy"]
    mismatched = [i for i in identity if i.get("match") is False]
    if unhealthy:
        # Unknown health is evidence only: kubelet cannot tell (a driver restarting), which is no failure.
        h = unhealthy[0]
        said = f': "{quote(h["message"])}"' if h.get("message") else " (kubelet gave no message)"
        more = len({str(u.get("resourceID")) for u in unhealthy}) - 1
        others = f"; {more} more of its devices likewise" if more > 0 else ""
        return Boundary(
            FAILED,
            since=None,
            evidence=evidence,
            reason="device-unhealthy",
            message=(
                f"kubelet reports device {h.get('resourceID')} of claim {lc.name} Unhealthy for container "
                f"{h.get('container')}{said}{others}"
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
        if not any(later(t, event_last(latest)) for t in started):
            injection.append(("", f"{event_count(latest)}x {latest.get('reason')} event", str(latest.get("message"))))
    if injection:
        container, reason, text = injection[0]
        since = earliest(event_first(e) for e in cdi_events) if cdi_events else None
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
        since = max(started, key=time_key) if running_now else earliest(started)
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
