"""Builders for Kubernetes objects as ``kubectl get -o json`` prints them.

Shapes follow Kubernetes 1.36 (``resource.k8s.io/v1``) and what the NVIDIA DRA
driver (``gpu.nvidia.com``) publishes. Every builder is deterministic: UIDs are
uuid5 over (kind, namespace, name[, incarnation]) and timestamps are passed in,
so the same call always returns the same object.
"""

from __future__ import annotations

import copy
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

Obj = dict[str, Any]

DRA_API = "resource.k8s.io/v1"
SCHEDULING_API = "scheduling.k8s.io/v1beta1"
GPU_DRIVER = "gpu.nvidia.com"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.10-py3"
KUBELET_VERSION = "v1.36.1"

# For objects whose creation time does not matter to a test (classes, templates, namespaces).
DEFAULT_CREATED = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

_UID_NAMESPACE = uuid.UUID("6f1c3c52-9a1e-4f5e-9d55-6c1a8e7d2b10")

# Bus IDs of the eight SXM GPUs on an HGX board, in the order nvidia-smi lists them.
_HGX_PCI_BUS_IDS = (
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
)

A100_40GB: dict[str, Any] = {
    "product": "NVIDIA A100-SXM4-40GB",
    "memory": "40Gi",
    "architecture": "Ampere",
    "cuda_compute": "8.0.0",
}
A100_80GB: dict[str, Any] = {
    "product": "NVIDIA A100-SXM4-80GB",
    "memory": "80Gi",
    "architecture": "Ampere",
    "cuda_compute": "8.0.0",
}
H100_80GB: dict[str, Any] = {
    "product": "NVIDIA H100 80GB HBM3",
    "memory": "80Gi",
    "architecture": "Hopper",
    "cuda_compute": "9.0.0",
}

_OWNER_API_VERSIONS = {
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Deployment": "apps/v1",
    "Node": "v1",
    "Pod": "v1",
    "PodGroup": SCHEDULING_API,
    "Workload": SCHEDULING_API,
}


# --- identity and time -------------------------------------------------------------------------


def object_uid(kind: str, namespace: str | None, name: str, incarnation: int | str = 0) -> str:
    """The UID of an object; a non-zero ``incarnation`` models deleting and recreating it."""
    key = f"{kind}/{namespace or ''}/{name}"
    if incarnation:
        key += f"#{incarnation}"
    return str(uuid.uuid5(_UID_NAMESPACE, key))


def ts(at: datetime) -> str:
    """RFC 3339 with a ``Z``, second precision, as the API server writes metav1.Time."""
    if at.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (UTC)")
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hex(*parts: object, length: int = 16) -> str:
    digest = uuid.uuid5(_UID_NAMESPACE, "/".join(str(p) for p in parts)).hex
    return (digest * 4)[:length]


_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet


def name_suffix(*parts: object, length: int = 5) -> str:
    """A deterministic stand-in for the random suffix the apiserver appends to generateName."""
    n = zlib.crc32("/".join(str(p) for p in parts).encode())
    out = []
    for _ in range(length):
        n, r = divmod(n, len(_NAME_ALPHABET))
        out.append(_NAME_ALPHABET[r])
        n = n * 7919 + r + 1
    return "".join(out)


def node_ip(name: str) -> str:
    n = zlib.crc32(name.encode())
    return f"10.0.{(n >> 8) % 250 + 1}.{n % 250 + 2}"


def _finish(obj: Obj) -> Obj:
    # Content-derived, so an unchanged object keeps its resourceVersion across snapshots
    # and a changed one gets a new one, like etcd (minus monotonicity, which nothing relies on).
    meta = obj["metadata"]
    meta["resourceVersion"] = ""
    digest = zlib.crc32(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))
    meta["resourceVersion"] = str(1_000_000 + digest % 9_000_000)
    return obj


def _metadata(
    kind: str,
    name: str,
    created: datetime,
    namespace: str | None = None,
    *,
    incarnation: int | str = 0,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    meta: Obj = {
        "name": name,
        "uid": uid or object_uid(kind, namespace, name, incarnation),
        "resourceVersion": "",
        "creationTimestamp": ts(created),
    }
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(sorted(labels.items()))
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    return meta


def owner_reference(owner: Obj | tuple[str, ...], namespace: str | None = None) -> Obj:
    """An ownerReference to an object dict, or to ``(kind, name)`` / ``(kind, name, uid)``."""
    if isinstance(owner, dict):
        kind = owner["kind"]
        name = owner["metadata"]["name"]
        uid = owner["metadata"]["uid"]
        api_version = owner.get("apiVersion") or _OWNER_API_VERSIONS.get(kind, "v1")
    else:
        kind, name = owner[0], owner[1]
        uid = owner[2] if len(owner) > 2 else object_uid(kind, namespace, name)
        api_version = _OWNER_API_VERSIONS.get(kind, "v1")
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _node_selector_for(node_name: str) -> Obj:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}


def _as_node_selector(selector: Mapping[str, Any]) -> Obj:
    """Accept a NodeSelector as is, or a plain label map turned into one."""
    if "nodeSelectorTerms" in selector:
        return dict(selector)
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(selector.items())]}
        ]
    }


# --- cluster-scoped objects --------------------------------------------------------------------


def namespace(
    name: str,
    labels: Mapping[str, str] | None = None,
    created: datetime = DEFAULT_CREATED,
    *,
    admin_access: bool = False,
) -> Obj:
    all_labels = {"kubernetes.io/metadata.name": name, **(labels or {})}
    if admin_access:
        all_labels[ADMIN_ACCESS_LABEL] = "true"
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _metadata("Namespace", name, created, labels=all_labels),
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
    )


