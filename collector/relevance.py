"""Which objects Claimline keeps: Pods that take part in DRA, and the Events about them and their claims.

A Pod of a gang (``spec.schedulingGroup``) is kept whether or not it uses claims itself: the scheduler
places its group's members together or not at all, so each member counts in its siblings' verdicts.

A cluster's Pods are mostly not DRA's: the collector and ``import-snapshot`` keep the same ones, so an
imported dump stores (and derives, and costs) what a collection of that cluster would.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.cluster.extended_resources import asks_extended_resources, explicit_resource_names

# The kinds a kind's filter reads: a Pod is kept for the claims that reserve it and the classes whose
# extended resources it asks for; an Event for the Pods and claims it is about.
FILTERED_BY: dict[str, tuple[str, ...]] = {"Pod": ("ResourceClaim", "DeviceClass"), "Event": ("ResourceClaim", "Pod")}


def uid_of(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def ns_name_of(obj: Any) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return ("", "")
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def reserved_pod_uids(claims: list[Any]) -> set[str]:
    reserved: set[str] = set()
    for claim in claims:
        status = claim.get("status") if isinstance(claim, dict) else None
        consumers = status.get("reservedFor") if isinstance(status, dict) else None
        # A malformed claim may have anything there; iterating a number would raise TypeError.
        for consumer in consumers if isinstance(consumers, list) else ():
            if isinstance(consumer, dict) and consumer.get("resource", "pods") == "pods":
                reserved.add(str(consumer.get("uid")))
    return reserved


def pods_reserved_or_using_claims(
    pods: list[Any], reserved: set[str], extended: set[str] | frozenset[str] = frozenset()
) -> list[Any]:
    """Pods that use claims, are named in a claim's reservedFor, ask for DRA-backed extended resources, or
    belong to a scheduling group."""
    kept = []
    for pod in pods:
        spec = pod.get("spec") if isinstance(pod, dict) else None
        uses = isinstance(spec, dict) and (
            bool(spec.get("resourceClaims"))
            or bool(spec.get("schedulingGroup"))
            or uses_extended_resources(pod, extended)
        )
        # A malformed Pod is kept so that validation reports it instead of dropping it silently.
        if uses or not isinstance(spec, dict):
            kept.append(pod)
            continue
        uid = uid_of(pod)
        if uid in reserved or not uid:
            kept.append(pod)
    return kept


def uses_extended_resources(pod: dict[str, Any], extended: set[str] | frozenset[str]) -> bool:
    status = pod.get("status")
    if isinstance(status, dict) and status.get("extendedResourceClaimStatus"):
        return True
    try:
        return asks_extended_resources(pod, extended)
    except (AttributeError, TypeError):  # a malformed container: shape validation reports it if the Pod is kept
        return False


def events_about(events: list[Any], uids: set[str], claim_keys: set[tuple[str, str, str]]) -> list[Any]:
    return [event for event in events if is_about(event, (uids,), claim_keys)]


def is_about(event: Any, uid_sets: Iterable[set[str]], claim_keys: set[tuple[str, str, str]]) -> bool:
    """Whether ``event`` is about an object whose UID is in one of ``uid_sets``, or about a claim of ``claim_keys``."""
    involved = event.get("involvedObject") if isinstance(event, dict) else None
    if not isinstance(involved, dict):
        return False
    uid = involved.get("uid")
    # Set lookups hash: a list or dict in a malformed event would raise TypeError.
    if isinstance(uid, str) and any(uid in uids for uids in uid_sets):
        return True
    key = (involved.get("kind"), involved.get("namespace") or "", involved.get("name") or "")
    return all(isinstance(k, str) for k in key) and key in claim_keys


def keep_relevant(by_kind: dict[str, list[Any]], listed: Iterable[str] | None = None) -> dict[str, list[Any]]:
    """A whole listing's Pods and Events narrowed as a collection narrows them.

    ``listed``: the kinds the listing is complete for (by default the kinds it has objects of). A
    kind is narrowed only when every kind its filter reads is listed: a dump of Pods alone cannot
    tell which of them some claim reserves, so it keeps them all.
    """
    complete = set(by_kind if listed is None else listed)
    kept = dict(by_kind)
    claims = by_kind.get("ResourceClaim", [])
    if "Pod" in by_kind and complete.issuperset(FILTERED_BY["Pod"]):
        extended = explicit_resource_names(by_kind.get("DeviceClass", []))
        kept["Pod"] = pods_reserved_or_using_claims(by_kind["Pod"], reserved_pod_uids(claims), extended)
    if "Event" in by_kind and complete.issuperset(FILTERED_BY["Event"]):
        about = {uid_of(p) for p in kept.get("Pod", [])} | {uid_of(c) for c in claims}
        kept["Event"] = events_about(by_kind["Event"], about, claim_keys(claims))
    return kept


def claim_keys(claims: Iterable[Any]) -> set[tuple[str, str, str]]:
    """How an Event names a claim it is about without its UID."""
    return {("ResourceClaim", *ns_name_of(c)) for c in claims}
