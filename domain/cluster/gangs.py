"""Gangs: workload-aware scheduling's PodGroups (``scheduling.k8s.io/v1beta1``, beta in Kubernetes 1.37).

A Pod names its group in ``spec.schedulingGroup.podGroupName``; the PodGroup says how the scheduler places
its members (``spec.schedulingPolicy.gang.minCount``: that many together, or none) and may own claims its
members share (``spec.resourceClaims``, generated ones named in ``status.resourceClaimStatuses``). Such a
claim's ``reservedFor`` names the PodGroup (``apiGroup: scheduling.k8s.io``, ``resource: podgroups``) rather
than each member. The scheduler reports on the group in its ``PodGroupInitiallyScheduled`` condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.cluster.state import ClusterState, Object, meta, ns_name, spec_of, status_of

SCHEDULING_GROUP = "scheduling.k8s.io"
PODGROUPS = "podgroups"
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
TERMINAL_PHASES = ("Succeeded", "Failed")

GroupKey = tuple[str, str]  # (namespace, PodGroup name)


def group_name(pod: Object) -> str | None:
    """The PodGroup a Pod belongs to (``spec.schedulingGroup.podGroupName``), if any."""
    group = spec_of(pod).get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, dict) else None
    return str(name) if isinstance(name, str) and name else None


def group_key(pod: Object) -> GroupKey | None:
    name = group_name(pod)
    return (ns_name(pod)[0], name) if name else None


def min_count(group: Object) -> int | None:
    """A gang's ``minCount``; None for a group the scheduler places Pod by Pod (the basic policy)."""
    policy = spec_of(group).get("schedulingPolicy")
    gang = policy.get("gang") if isinstance(policy, dict) else None
    count = gang.get("minCount") if isinstance(gang, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def group_condition(group: Object, type_: str = INITIALLY_SCHEDULED) -> dict[str, Any] | None:
    for cond in status_of(group).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


def workload_of(group: Object) -> str | None:
    ref = spec_of(group).get("workloadRef")
    name = ref.get("workloadName") if isinstance(ref, dict) else None
    return str(name) if name else None


def members_of(state: ClusterState, key: GroupKey) -> list[Object]:
    """The live Pods naming the group, by name (indexed over every Pod once per state)."""
    index = state.derived.get("gang-members")
    if index is None:
        index = {}
        for pod in state.of_kind("Pod"):
            found = group_key(pod)
            if found is not None:
                index.setdefault(found, []).append(pod)
        for pods in index.values():
            pods.sort(key=ns_name)
        state.derived["gang-members"] = index
    return list(index.get(key, ()))


def member_state(pod: Object) -> tuple[str, str]:
    """Where a member stands, as the group pages show it: ``(state, detail)``, state one of terminal,
    deleting, running, bound (on a node, not running yet), gated (scheduling gates) and pending."""
    status, spec = status_of(pod), spec_of(pod)
    if status.get("phase") in TERMINAL_PHASES:
        return "terminal", str(status.get("phase"))
    if meta(pod).get("deletionTimestamp"):
        return "deleting", f"deletion requested at {meta(pod)['deletionTimestamp']}"
    if spec.get("nodeName"):
        statuses = status.get("containerStatuses") or ()
        running = any(isinstance(cs, dict) and "running" in (cs.get("state") or {}) for cs in statuses)
        return ("running" if running else "bound"), str(spec["nodeName"])
    gates = [str(g.get("name")) for g in spec.get("schedulingGates") or () if isinstance(g, dict)]
    if gates:
        return "gated", f"scheduling gates {', '.join(gates)}"
    return "pending", ""


def active_members(state: ClusterState, key: GroupKey) -> list[Object]:
    """Members that still count: not finished, not being deleted."""
    return [
        p
        for p in members_of(state, key)
        if status_of(p).get("phase") not in TERMINAL_PHASES and not meta(p).get("deletionTimestamp")
    ]


def is_group_consumer(ref: Mapping[str, Any]) -> bool:
    """A claim's ``reservedFor`` entry naming a PodGroup."""
    return ref.get("apiGroup") == SCHEDULING_GROUP and ref.get("resource") == PODGROUPS


def reserved_for_group(consumers: list[dict[str, Any]], pod: Object) -> bool:
    """Whether a claim's consumers name the Pod's PodGroup: the Pod may use it (kubelet's
    ``IsReservedForPod``: a Pod knows its group by name only)."""
    name = group_name(pod)
    return name is not None and any(is_group_consumer(c) and c.get("name") == name for c in consumers)


def group_claim_name(group: Object, pod_claim_name: str, template: str | None) -> str | None:
    """The claim a PodGroup's ``spec.resourceClaims`` entry resolves to, for a member's pod claim of the same
    name (and template): its ``resourceClaimName``, or the generated claim its status names; None otherwise."""
    for entry in spec_of(group).get("resourceClaims") or ():
        if not isinstance(entry, dict) or entry.get("name") != pod_claim_name:
            continue
        if entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
        if template is not None and entry.get("resourceClaimTemplateName") != template:
            return None
        for status in status_of(group).get("resourceClaimStatuses") or ():
            if isinstance(status, dict) and status.get("name") == pod_claim_name and status.get("resourceClaimName"):
                return str(status["resourceClaimName"])
    return None


def group_claims(group: Object) -> list[dict[str, Any]]:
    """The claims a PodGroup owns: each ``spec.resourceClaims`` entry and the claim it resolves to (or None)."""
    out = []
    for entry in spec_of(group).get("resourceClaims") or ():
        if isinstance(entry, dict) and entry.get("name"):
            name = str(entry["name"])
            out.append(
                {
                    "name": name,
                    "template": entry.get("resourceClaimTemplateName"),
                    "claim": group_claim_name(group, name, entry.get("resourceClaimTemplateName")),
                }
            )
    return out