def node(
    name: str,
    created: datetime,
    ready: bool = True,
    labels: Mapping[str, str] | None = None,
    extended_gpus: int = 0,
    *,
    heartbeat: datetime | None = None,
    ready_since: datetime | None = None,
    incarnation: int | str = 0,
    cpu: str = "95",
    memory: str = "1031745Mi",
    taints: Sequence[Obj] | None = None,
    unschedulable: bool = False,
) -> Obj:
    """A Node; ``extended_gpus`` > 0 makes it a device-plugin node advertising ``nvidia.com/gpu``."""
    all_labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        **(labels or {}),
    }
    capacity = {"cpu": cpu, "ephemeral-storage": "3584Gi", "memory": memory, "pods": "110"}
    if extended_gpus:
        capacity["nvidia.com/gpu"] = str(extended_gpus)
    heartbeat = heartbeat or created
    since = ts(ready_since or created)
    pressure = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions: list[Obj] = []
    for ctype, reason, message in pressure:
        conditions.append(
            {
                "type": ctype,
                "status": "False" if ready else "Unknown",
                "reason": reason if ready else "NodeStatusUnknown",
                "lastHeartbeatTime": ts(heartbeat),
                "lastTransitionTime": ts(created) if ready else since,
                "message": message if ready else "Kubelet stopped posting node status.",
            }
        )
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready else "Unknown",
            "reason": "KubeletReady" if ready else "NodeStatusUnknown",
            "lastHeartbeatTime": ts(heartbeat),
            "lastTransitionTime": since,
            "message": "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
        }
    )
    all_taints = list(taints or [])
    if not ready:
        # The node lifecycle controller adds these once heartbeats stop.
        all_taints += [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": since},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": since},
        ]
    spec: Obj = {"providerID": f"gce://claimline-demo/us-central1-a/{name}"}
    if unschedulable:
        spec["unschedulable"] = True
    if all_taints:
        spec["taints"] = all_taints
    uid = object_uid("Node", None, name, incarnation)
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": _metadata("Node", name, created, uid=uid, labels=all_labels),
            "spec": spec,
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": node_ip(name)},
                    {"type": "Hostname", "address": name},
                ],
                "allocatable": dict(capacity),
                "capacity": capacity,
                "conditions": conditions,
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": str(uuid.uuid5(_UID_NAMESPACE, f"boot/{uid}")),
                    "containerRuntimeVersion": "containerd://2.1.4",
                    "kernelVersion": "6.8.0-1031-gcp",
                    "kubeProxyVersion": "",
                    "kubeletVersion": KUBELET_VERSION,
                    "machineID": _hex("machine", name, length=32),
                    "operatingSystem": "linux",
                    "osImage": "Ubuntu 24.04.3 LTS",
                    "systemUUID": str(uuid.uuid5(_UID_NAMESPACE, f"system/{name}")),
                },
            },
        }
    )


# --- inventory ---------------------------------------------------------------------------------


def taint(key: str, effect: str = "NoSchedule", value: str | None = None, time_added: datetime | None = None) -> Obj:
    """A DeviceTaint (on a ResourceSlice device) or the same shape for a Node taint."""
    out: Obj = {"key": key}
    if value is not None:
        out["value"] = value
    out["effect"] = effect
    if time_added is not None:
        out["timeAdded"] = ts(time_added)
    return out


def toleration(
    key: str,
    operator: str = "Equal",
    value: str | None = None,
    effect: str | None = None,
    toleration_seconds: int | None = None,
) -> Obj:
    out: Obj = {"key": key, "operator": operator}
    if value is not None:
        out["value"] = value
    if effect is not None:
        out["effect"] = effect
    if toleration_seconds is not None:
        out["tolerationSeconds"] = toleration_seconds
    return out


def _typed(value: Any) -> Obj:
    """A DeviceAttribute: dicts are taken as already typed ({"version": ...})."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def _index_of(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else zlib.crc32(name.encode()) % 8


def gpu_device(
    name: str,
    uuid: str | None = None,
    product: str = "NVIDIA A100-SXM4-40GB",
    memory: str = "40Gi",
    architecture: str = "Ampere",
    cuda_compute: str = "8.0.0",
    driver_version: str = "580.126.20",
    pci_bus_id: str | None = None,
    taints: Sequence[Obj] | None = None,
    extra_attributes: Mapping[str, Any] | None = None,
    *,
    node: str | None = None,
    cuda_driver_version: str = "13.0.0",
    extra_capacity: Mapping[str, str] | None = None,
) -> Obj:
    """A full GPU as the NVIDIA driver advertises it; ``node`` salts the default UUID."""
    if uuid is None:
        uuid = "GPU-" + str(_uuid5(f"gpu/{node or ''}/{name}"))
    if pci_bus_id is None:
        i = _index_of(name)
        pci_bus_id = _HGX_PCI_BUS_IDS[i] if i < len(_HGX_PCI_BUS_IDS) else f"0000:{(0x18 + 0x11 * i) % 256:02x}:00.0"
    attributes: dict[str, Any] = {
        "addressingMode": "HMM",
        "architecture": architecture,
        "brand": "Nvidia",
        "cudaComputeCapability": {"version": cuda_compute},
        "cudaDriverVersion": {"version": cuda_driver_version},
        "driverVersion": {"version": driver_version},
        "productName": product,
        PCI_BUS_ID_ATTRIBUTE: pci_bus_id,
        "type": "gpu",
        "uuid": uuid,
        **(extra_attributes or {}),
    }
    capacity = {"memory": memory, **(extra_capacity or {})}
    device: Obj = {
        "name": name,
        "attributes": {k: _typed(v) for k, v in sorted(attributes.items())},
        "capacity": {k: {"value": v} for k, v in sorted(capacity.items())},
    }
    if taints:
        device["taints"] = [dict(t) for t in taints]
    return device


def _uuid5(key: str) -> uuid.UUID:
    return uuid.uuid5(_UID_NAMESPACE, key)


def gpu_devices(node: str, count: int = 8, model: Mapping[str, Any] | None = None, **kwargs: Any) -> list[Obj]:
    """``gpu-0`` … ``gpu-{count-1}`` of one model (e.g. ``H100_80GB``) on ``node``."""
    params = {**(model or A100_40GB), **kwargs}
    return [gpu_device(f"gpu-{i}", node=node, **params) for i in range(count)]


def resource_slice(
    node_name: str | None,
    devices: Sequence[Obj],
    driver: str = GPU_DRIVER,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    created: datetime = DEFAULT_CREATED,
    all_nodes: bool = False,
    node_selector: Mapping[str, Any] | None = None,
    name: str | None = None,
    *,
    node_uid: str | None = None,
) -> Obj:
    """A ResourceSlice; node-local unless ``all_nodes`` or ``node_selector`` is given."""
    pool_name = pool or node_name
    if not pool_name:
        raise ValueError("a slice without a node needs a pool name")
    if name is None:
        first = devices[0]["name"] if devices else ""
        name = f"{node_name or pool_name}-{driver}-{name_suffix(pool_name, driver, generation, first)}"
    meta = _metadata("ResourceSlice", name, created)
    spec: Obj = {"driver": driver}
    local = not all_nodes and node_selector is None
    if local:
        if not node_name:
            raise ValueError("a node-local slice needs node_name")
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node_name,
                "uid": node_uid or object_uid("Node", None, node_name),
                "controller": True,
            }
        ]
        spec["nodeName"] = node_name
    elif all_nodes:
        spec["allNodes"] = True
    else:
        assert node_selector is not None
        spec["nodeSelector"] = _as_node_selector(node_selector)
    spec["pool"] = {"name": pool_name, "generation": generation, "resourceSliceCount": slice_count}
    spec["devices"] = list(devices)
    return _finish({"apiVersion": DRA_API, "kind": "ResourceSlice", "metadata": meta, "spec": spec})


# --- partitionable devices, shared capacity, constraints ------------------------------------------


def _counters(counters: Mapping[str, str]) -> Obj:
    return {name: {"value": value} for name, value in counters.items()}


def counter_set(name: str, counters: Mapping[str, str]) -> Obj:
    """An entry of ResourceSlice ``spec.sharedCounters``: ``counter_set("gpu-0-counters", {"memory": "80Gi"})``."""
    return {"name": name, "counters": _counters(counters)}


def counter_slice(
    node_name: str | None,
    counter_sets: Sequence[Obj],
    driver: str = GPU_DRIVER,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 2,
    created: datetime = DEFAULT_CREATED,
    name: str | None = None,
    **kwargs: Any,
) -> Obj:
    """A slice of a pool that lists only counter sets (a slice lists devices or counter sets, not both).

    ``slice_count`` defaults to 2: this slice plus one listing the devices that consume them.
    """
    pool_name = pool or node_name or ""
    name = name or f"{node_name or pool_name}-{driver}-counters-{name_suffix(pool_name, driver, generation)}"
    out = resource_slice(node_name, [], driver, pool, generation, slice_count, created, name=name, **kwargs)
    del out["spec"]["devices"]
    out["spec"]["sharedCounters"] = [dict(c) for c in counter_sets]
    return _finish(out)


def consumes_counters(counter_set_name: str, counters: Mapping[str, str]) -> Obj:
    """An entry of a device's ``consumesCounters``."""
    return {"counterSet": counter_set_name, "counters": _counters(counters)}


