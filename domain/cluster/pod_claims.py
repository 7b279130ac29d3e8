"""Which ResourceClaims a Pod uses: its ``spec.resourceClaims`` and the claim behind its extended resources.

Each entry resolves to the claim object, or says why it cannot (claim-missing,
template-missing). A container asking for a DRA-backed extended resource adds
one more: the claim the scheduler created for the Pod, or — before the
scheduler got that far — the claim it would create (``planned``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from domain.cluster import extended_resources as ext
from domain.cluster.gangs import group_claim_name, group_name
from domain.cluster.state import ClusterState, HistoryView, Object, meta, ns_name, spec_of, status_of, uid_of


def pods_with_claims(state: ClusterState) -> list[Object]:
    """Live Pods with ``spec.resourceClaims``, a scheduler-created claim, or extended resources a DeviceClass serves."""
    extended = set(ext.resource_classes(state))
    pods = [
        p
        for p in state.of_kind("Pod")
        if spec_of(p).get("resourceClaims") or ext.claim_status(p) or ext.asks_extended_resources(p, extended)
    ]
    return sorted(pods, key=ns_name)


@dataclass
class ExtendedUse:
    """What a Pod's claim serves when it backs extended resources rather than a ``spec.resourceClaims`` entry."""

    asks: list[ext.ContainerAsk] = field(default_factory=list)
    mappings: list[ext.RequestMapping] = field(default_factory=list)
    planned: bool = False  # no claim yet: ``PodClaim.claim`` is the one the scheduler would create
    nodes: list[str] | None = None  # where DRA would serve it (elsewhere a device plugin does); None: anywhere

    @property
    def containers(self) -> set[str]:
        return {m.container for m in self.mappings} or {a.container for a in self.asks}

    def to_dict(self) -> dict[str, Any]:
        """The explain JSON's ``extended_resources`` of a claim: what it serves, and whether it exists yet."""
        return {
            "planned": self.planned,
            "requests": [
                {"container": a.container, "resource": a.resource, "quantity": a.quantity, "class": a.class_name,
                 "request": a.request}
                for a in self.asks
            ],
            "requestMappings": [
                {"containerName": m.container, "resourceName": m.resource, "requestName": m.request}
                for m in self.mappings
            ],
        }


@dataclass
class PodClaim:
    """One ``spec.resourceClaims`` entry of a Pod (or its extended resources), and the ResourceClaim it resolves to."""

    pod_claim_name: str
    claim_name: str | None = None
    template_name: str | None = None
    claim: Object | None = None
    problem: str | None = None  # claim-missing | template-missing
    problem_message: str | None = None
    gone_at: datetime | None = None  # set when ``claim`` is the last version before a deletion
    extended: ExtendedUse | None = None

    @property
    def uid(self) -> str | None:
        if self.claim is None or (self.extended is not None and self.extended.planned):
            return None
        return uid_of(self.claim)


def last_known(history: HistoryView, kind: str, uid: str) -> tuple[Object | None, datetime | None]:
    """The live object, or the last version before it was deleted (with the deletion time)."""
    live = history.state.get(kind, uid)
    if live is not None:
        return live, None
    gone_at = None
    for version in reversed(history.versions(kind, uid)):
        if version.obj is None:
            gone_at = version.at
        else:
            return version.obj, gone_at
    return None, gone_at


def _last_named(history: HistoryView, kind: str, namespace: str, name: str) -> tuple[Object | None, datetime | None]:
    for uid in reversed(history.uids_named(kind, namespace, name)):
        obj, gone_at = last_known(history, kind, uid)
        if obj is not None:
            return obj, gone_at
    return None, None


def resolve_pod_claims(history: HistoryView, pod: Object, use_history: bool = False) -> list[PodClaim]:
    """Each ``spec.resourceClaims`` entry resolved to its ResourceClaim, or why it cannot be.

    With ``use_history`` (a finished or deleted Pod), a claim that is gone now is
    taken at its last stored version: the cluster deletes generated claims once
    their Pod is done, and that is not a failure.
    """
    namespace = ns_name(pod)[0]
    statuses = {s.get("name"): s for s in status_of(pod).get("resourceClaimStatuses") or () if isinstance(s, dict)}
    out = []
    for entry in spec_of(pod).get("resourceClaims") or ():
        if not isinstance(entry, dict):
            continue
        pc = PodClaim(pod_claim_name=str(entry.get("name") or ""))
        if entry.get("resourceClaimName"):
            pc.claim_name = str(entry["resourceClaimName"])
            _attach(history, pc, namespace, use_history)
            if pc.claim is None:
                pc.problem = "claim-missing"
                pc.problem_message = (
                    f"the Pod references ResourceClaim {namespace}/{pc.claim_name} (pod claim "
                    f"{pc.pod_claim_name}), which does not exist"
                )
        elif entry.get("resourceClaimTemplateName"):
            pc.template_name = str(entry["resourceClaimTemplateName"])
            _resolve_generated(history, pod, pc, statuses.get(pc.pod_claim_name), use_history)
        out.append(pc)
    extended = _extended_claim(history, pod, use_history)
    if extended is not None:
        out.append(extended)
    return out


