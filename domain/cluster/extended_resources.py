"""DRA-backed extended resources: a container's ``nvidia.com/gpu: 2`` served by a ResourceClaim.

A DeviceClass with ``spec.extendedResourceName`` (and every class, under the
implicit ``deviceclass.resource.kubernetes.io/<class>``) lets a Pod ask for
devices the old way, in ``resources.requests``. On a node that does not
advertise the resource through a device plugin (``status.allocatable`` lacks
it), the scheduler serves the request with a ResourceClaim it creates for the
Pod: one ``ExactCount`` request per container and resource, named
``container-<i>-request-<j>`` (i over initContainers then containers, j the
resource's position among the container's sorted request names), annotated
``resource.kubernetes.io/extended-resource-claim: "true"``, owned by the Pod,
and named in ``pod.status.extendedResourceClaimStatus``. Until then the Pod has
no claim at all, so its allocation is judged on an in-memory claim of the
same shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from domain.cluster.state import ClusterState, Object, meta, ns_name, spec_of, status_of, uid_of
from domain.cluster.timefmt import parse_time

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
# The slot an extended-resource claim takes among a Pod's claims: it has no spec.resourceClaims entry.
EXTENDED_POD_CLAIM = "extended-resources"
_NEVER = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ContainerAsk:
    """One container's request for one DRA-backed extended resource."""

    container: str
    resource: str
    quantity: int
    class_name: str
    request: str  # the claim request the scheduler creates for it

    def phrase(self) -> str:
        return f"container {self.container}'s {self.resource}: {self.quantity}"


@dataclass(frozen=True)
class RequestMapping:
    """An entry of ``status.extendedResourceClaimStatus.requestMappings``."""

    container: str
    resource: str
    request: str


def resource_classes(state: ClusterState) -> dict[str, str]:
    """Extended resource name → the DeviceClass that serves it.

    Several classes naming the same ``extendedResourceName`` (a migration from
    one class to another): the newest wins, then the alphabetically first name,
    as ``DeviceClassSpec.extendedResourceName`` documents.
    """
    out: dict[str, str] = {}
    winners: dict[str, Object] = {}
    for device_class in state.of_kind("DeviceClass"):
        name = ns_name(device_class)[1]
        out[IMPLICIT_PREFIX + name] = name
        resource = spec_of(device_class).get("extendedResourceName")
        if isinstance(resource, str) and resource:
            known = winners.get(resource)
            if known is None or _newer(device_class, known):
                winners[resource] = device_class
    out.update({resource: ns_name(device_class)[1] for resource, device_class in winners.items()})
    return out


def _newer(a: Object, b: Object) -> bool:
    created_a, created_b = (parse_time(meta(o).get("creationTimestamp")) or _NEVER for o in (a, b))
    if created_a != created_b:
        return created_a > created_b
    return ns_name(a)[1] < ns_name(b)[1]


def explicit_resource_names(device_classes: Iterable[Object]) -> set[str]:
    """``spec.extendedResourceName`` of the classes (the collector keeps Pods asking for these)."""
    names = set()
    for device_class in device_classes:
        resource = spec_of(device_class).get("extendedResourceName") if isinstance(device_class, dict) else None
        if isinstance(resource, str) and resource:
            names.add(resource)
    return names


def _containers(pod: Object) -> list[dict[str, Any]]:
    spec = spec_of(pod)
    return [c for key in ("initContainers", "containers") for c in spec.get(key) or () if isinstance(c, dict)]