def with_counters(device: Obj, *consumptions: Obj) -> Obj:
    """A device (e.g. from ``gpu_device``) that draws on counter sets of its pool."""
    return {**device, "consumesCounters": [dict(c) for c in consumptions]}


MIG_3G_40GB = {"profile": "3g.40gb", "memory": "40Gi", "compute_slices": "3"}


def partitioned_gpu(
    node: str,
    index: int = 0,
    model: Mapping[str, Any] | None = None,
    partitions: int = 2,
    profile: Mapping[str, str] | None = None,
    compute_slices: str = "7",
) -> tuple[Obj, list[Obj]]:
    """One GPU advertised whole and as ``partitions`` MIG devices, all drawing on one counter set.

    Returns (counter set, devices): ``gpu-{index}`` consumes the whole set,
    ``gpu-{index}-mig-3g-{i}`` a profile's share of it.
    """
    params = dict(model or H100_80GB)
    prof = dict(profile or MIG_3G_40GB)
    set_name = f"gpu-{index}-counters"
    everything = {"memory": params["memory"], "compute-slices": compute_slices}
    whole = gpu_device(f"gpu-{index}", node=node, **params)
    devices = [with_counters(whole, consumes_counters(set_name, everything))]
    parent_uuid = whole["attributes"]["uuid"]["string"]
    short = prof["profile"].split(".", 1)[0]
    for i in range(partitions):
        name = f"gpu-{index}-mig-{short}-{i}"
        mig = gpu_device(
            name,
            uuid="MIG-" + str(_uuid5(f"mig/{node}/{name}")),
            node=node,
            pci_bus_id=whole["attributes"][PCI_BUS_ID_ATTRIBUTE]["string"],
            extra_attributes={"type": "mig", "profile": prof["profile"], "parentUUID": parent_uuid},
            **{**params, "memory": prof["memory"]},
        )
        use = consumes_counters(set_name, {"memory": prof["memory"], "compute-slices": prof["compute_slices"]})
        devices.append(with_counters(mig, use))
    return counter_set(set_name, everything), devices


def request_policy(
    default: str | None = None,
    min: str | None = None,  # noqa: A002 - the API's field name
    max: str | None = None,  # noqa: A002
    step: str | None = None,
    valid_values: Sequence[str] | None = None,
) -> Obj:
    """A capacity's ``requestPolicy``: ``validValues`` or ``validRange`` (min/max/step), and a ``default``."""
    out: Obj = {}
    if default is not None:
        out["default"] = default
    if valid_values is not None:
        out["validValues"] = list(valid_values)
    bounds = {k: v for k, v in (("min", min), ("max", max), ("step", step)) if v is not None}
    if bounds:
        out["validRange"] = bounds
    return out