def _attach(history: HistoryView, pc: PodClaim, namespace: str, use_history: bool) -> None:
    assert pc.claim_name is not None
    pc.claim = history.state.find("ResourceClaim", namespace, pc.claim_name)
    if pc.claim is None and use_history:
        pc.claim, pc.gone_at = _last_named(history, "ResourceClaim", namespace, pc.claim_name)


def _owned_claim(history: HistoryView, pod: Object, pod_claim_name: str) -> Object | None:
    """A generated claim of this Pod found by owner and annotation (status not updated yet)."""
    pod_uid = uid_of(pod)
    for claim in history.state.of_kind("ResourceClaim"):
        owners = meta(claim).get("ownerReferences") or ()
        annotations = meta(claim).get("annotations") or {}
        if any(o.get("uid") == pod_uid for o in owners) and (
            annotations.get("resource.kubernetes.io/pod-claim-name") == pod_claim_name
        ):
            return claim
    return None


def _group_of(history: HistoryView, pod: Object) -> Object | None:
    name = group_name(pod)
    return history.state.find("PodGroup", ns_name(pod)[0], name) if name else None


def _resolve_generated(
    history: HistoryView, pod: Object, pc: PodClaim, status: Mapping[str, Any] | None, use_history: bool
) -> None:
    namespace = ns_name(pod)[0]
    if status is not None and status.get("resourceClaimName"):
        pc.claim_name = str(status["resourceClaimName"])
        _attach(history, pc, namespace, use_history)
    else:
        pc.claim = _owned_claim(history, pod, pc.pod_claim_name)
        if pc.claim is not None:
            pc.claim_name = ns_name(pc.claim)[1]
        else:
            # A member's claim of the name and template its PodGroup shares resolves to the group's claim.
            group = _group_of(history, pod)
            shared = group_claim_name(group, pc.pod_claim_name, pc.template_name) if group is not None else None
            if shared is not None:
                pc.claim_name = shared
                _attach(history, pc, namespace, use_history)
    if pc.claim is not None:
        return
    assert pc.template_name is not None
    if history.state.find("ResourceClaimTemplate", namespace, pc.template_name) is None:
        pc.problem = "template-missing"
        pc.problem_message = (
            f"the Pod's claim {pc.pod_claim_name} uses ResourceClaimTemplate "
            f"{namespace}/{pc.template_name}, which does not exist"
        )
    elif pc.claim_name:
        pc.problem = "claim-missing"
        pc.problem_message = (
            f"the Pod's claim {pc.pod_claim_name} resolves to ResourceClaim {namespace}/{pc.claim_name} "
            f"(status.resourceClaimStatuses), which does not exist"
        )
    else:
        pc.problem = "claim-missing"
        pc.problem_message = (
            f"no ResourceClaim was generated from template {namespace}/{pc.template_name} for the Pod's "
            f"claim {pc.pod_claim_name} (status.resourceClaimStatuses names none)"
        )


def _extended_claim(history: HistoryView, pod: Object, use_history: bool) -> PodClaim | None:
    """The claim behind the Pod's DRA-backed extended resources, the one the scheduler would create, or None."""
    state = history.state
    asks = ext.container_asks(pod, ext.resource_classes(state))
    name = ext.claim_name(pod)
    if not asks and name is None:
        return None
    namespace = ns_name(pod)[0]
    pc = PodClaim(pod_claim_name=ext.EXTENDED_POD_CLAIM, extended=ExtendedUse(asks, ext.request_mappings(pod)))
    if name is not None:
        pc.claim_name = name
        _attach(history, pc, namespace, use_history)
        if pc.claim is None:
            pc.problem = "claim-missing"
            pc.problem_message = (
                f"the Pod's extended resources are served by ResourceClaim {namespace}/{name} "
                "(status.extendedResourceClaimStatus), which does not exist"
            )
        return pc
    owned = ext.owned_claim(state, pod)
    if owned is not None:
        pc.claim, pc.claim_name = owned, ns_name(owned)[1]
        return pc
    # No claim: either a device plugin serves the resources, or the scheduler has not allocated yet.
    status = status_of(pod)
    if use_history or status.get("phase") in ("Succeeded", "Failed"):
        return None
    node = spec_of(pod).get("nodeName")
    if node and status.get("phase") != "Pending":
        return None
    plugin_nodes = ext.advertised_by_device_plugin(state, {a.resource for a in asks})
    dra_nodes = sorted({ns_name(n)[1] for n in state.of_kind("Node")} - plugin_nodes)
    if (node and node in plugin_nodes) or (plugin_nodes and not dra_nodes):
        return None
    assert pc.extended is not None
    pc.extended.planned = True
    pc.extended.nodes = dra_nodes if plugin_nodes else None
    pc.claim = ext.planned_claim(pod, asks)
    return pc

