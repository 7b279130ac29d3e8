"""The Kubernetes resources Claimline reads, and where the API serves them."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ResourceType:
    kind: str
    api_version: str
    plural: str
    namespaced: bool
    # Older versions of the same group that serve the same shape, tried in order when the API
    # server does not serve ``api_version`` (a 1.36 cluster serves PodGroups as v1alpha3 only).
    fallbacks: tuple[str, ...] = ()
    # A kind a cluster may not serve at all (its feature off, an older Kubernetes): a 404 for every
    # version means there are none, not a failed collection.
    optional: bool = False

    @property
    def api_versions(self) -> tuple[str, ...]:
        return (self.api_version, *self.fallbacks)

    def served_as(self, api_version: str) -> ResourceType:
        """The same resource read at another of its versions."""
        return replace(self, api_version=api_version, fallbacks=())

    @property
    def list_path(self) -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        return f"{prefix}/{self.plural}"

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]


DRA = "resource.k8s.io/v1"
# Workload-aware scheduling: beta (and on by default) in 1.37, alpha before.
SCHEDULING = "scheduling.k8s.io/v1beta1"
SCHEDULING_ALPHA = "scheduling.k8s.io/v1alpha3"

# Order matters for collection: claims are read before Pods and Events so those
# can be filtered to the ones that concern claims.
RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("DeviceClass", DRA, "deviceclasses", namespaced=False),
    ResourceType("ResourceSlice", DRA, "resourceslices", namespaced=False),
    # GA in 1.37; v1beta2 (1.36) and v1alpha3 serve the same shape since 1.35.
    ResourceType(
        "DeviceTaintRule",
        DRA,
        "devicetaintrules",
        namespaced=False,
        fallbacks=("resource.k8s.io/v1beta2", "resource.k8s.io/v1alpha3"),
        optional=True,
    ),
    ResourceType("ResourceClaimTemplate", DRA, "resourceclaimtemplates", namespaced=True),
    ResourceType("ResourceClaim", DRA, "resourceclaims", namespaced=True),
    ResourceType("Namespace", "v1", "namespaces", namespaced=False),
    ResourceType("Node", "v1", "nodes", namespaced=False),
    ResourceType("Workload", SCHEDULING, "workloads", namespaced=True, fallbacks=(SCHEDULING_ALPHA,), optional=True),
    ResourceType("PodGroup", SCHEDULING, "podgroups", namespaced=True, fallbacks=(SCHEDULING_ALPHA,), optional=True),
    ResourceType("Pod", "v1", "pods", namespaced=True),
    ResourceType("Event", "v1", "events", namespaced=True),
)
BY_KIND: dict[str, ResourceType] = {r.kind: r for r in RESOURCE_TYPES}
KINDS: tuple[str, ...] = tuple(BY_KIND)
LIST_KINDS: dict[str, str] = {f"{r.kind}List": r.kind for r in RESOURCE_TYPES}