def shared_gpu(
    name: str,
    node: str,
    memory: str = "80Gi",
    policy: Obj | None = None,
    model: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Obj:
    """A GPU with ``allowMultipleAllocations``: claims get shares of its ``memory`` capacity."""
    device = gpu_device(name, node=node, **{**dict(model or H100_80GB), "memory": memory, **kwargs})
    capacity: Obj = {"value": memory}
    if policy:
        capacity["requestPolicy"] = dict(policy)
    device["capacity"] = {**device["capacity"], "memory": capacity}
    device["allowMultipleAllocations"] = True
    return device


def with_capacity(request_obj: Obj, requests: Mapping[str, str]) -> Obj:
    """A request (``request()``/``subrequest()`` output) asking for capacity: ``{"memory": "20Gi"}``."""
    out = dict(request_obj)
    body = dict(out["exactly"]) if "exactly" in out else out
    body["capacity"] = {"requests": dict(requests)}
    if "exactly" in out:
        out["exactly"] = body
    return out


def shared_result(
    request_name: str,
    pool: str,
    device: str,
    consumed: Mapping[str, str],
    share_id: str | None = None,
    driver: str = GPU_DRIVER,
) -> Obj:
    """An allocation result holding a share of a device (for ``claim(allocated=[...])``)."""
    share = share_id or str(_uuid5(f"share/{driver}/{pool}/{device}/{request_name}/{sorted(consumed.items())}"))
    return {
        "request": request_name,
        "driver": driver,
        "pool": pool,
        "device": device,
        "shareID": share,
        "consumedCapacity": dict(consumed),
    }


def match_attribute(attribute: str, requests: Sequence[str] = ()) -> Obj:
    """A claim constraint: the devices of ``requests`` (all, when empty) share the attribute's value."""
    out: Obj = {"matchAttribute": attribute}
    if requests:
        out["requests"] = list(requests)
    return out


def distinct_attribute(attribute: str, requests: Sequence[str] = ()) -> Obj:
    """A claim constraint: the devices of ``requests`` (all, when empty) each have a different value."""
    out: Obj = {"distinctAttribute": attribute}
    if requests:
        out["requests"] = list(requests)
    return out


def gpu_type_selector(driver: str = GPU_DRIVER) -> str:
    return f"device.driver == '{driver}' && device.attributes['{driver}'].type == 'gpu'"


def _selectors(expressions: Iterable[str]) -> list[Obj]:
    return [{"cel": {"expression": e}} for e in expressions]


def device_class(
    name: str = GPU_DRIVER,
    selectors: Sequence[str] | None = None,
    created: datetime = DEFAULT_CREATED,
    extended_resource_name: str | None = None,
    config: Sequence[Obj] | None = None,
    *,
    driver: str = GPU_DRIVER,
) -> Obj:
    """A DeviceClass; ``selectors=None`` is the driver's own "every full GPU" selector."""
    exprs = [gpu_type_selector(driver)] if selectors is None else list(selectors)
    spec: Obj = {}
    if exprs:
        spec["selectors"] = _selectors(exprs)
    if config:
        spec["config"] = [dict(c) for c in config]
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return _finish(
        {
            "apiVersion": DRA_API,
            "kind": "DeviceClass",
            "metadata": _metadata("DeviceClass", name, created),
            "spec": spec,
        }
    )


# --- requests, templates, claims ---------------------------------------------------------------


def _exact(
    device_class: str,
    count: int,
    selectors: Iterable[str],
    allocation_mode: str,
    tolerations: Sequence[Obj] | None,
) -> Obj:
    out: Obj = {"deviceClassName": device_class, "allocationMode": allocation_mode}
    if allocation_mode == "ExactCount":
        out["count"] = count
    sel = _selectors(selectors)
    if sel:
        out["selectors"] = sel
    if tolerations:
        out["tolerations"] = [dict(t) for t in tolerations]
    return out


def request(
    name: str = "gpu",
    device_class: str = GPU_DRIVER,
    count: int = 1,
    selectors: Iterable[str] = (),
    allocation_mode: str = "ExactCount",
    admin_access: bool = False,
    tolerations: Sequence[Obj] | None = None,
) -> Obj:
    """A DeviceRequest with ``exactly`` (``allocation_mode="All"`` drops the count)."""
    exactly = _exact(device_class, count, selectors, allocation_mode, tolerations)
    if admin_access:
        exactly["adminAccess"] = True
    return {"name": name, "exactly": exactly}


def subrequest(
    name: str,
    device_class: str = GPU_DRIVER,
    count: int = 1,
    selectors: Iterable[str] = (),
    allocation_mode: str = "ExactCount",
    tolerations: Sequence[Obj] | None = None,
) -> Obj:
    return {"name": name, **_exact(device_class, count, selectors, allocation_mode, tolerations)}


def first_available_request(name: str, subrequests: Sequence[Obj]) -> Obj:
    """A prioritized-list request; results name the chosen one as ``<name>/<subrequest>``."""
    subs = []
    for s in subrequests:
        if "exactly" in s:  # accept request() output too; subrequests cannot ask for admin access
            subs.append({"name": s["name"], **{k: v for k, v in s["exactly"].items() if k != "adminAccess"}})
        else:
            subs.append(dict(s))
    return {"name": name, "firstAvailable": subs}


def claim_spec(
    requests: Sequence[Obj], constraints: Sequence[Obj] | None = None, config: Sequence[Obj] | None = None
) -> Obj:
    devices: Obj = {"requests": [dict(r) for r in requests]}
    if constraints:
        devices["constraints"] = [dict(c) for c in constraints]
    if config:
        devices["config"] = [dict(c) for c in config]
    return {"devices": devices}


def claim_template(
    namespace: str,
    name: str,
    requests: Sequence[Obj],
    created: datetime = DEFAULT_CREATED,
    *,
    constraints: Sequence[Obj] | None = None,
    config: Sequence[Obj] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    return _finish(
        {
            "apiVersion": DRA_API,
            "kind": "ResourceClaimTemplate",
            "metadata": _metadata("ResourceClaimTemplate", name, created, namespace, labels=labels),
            "spec": {"spec": claim_spec(requests, constraints, config)},
        }
    )


def generate_name(pod_name: str, claim_name: str) -> str:
    """The ``generateName`` the resourceclaim controller uses for a template claim."""
    base = f"{pod_name}-{claim_name}-"
    max_base = 57  # leaves room for the apiserver's 5 random characters in 63
    if len(base) > max_base:
        # Mirrors the controller: shorten both parts proportionally (and lose the trailing dash).
        base = (
            pod_name[: len(pod_name) * max_base // len(base)]
            + "-"
            + claim_name[: len(claim_name) * max_base // len(base)]
        )
    return base


def generated_claim_name(pod_name: str, claim_name: str, pod_uid: str) -> str:
    """``<pod>-<podClaim>-<first 5 of the pod UID>``, the convention of the example scenarios."""
    return generate_name(pod_name, claim_name) + pod_uid[:5]


def _consumer(ref: Obj | tuple[str, str]) -> Obj:
    if isinstance(ref, dict):
        if "metadata" in ref:
            return {"resource": "pods", "name": ref["metadata"]["name"], "uid": ref["metadata"]["uid"]}
        return dict(ref)
    name, uid = ref
    return {"resource": "pods", "name": name, "uid": uid}


def _result(entry: Obj | tuple[str, str, str], driver: str, admin_access: bool) -> Obj:
    if isinstance(entry, dict):
        out = {"request": entry["request"], "driver": entry.get("driver", driver)}
        out.update({k: v for k, v in entry.items() if k not in ("request", "driver")})
    else:
        req, pool, dev = entry
        out = {"request": req, "driver": driver, "pool": pool, "device": dev}
    if admin_access:
        out.setdefault("adminAccess", True)
    return out


def device_status(
    pool: str,
    device: str,
    conditions: Sequence[Obj] = (),
    driver: str = GPU_DRIVER,
    data: Obj | None = None,
) -> Obj:
    """An entry of ResourceClaim ``status.devices`` (reported by the driver)."""
    out: Obj = {"driver": driver, "pool": pool, "device": device}
    if conditions:
        out["conditions"] = [dict(c) for c in conditions]
    if data is not None:
        out["data"] = data
    return out


def condition(type_: str, status: bool | str, at: datetime, reason: str, message: str = "") -> Obj:
    """A metav1.Condition (device status conditions)."""
    return {
        "type": type_,
        "status": status if isinstance(status, str) else ("True" if status else "False"),
        "lastTransitionTime": ts(at),
        "reason": reason,
        "message": message,
    }


def claim(
    namespace: str,
    name: str,
    requests: Sequence[Obj],
    created: datetime,
    allocated: Sequence[Obj | tuple[str, str, str]] | None = None,
    driver: str = GPU_DRIVER,
    node: str | None = None,
    allocated_at: datetime | None = None,
    reserved_for: Sequence[Obj | tuple[str, str]] | None = None,
    owner_pod: Obj | None = None,
    deletion_timestamp: datetime | None = None,
    finalizers: Sequence[str] | None = None,
    device_conditions: Sequence[Obj | tuple[str, str, Sequence[Obj]]] | None = None,
    admin_access: bool = False,
    *,
    pod_claim_name: str | None = None,
    incarnation: int | str = 0,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    constraints: Sequence[Obj] | None = None,
    config: Sequence[Obj] | None = None,
    node_selector: Mapping[str, Any] | None = None,
) -> Obj:
    """A ResourceClaim.

    ``allocated`` entries are ``(request, pool, device)`` or result dicts. ``node``
    defaults to the first result's pool, since the NVIDIA driver names pools after
    nodes; pass ``node_selector={}`` for a claim allocated from a non-local pool.
    ``owner_pod`` makes it a template-generated claim of that Pod.
    """
    meta = _metadata("ResourceClaim", name, created, namespace, incarnation=incarnation, uid=uid, labels=labels)
    if owner_pod is not None:
        if pod_claim_name is None:
            pod_claim_name = _pod_claim_name_for(owner_pod, name)
        meta["ownerReferences"] = [owner_reference(owner_pod)]
        meta["annotations"] = {POD_CLAIM_NAME_ANNOTATION: pod_claim_name}
        meta["generateName"] = generate_name(owner_pod["metadata"]["name"], pod_claim_name)
    if deletion_timestamp is not None:
        meta["deletionTimestamp"] = ts(deletion_timestamp)
        meta["deletionGracePeriodSeconds"] = 0
    if finalizers is None:
        finalizers = [DELETE_PROTECTION] if allocated else []
    if finalizers:
        meta["finalizers"] = list(finalizers)

    status: Obj = {}
    if allocated:
        results = [_result(e, driver, admin_access) for e in allocated]
        allocation: Obj = {"devices": {"results": results}}
        if node_selector is not None:
            if node_selector:
                allocation["nodeSelector"] = _as_node_selector(node_selector)
        else:
            allocation["nodeSelector"] = _node_selector_for(node or results[0]["pool"])
        allocation["allocationTimestamp"] = ts(allocated_at or created)
        status["allocation"] = allocation
    if reserved_for:
        status["reservedFor"] = [_consumer(r) for r in reserved_for]
    if device_conditions:
        status["devices"] = [
            dict(d) if isinstance(d, dict) else device_status(d[0], d[1], d[2], driver) for d in device_conditions
        ]
    return _finish(
        {
            "apiVersion": DRA_API,
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": claim_spec(requests, constraints, config),
            "status": status,
        }
    )


def _pod_claim_name_for(pod_obj: Obj, claim_name: str) -> str:
    entries = pod_obj.get("spec", {}).get("resourceClaims", [])
    uid = pod_obj["metadata"]["uid"]
    templated = [e["name"] for e in entries if e.get("resourceClaimTemplateName")]
    for pc in templated:
        if generated_claim_name(pod_obj["metadata"]["name"], pc, uid) == claim_name:
            return pc
    return templated[0] if templated else "gpu"


def template_claim(
    template: Obj,
    pod_obj: Obj,
    pod_claim_name: str | None = None,
    created: datetime | None = None,
    **kwargs: Any,
) -> Obj:
    """The claim the resourceclaim controller generates for ``pod_obj`` from ``template``."""
    pod_meta = pod_obj["metadata"]
    if pod_claim_name is None:
        wanted = template["metadata"]["name"]
        matches = [
            e["name"] for e in pod_obj["spec"].get("resourceClaims", []) if e.get("resourceClaimTemplateName") == wanted
        ]
        pod_claim_name = matches[0] if matches else "gpu"
    spec = template["spec"]["spec"]["devices"]
    created = created or datetime.fromisoformat(pod_meta["creationTimestamp"].replace("Z", "+00:00"))
    return claim(
        pod_meta["namespace"],
        generated_claim_name(pod_meta["name"], pod_claim_name, pod_meta["uid"]),
        spec["requests"],
        created,
        owner_pod=pod_obj,
        pod_claim_name=pod_claim_name,
        constraints=spec.get("constraints"),
        config=spec.get("config"),
        **kwargs,
    )


# --- pods ----------------------------------------------------------------------------------------


def _pod_condition(
    type_: str, status: bool, at: datetime, reason: str | None = None, message: str | None = None
) -> Obj:
    out: Obj = {
        "type": type_,
        "status": "True" if status else "False",
        "lastProbeTime": None,
        "lastTransitionTime": ts(at),
    }
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def scheduled(at: datetime) -> Obj:
    return _pod_condition("PodScheduled", True, at)


def unschedulable(at: datetime, message: str) -> Obj:
    return _pod_condition("PodScheduled", False, at, "Unschedulable", message)


def ready_to_start(at: datetime, status: bool = True) -> Obj:
    """PodReadyToStartContainers: the sandbox exists, which needs prepared DRA resources."""
    return _pod_condition("PodReadyToStartContainers", status, at)


def initialized(at: datetime, reason: str | None = None) -> Obj:
    return _pod_condition("Initialized", True, at, reason)


def ready(at: datetime, status: bool = True, reason: str | None = None, container: str = "main") -> Obj:
    if not status and reason is None:
        reason = "ContainersNotReady"
    message = f"containers with unready status: [{container}]" if reason == "ContainersNotReady" else None
    return _pod_condition("Ready", status, at, reason, message)


def containers_ready(at: datetime, status: bool = True, reason: str | None = None, container: str = "main") -> Obj:
    if not status and reason is None:
        reason = "ContainersNotReady"
    message = f"containers with unready status: [{container}]" if reason == "ContainersNotReady" else None
    return _pod_condition("ContainersReady", status, at, reason, message)


def running_conditions(scheduled_at: datetime, started_at: datetime) -> list[Obj]:
    """The conditions of a Running, Ready pod, in the order kubelet writes them."""
    return [
        ready_to_start(started_at),
        initialized(scheduled_at),
        ready(started_at),
        containers_ready(started_at),
        scheduled(scheduled_at),
    ]


def disruption_target(
    at: datetime,
    reason: str = "DeletionByDeviceTaintManager",
    message: str = "Device Taint manager: deleting due to NoExecute taint",
) -> Obj:
    """The DisruptionTarget condition a controller sets on a Pod it is about to delete (here: the device
    taint eviction controller)."""
    return _pod_condition("DisruptionTarget", True, at, reason, message)


def stuck_conditions(scheduled_at: datetime, sandbox_ready: bool, at: datetime | None = None) -> list[Obj]:
    """A scheduled pod whose container never became ready (sandbox ready or not)."""
    at = at or scheduled_at
    return [
        ready_to_start(at, sandbox_ready),
        initialized(scheduled_at),
        ready(scheduled_at, False),
        containers_ready(scheduled_at, False),
        scheduled(scheduled_at),
    ]


def completed_conditions(scheduled_at: datetime, finished_at: datetime) -> list[Obj]:
    return [
        ready_to_start(finished_at, False),
        initialized(scheduled_at, "PodCompleted"),
        ready(finished_at, False, "PodCompleted"),
        containers_ready(finished_at, False, "PodCompleted"),
        scheduled(scheduled_at),
    ]


def state_running(started_at: datetime) -> Obj:
    return {"running": {"startedAt": ts(started_at)}}


def state_waiting(reason: str = "ContainerCreating", message: str | None = None) -> Obj:
    waiting: Obj = {"reason": reason}
    if message:
        waiting["message"] = message
    return {"waiting": waiting}


def state_terminated(started_at: datetime, finished_at: datetime, exit_code: int = 0, reason: str | None = None) -> Obj:
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason or ("Completed" if exit_code == 0 else "Error"),
            "startedAt": ts(started_at),
            "finishedAt": ts(finished_at),
        }
    }


def resource_health(
    pod_claim: str,
    request_name: str | None,
    devices: Sequence[tuple[str, str, str]],
    health: str = "Healthy",
    message: str | None = None,
) -> Obj:
    """A containerStatuses[].allocatedResourcesStatus entry for a DRA claim (KEP-4680).

    Named ``claim:<pod claim>/<request>``, or ``claim:<pod claim>`` when the container's claim entry names
    no request (``request_name`` None); ``message`` (since 1.36) is kubelet's text for every device.
    """
    resources = []
    for d, p, n in devices:
        entry: Obj = {"resourceID": f"{d}/{p}/{n}", "health": health}
        if message is not None:
            entry["message"] = message
        resources.append(entry)
    name = f"claim:{pod_claim}/{request_name}" if request_name else f"claim:{pod_claim}"
    return {"name": name, "resources": resources}


def _claim_source(pod_claim: str, source: Mapping[str, str]) -> Obj:
    entry: Obj = {"name": pod_claim}
    if "template" in source:
        entry["resourceClaimTemplateName"] = source["template"]
    elif "claim" in source:
        entry["resourceClaimName"] = source["claim"]
    else:
        entry.update(source)
    return entry


def pod(
    namespace: str,
    name: str,
    created: datetime,
    claims: Sequence[tuple[str, Mapping[str, str]]] = (("gpu", {"template": "gpu"}),),
    node_name: str | None = None,
    phase: str = "Pending",
    conditions: Sequence[Obj] | None = None,
    container_state: Obj | None = None,
    restart_count: int = 0,
    claim_statuses: Sequence[Obj] | Mapping[str, str] | None = None,
    incarnation: int | str = 0,
    owner: Obj | tuple[str, ...] | None = None,
    allocated_resources_status: Sequence[Obj] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    image: str = DEFAULT_IMAGE,
    command: Sequence[str] | None = ("python", "train.py"),
    container_name: str = "main",
    cpu: str = "8",
    memory: str = "64Gi",
    restart_policy: str = "Always",
    last_state: Obj | None = None,
    ready_container: bool | None = None,
    uid: str | None = None,
    deletion_timestamp: datetime | None = None,
    pod_group: str | None = None,
    scheduling_gates: Sequence[str] = (),
    grace_period: int = 30,
) -> Obj:
    """A Pod with one container using every pod-level claim.

    ``pod_group`` makes it a member of that PodGroup (``spec.schedulingGroup``, a gang when the group says so).

    ``claims`` entries are ``(podClaimName, {"template": t})`` or ``(podClaimName, {"claim": c})``.
    ``claim_statuses=None`` fills ``status.resourceClaimStatuses`` for template claims the way
    the resourceclaim controller does; pass ``[]`` when the controller could not create them.
    """
    pod_uid = uid or object_uid("Pod", namespace, name, incarnation)
    meta = _metadata("Pod", name, created, namespace, uid=pod_uid, labels=labels or {"app": name.rsplit("-", 1)[0]})
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner, namespace)]
    if deletion_timestamp is not None:
        meta["deletionTimestamp"] = ts(deletion_timestamp)
        meta["deletionGracePeriodSeconds"] = grace_period

    resources: Obj = {}
    if claims:
        resources["claims"] = [{"name": pc} for pc, _ in claims]
    resources["requests"] = {"cpu": cpu, "memory": memory}
    container: Obj = {"name": container_name, "image": image}
    if command:
        container["command"] = list(command)
    container["resources"] = resources
    spec: Obj = {"containers": [container]}
    if claims:
        spec["resourceClaims"] = [_claim_source(pc, src) for pc, src in claims]
    spec["restartPolicy"] = restart_policy
    spec["schedulerName"] = "default-scheduler"
    spec["serviceAccountName"] = "default"
    if node_name:
        spec["nodeName"] = node_name
    if pod_group:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    if scheduling_gates:
        spec["schedulingGates"] = [{"name": g} for g in scheduling_gates]

    status: Obj = {
        "phase": phase,
        "conditions": [dict(c) for c in (conditions or [])],
        "qosClass": "Burstable",
    }
    if container_state is None and node_name and phase == "Pending":
        container_state = state_waiting("ContainerCreating")
    if container_state is not None:
        has_container = "running" in container_state or "terminated" in container_state
        is_running = "running" in container_state
        cstatus: Obj = {
            "name": container_name,
            "image": image,
            "imageID": f"{image.split(':')[0]}@sha256:{_hex('image', image, length=64)}" if has_container else "",
        }
        if has_container:
            cstatus["containerID"] = f"containerd://{_hex('container', pod_uid, restart_count, length=64)}"
        cstatus["ready"] = is_running if ready_container is None else ready_container
        cstatus["restartCount"] = restart_count
        cstatus["started"] = is_running
        cstatus["state"] = container_state
        if last_state:
            cstatus["lastState"] = last_state
        if allocated_resources_status:
            cstatus["allocatedResourcesStatus"] = [dict(a) for a in allocated_resources_status]
        status["containerStatuses"] = [cstatus]
    if node_name:
        ip = node_ip(node_name)
        status["hostIP"] = ip
        status["hostIPs"] = [{"ip": ip}]
        if phase in ("Running", "Succeeded", "Failed") or (container_state and "running" in container_state):
            h = zlib.crc32(pod_uid.encode())
            pod_ip = f"10.{64 + zlib.crc32(node_name.encode()) % 64}.{(h >> 8) % 250}.{h % 250 + 2}"
            status["podIP"] = pod_ip
            status["podIPs"] = [{"ip": pod_ip}]
        status["startTime"] = ts(created)
    if claim_statuses is None:
        statuses = [
            {"name": pc, "resourceClaimName": generated_claim_name(name, pc, pod_uid)}
            for pc, src in claims
            if "template" in src or "resourceClaimTemplateName" in src
        ]
    elif isinstance(claim_statuses, Mapping):
        statuses = [{"name": k, "resourceClaimName": v} for k, v in claim_statuses.items()]
    else:
        statuses = [dict(s) for s in claim_statuses]
    if statuses:
        status["resourceClaimStatuses"] = statuses
    return _finish({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status})


