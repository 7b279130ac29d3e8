"""Short summaries of ResourceClaims for lists and headers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from domain.cluster.state import ClusterState, Object, meta, ns_name, uid_of
from domain.cluster.timefmt import parse_time, rfc3339


@dataclass(frozen=True)
class ClaimSummary:
    uid: str
    namespace: str
    name: str
    state: str  # pending | allocated | reserved | deleting
    devices: tuple[str, ...]  # "pool/device"
    node: str
    created: datetime | None
    consumers: tuple[str, ...]
    leak: str = ""  # the retention reason when the leak report flags the claim

    def entry(self) -> dict[str, Any]:
        """What ``/api/claims`` says of the claim, but for the URL of its page (the web app's)."""
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state,
            "devices": list(self.devices),
            "node": self.node,
            "created": rfc3339(self.created),
        }

    @property
    def badges(self) -> tuple[str, ...]:
        """What a list shows: the allocation state, and the leak reason that state alone hides."""
        return (self.state, self.leak) if self.leak else (self.state,)


def allocation_results(claim: Object) -> list[dict[str, Any]]:
    status = claim.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, dict) else None
    if not isinstance(allocation, dict):
        return []
    devices = allocation.get("devices") or {}
    results = devices.get("results") if isinstance(devices, dict) else None
    return [r for r in results or () if isinstance(r, dict)]


def allocated_node(claim: Object) -> str:
    """The node an allocation is pinned to, from its nodeSelector (metadata.name or hostname)."""
    status = claim.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, dict) else None
    selector = allocation.get("nodeSelector") if isinstance(allocation, dict) else None
    for term in (selector or {}).get("nodeSelectorTerms") or () if isinstance(selector, dict) else ():
        for requirement in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            if (
                requirement.get("key") in ("metadata.name", "kubernetes.io/hostname")
                and requirement.get("operator") == "In"
                and len(requirement.get("values") or []) == 1
            ):
                return str(requirement["values"][0])
    return ""


def consumers(claim: Object) -> list[dict[str, Any]]:
    status = claim.get("status") or {}
    reserved = status.get("reservedFor") if isinstance(status, dict) else None
    return [c for c in reserved or () if isinstance(c, dict)]


def summarize_claim(claim: Object) -> ClaimSummary:
    namespace, name = ns_name(claim)
    results = allocation_results(claim)
    reserved = consumers(claim)
    if meta(claim).get("deletionTimestamp"):
        state = "deleting"
    elif reserved and results:
        state = "reserved"
    elif results:
        state = "allocated"
    else:
        state = "pending"
    return ClaimSummary(
        uid=uid_of(claim),
        namespace=namespace,
        name=name,
        state=state,
        devices=tuple(f"{r.get('pool')}/{r.get('device')}" for r in results),
        node=allocated_node(claim),
        created=parse_time(meta(claim).get("creationTimestamp")),
        consumers=tuple(str(c.get("name")) for c in reserved),
    )


def claim_summaries(state: ClusterState) -> list[ClaimSummary]:
    """Every live claim's summary by namespace and name; computed once per state, kept with it."""
    summaries = state.derived.get("claim_summaries")
    if summaries is None:
        summaries = state.derived["claim_summaries"] = sorted(
            (summarize_claim(c) for c in state.of_kind("ResourceClaim")), key=lambda s: (s.namespace, s.name)
        )
    return list(summaries)


def with_leak_flags(summaries: Iterable[ClaimSummary], leaks: Mapping[str, Any]) -> list[ClaimSummary]:
    """``summaries`` with each claim the leaks document flags marked with its reason."""
    reasons = {str(c["uid"]): str(c["reason"]) for c in leaks["claims"]}
    return [replace(s, leak=reasons[s.uid]) if s.uid in reasons else s for s in summaries]