def _requested(container: Mapping[str, Any]) -> dict[str, Any]:
    """``resources.requests`` as the API server stores it: limits fill in missing requests."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}
    limits, requests = resources.get("limits"), resources.get("requests")
    return {**(limits if isinstance(limits, dict) else {}), **(requests if isinstance(requests, dict) else {})}


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def asks_extended_resources(pod: Object, resource_names: set[str] | frozenset[str]) -> bool:
    """Whether a container asks for one of ``resource_names`` or an implicit class resource."""
    for container in _containers(pod):
        for resource in _requested(container):
            if resource in resource_names or str(resource).startswith(IMPLICIT_PREFIX):
                return True
    return False


def container_asks(pod: Object, classes: Mapping[str, str]) -> list[ContainerAsk]:
    """The Pod's container requests that a DeviceClass serves, with the request names the scheduler gives them."""
    out = []
    for index, container in enumerate(_containers(pod)):
        requested = _requested(container)
        for position, resource in enumerate(sorted(requested)):
            quantity = _count(requested[resource])
            if resource in classes and quantity > 0:
                out.append(
                    ContainerAsk(
                        container=str(container.get("name") or ""),
                        resource=resource,
                        quantity=quantity,
                        class_name=classes[resource],
                        request=f"container-{index}-request-{position}",
                    )
                )
    return out


def claim_status(pod: Object) -> dict[str, Any] | None:
    status = status_of(pod).get("extendedResourceClaimStatus")
    return status if isinstance(status, dict) else None


def request_mappings(pod: Object) -> list[RequestMapping]:
    status = claim_status(pod) or {}
    mappings = status.get("requestMappings")
    return [
        RequestMapping(str(m.get("containerName") or ""), str(m.get("resourceName") or ""), str(m.get("requestName")))
        for m in mappings if isinstance(m, dict)
    ] if isinstance(mappings, list) else []


def claim_name(pod: Object) -> str | None:
    name = (claim_status(pod) or {}).get("resourceClaimName")
    return str(name) if name else None


def is_extended_claim(claim: Object) -> bool:
    return (meta(claim).get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"


def owned_claim(state: ClusterState, pod: Object) -> Object | None:
    """The claim the scheduler created for the Pod, found before the Pod's status names it."""
    pod_uid = uid_of(pod)
    for claim in state.of_kind("ResourceClaim"):
        owners = meta(claim).get("ownerReferences") or ()
        if is_extended_claim(claim) and any(isinstance(o, dict) and o.get("uid") == pod_uid for o in owners):
            return claim
    return None


def advertised_by_device_plugin(state: ClusterState, resources: Iterable[str]) -> set[str]:
    """Nodes whose ``status.allocatable`` carries any of ``resources`` (a device plugin serves them there)."""
    wanted = set(resources)
    nodes = set()
    for node in state.of_kind("Node"):
        allocatable = status_of(node).get("allocatable")
        if isinstance(allocatable, dict) and any(_count(allocatable.get(r)) > 0 for r in wanted):
            nodes.add(ns_name(node)[1])
    return nodes


def planned_claim(pod: Object, asks: list[ContainerAsk]) -> Object:
    """The claim the scheduler would create for the Pod: one ExactCount request per container ask.

    It is not in the cluster, so it has no UID; its name is the generateName prefix.
    """
    namespace, name = ns_name(pod)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": namespace,
            "name": f"{name}-extended-resources-",
            "uid": "",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": ask.request,
                        "exactly": {
                            "deviceClassName": ask.class_name,
                            "allocationMode": "ExactCount",
                            "count": ask.quantity,
                        },
                    }
                    for ask in sorted(asks, key=lambda a: a.request)
                ]
            }
        },
        "status": {},
    }


def asks_phrase(asks: Iterable[ContainerAsk]) -> str:
    """``container main's nvidia.com/gpu: 2 (DeviceClass gpu.nvidia.com)``, joined."""
    return "; ".join(f"{a.phrase()} (DeviceClass {a.class_name}, request {a.request})" for a in asks)


def asks_evidence(asks: Iterable[ContainerAsk]) -> list[dict[str, Any]]:
    return [
        {
            "kind": "ExtendedResourceRequest",
            "container": a.container,
            "resource": a.resource,
            "quantity": a.quantity,
            "class": a.class_name,
            "request": a.request,
        }
        for a in asks
    ]