# --- gangs (scheduling.k8s.io) and device taint rules ------------------------------------------------

PODGROUP_SCHEDULED = "PodGroupInitiallyScheduled"


def pod_group_claim_entry(name: str, template: str | None = None, claim_name: str | None = None) -> Obj:
    """A PodGroup's ``spec.resourceClaims`` entry: a template its members share a claim from, or a claim."""
    entry: Obj = {"name": name}
    if template is not None:
        entry["resourceClaimTemplateName"] = template
    if claim_name is not None:
        entry["resourceClaimName"] = claim_name
    return entry


def pod_group(
    namespace: str,
    name: str,
    created: datetime,
    min_count: int | None = None,
    *,
    claims: Sequence[Obj] = (),
    claim_statuses: Mapping[str, str] | None = None,
    conditions: Sequence[Obj] = (),
    workload: tuple[str, str] | None = None,
    incarnation: int | str = 0,
    deletion_timestamp: datetime | None = None,
    api_version: str = SCHEDULING_API,
) -> Obj:
    """A PodGroup: a gang of ``min_count`` (basic scheduling without one), its shared claims, its conditions.

    ``claim_statuses``: pod group claim name → the generated ResourceClaim's name (``status.resourceClaimStatuses``);
    ``workload``: (Workload name, template name) it was made from.
    """
    meta = _metadata("PodGroup", name, created, namespace, incarnation=incarnation)
    if deletion_timestamp is not None:
        meta["deletionTimestamp"] = ts(deletion_timestamp)
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}}
    if workload is not None:
        spec["workloadRef"] = {"workloadName": workload[0], "templateName": workload[1]}
    if claims:
        spec["resourceClaims"] = [dict(c) for c in claims]
    status: Obj = {}
    if conditions:
        status["conditions"] = [dict(c) for c in conditions]
    if claim_statuses:
        status["resourceClaimStatuses"] = [{"name": k, "resourceClaimName": v} for k, v in claim_statuses.items()]
    return _finish({"apiVersion": api_version, "kind": "PodGroup", "metadata": meta, "spec": spec, "status": status})


