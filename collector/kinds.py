"""The Kubernetes resources Claimline reads, and where the API serves them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    kind: str
    api_version: str
    plural: str
    namespaced: bool

    @property
    def list_path(self) -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        return f"{prefix}/{self.plural}"

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]


DRA = "resource.k8s.io/v1"

# Order matters for collection: claims are read before Pods and Events so those
# can be filtered to the ones that concern claims.
RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("DeviceClass", DRA, "deviceclasses", namespaced=False),
    ResourceType("ResourceSlice", DRA, "resourceslices", namespaced=False),
    ResourceType("ResourceClaimTemplate", DRA, "resourceclaimtemplates", namespaced=True),
    ResourceType("ResourceClaim", DRA, "resourceclaims", namespaced=True),
    ResourceType("Namespace", "v1", "namespaces", namespaced=False),
    ResourceType("Node", "v1", "nodes", namespaced=False),
    ResourceType("Pod", "v1", "pods", namespaced=True),
    ResourceType("Event", "v1", "events", namespaced=True),
)
BY_KIND: dict[str, ResourceType] = {r.kind: r for r in RESOURCE_TYPES}
KINDS: tuple[str, ...] = tuple(BY_KIND)
LIST_KINDS: dict[str, str] = {f"{r.kind}List": r.kind for r in RESOURCE_TYPES}