def workload(
    namespace: str,
    name: str,
    created: datetime,
    templates: Sequence[tuple[str, int | None]],
    controller: tuple[str, str] | None = None,
) -> Obj:
    """A Workload: its PodGroup templates ``(name, gang minCount or None)``; ``controller`` (kind, name)."""
    spec: Obj = {
        "podGroupTemplates": [
            {"name": t, "schedulingPolicy": {"gang": {"minCount": n}} if n is not None else {"basic": {}}}
            for t, n in templates
        ]
    }
    if controller is not None:
        spec["controllerRef"] = {"apiGroup": "batch", "kind": controller[0], "name": controller[1]}
    meta = _metadata("Workload", name, created, namespace)
    return _finish({"apiVersion": SCHEDULING_API, "kind": "Workload", "metadata": meta, "spec": spec})


def pod_group_scheduled(at: datetime, status: bool, reason: str, message: str = "") -> Obj:
    """The scheduler's ``PodGroupInitiallyScheduled`` condition on a PodGroup."""
    return condition(PODGROUP_SCHEDULED, status, at, reason, message)


def group_claim_name(group_name: str, pod_claim: str, group_uid: str) -> str:
    """The name the resourceclaim controller generates for a PodGroup's template claim."""
    return f"{group_name}-{pod_claim}-{name_suffix('podgroup', group_uid, pod_claim)}"


def group_claim(template: Obj, group: Obj, pod_claim: str, created: datetime | None = None, **kwargs: Any) -> Obj:
    """The claim the resourceclaim controller generates for a PodGroup from ``template``: owned by the group,
    shared by its members (``reserved_for=[group]`` names the PodGroup as consumer)."""
    gmeta = group["metadata"]
    spec = template["spec"]["spec"]["devices"]
    created = created or datetime.fromisoformat(gmeta["creationTimestamp"].replace("Z", "+00:00"))
    reserved = [
        group_consumer(r) if isinstance(r, dict) and r.get("kind") == "PodGroup" else r
        for r in kwargs.pop("reserved_for", None) or ()
    ]
    out = claim(
        gmeta["namespace"],
        group_claim_name(gmeta["name"], pod_claim, gmeta["uid"]),
        spec["requests"],
        created,
        reserved_for=reserved,
        constraints=spec.get("constraints"),
        config=spec.get("config"),
        **kwargs,
    )
    meta = out["metadata"]
    meta["ownerReferences"] = [owner_reference(group)]
    meta["annotations"] = {POD_CLAIM_NAME_ANNOTATION: pod_claim}
    meta["generateName"] = f"{gmeta['name']}-{pod_claim}-"
    return _finish(out)


def group_consumer(group: Obj) -> Obj:
    """A claim's ``reservedFor`` entry naming a PodGroup."""
    return {
        "apiGroup": "scheduling.k8s.io",
        "resource": "podgroups",
        "name": group["metadata"]["name"],
        "uid": group["metadata"]["uid"],
    }


def device_taint_rule(
    name: str,
    taint_obj: Obj,
    created: datetime = DEFAULT_CREATED,
    *,
    driver: str | None = GPU_DRIVER,
    pool: str | None = None,
    device: str | None = None,
    selector: bool = True,
    conditions: Sequence[Obj] = (),
    api_version: str = DRA_API,
) -> Obj:
    """A DeviceTaintRule (resource.k8s.io/v1, GA in 1.37): ``taint_obj`` on the devices its selector picks.

    ``selector=False`` leaves ``spec.deviceSelector`` out: such a rule selects no device.
    """
    spec: Obj = {"taint": dict(taint_obj)}
    if selector:
        sel: Obj = {}
        for key, value in (("driver", driver), ("pool", pool), ("device", device)):
            if value is not None:
                sel[key] = value
        spec["deviceSelector"] = sel
    out: Obj = {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": {**_metadata("DeviceTaintRule", name, created), "generation": 1},
        "spec": spec,
    }
    if conditions:
        out["status"] = {"conditions": [dict(c) for c in conditions]}
    return _finish(out)


def eviction_in_progress(at: datetime, status: bool, reason: str, message: str = "") -> Obj:
    """A DeviceTaintRule's ``EvictionInProgress`` condition, as the eviction controller writes it."""
    return {**condition("EvictionInProgress", status, at, reason, message), "observedGeneration": 1}


# --- extended resources backed by DRA, binding conditions ------------------------------------------

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def with_extended_resources(pod_obj: Obj, resources: Mapping[str, int | str], container: str | None = None) -> Obj:
    """The Pod with a container (the first by default) asking for extended resources, requests = limits."""
    out = copy.deepcopy(pod_obj)
    containers = out["spec"]["containers"]
    target = next((c for c in containers if c["name"] == container), None) if container else containers[0]
    if target is None:
        raise ValueError(f"pod has no container {container}")
    res = target.setdefault("resources", {})
    for key in ("requests", "limits"):
        res[key] = {**res.get(key, {}), **{k: str(v) for k, v in resources.items()}}
    return _finish(out)


def extended_resource_claim_name(pod_obj: Obj) -> str:
    """``<pod>-extended-resources-<suffix>``: the scheduler creates the claim with that generateName."""
    name = pod_obj["metadata"]["name"]
    return f"{name}-extended-resources-{name_suffix('extended', pod_obj['metadata']['uid'])}"


def extended_resource_claim(
    pod_obj: Obj, requests: Sequence[Obj], created: datetime, name: str | None = None, **kwargs: Any
) -> Obj:
    """The claim the scheduler creates for a Pod's DRA-backed extended resources (annotated, owned by the Pod).

    ``requests`` are named ``container-<i>-request-<j>`` (use ``request(name=…)``); ``kwargs`` go to ``claim``.
    """
    pod_meta = pod_obj["metadata"]
    out = claim(pod_meta["namespace"], name or extended_resource_claim_name(pod_obj), requests, created, **kwargs)
    meta = out["metadata"]
    meta["generateName"] = f"{pod_meta['name']}-extended-resources-"
    meta["annotations"] = {**meta.get("annotations", {}), EXTENDED_CLAIM_ANNOTATION: "true"}
    meta["ownerReferences"] = [owner_reference(pod_obj)]
    return _finish(out)


def with_extended_resource_claim_status(pod_obj: Obj, claim_name: str, mappings: Sequence[tuple[str, str, str]]) -> Obj:
    """The Pod with ``status.extendedResourceClaimStatus``; ``mappings`` are (container, resource, request)."""
    out = copy.deepcopy(pod_obj)
    out["status"]["extendedResourceClaimStatus"] = {
        "requestMappings": [
            {"containerName": c, "resourceName": r, "requestName": q} for c, r, q in mappings
        ],
        "resourceClaimName": claim_name,
    }
    return _finish(out)


def with_binding_conditions(
    device: Obj,
    conditions: Sequence[str],
    failure_conditions: Sequence[str] = (),
    binds_to_node: bool = True,
) -> Obj:
    """A slice device (``gpu_device``) the scheduler binds to only once the driver reports ``conditions`` True."""
    out = copy.deepcopy(device)
    out["bindingConditions"] = list(conditions)
    if failure_conditions:
        out["bindingFailureConditions"] = list(failure_conditions)
    if binds_to_node:
        out["bindsToNode"] = True
    return out


def binding_result(
    request_name: str,
    pool: str,
    device: str,
    conditions: Sequence[str],
    failure_conditions: Sequence[str] = (),
    driver: str = GPU_DRIVER,
) -> Obj:
    """An allocation result with the binding conditions the allocator copied from the device (for ``claim``)."""
    out: Obj = {"request": request_name, "driver": driver, "pool": pool, "device": device}
    out["bindingConditions"] = list(conditions)
    if failure_conditions:
        out["bindingFailureConditions"] = list(failure_conditions)
    return out


def pod_ref(pod_obj: Obj) -> tuple[str, str]:
    """``(name, uid)`` of a pod, as ``reserved_for`` accepts it."""
    return pod_obj["metadata"]["name"], pod_obj["metadata"]["uid"]


# --- events ------------------------------------------------------------------------------------


def event(
    involved: Obj,
    reason: str,
    message: str,
    first: datetime,
    last: datetime | None = None,
    count: int = 1,
    type: str = "Warning",
    component: str = "kubelet",
    *,
    host: str | None = None,
    field_path: str | None = None,
) -> Obj:
    """A core/v1 Event about a Pod or claim; kubelet events name the pod's node as host."""
    imeta = involved["metadata"]
    ns = imeta.get("namespace") or "default"
    # kubelet/recorder names events "<object>.<UnixNano hex>"; the offset keeps two events
    # recorded in the same second apart.
    nanos = int(first.timestamp()) * 1_000_000_000 + zlib.crc32(f"{reason}/{imeta['uid']}".encode()) % 1_000_000_000
    name = f"{imeta['name']}.{nanos:x}"
    if host is None and component == "kubelet":
        host = involved.get("spec", {}).get("nodeName")
    involved_ref: Obj = {
        "kind": involved["kind"],
        "namespace": ns,
        "name": imeta["name"],
        "uid": imeta["uid"],
        "apiVersion": involved.get("apiVersion", "v1"),
    }
    if field_path:
        involved_ref["fieldPath"] = field_path
    source: Obj = {"component": component}
    if host:
        source["host"] = host
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": _metadata("Event", name, first, ns),
            "involvedObject": involved_ref,
            "reason": reason,
            "message": message,
            "type": type,
            "count": count,
            "firstTimestamp": ts(first),
            "lastTimestamp": ts(last or first),
            "source": source,
            "reportingComponent": component,
            "reportingInstance": host or "",
        }
    )


# --- output --------------------------------------------------------------------------------------


def as_list(objects: Iterable[Obj]) -> Obj:
    """A v1 List, as ``kubectl get a,b,c -o json`` prints several kinds at once."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(objects)}


def dump_json(objects: Iterable[Obj], *, indent: bool = False) -> bytes:
    return orjson.dumps(as_list(objects), option=orjson.OPT_INDENT_2 if indent else 0)
