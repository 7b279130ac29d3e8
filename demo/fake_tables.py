"""The Table answers kubectl asks for (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``).

The columns are the ones kube-apiserver's printers give each kind (``kubectl get`` shows those with
priority 0, ``-o wide`` all), computed the way its printers compute them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Column = tuple[str, str, str, int, str]  # name, type, format, priority, description
Printer = Callable[[dict[str, Any], datetime], list[Any]]

NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically."
)
AGE_DESCRIPTION = "CreationTimestamp is a timestamp representing the server time when this object was created."


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _parse(ts: Any) -> datetime | None:
    if not isinstance(ts, str) or not ts:
        return None
    try:
        parsed = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _since(ts: Any, now: datetime) -> str:
    parsed = _parse(ts)
    return "<unknown>" if parsed is None else human_duration((now - parsed).total_seconds())


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _age(obj: dict[str, Any], now: datetime) -> str:
    return _since(_meta(obj).get("creationTimestamp"), now)


def _none(value: Any) -> str:
    return str(value) if value not in (None, "") else "<none>"


# --------------------------------------------------------------------------- per kind


def _pod(obj: dict[str, Any], now: datetime) -> list[Any]:
    """printPod, simplified: init containers, waiting and terminated reasons, Terminating."""
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    containers = _list(spec.get("containers"))
    statuses = [_dict(s) for s in _list(status.get("containerStatuses"))]
    reason = status.get("reason") or status.get("phase") or "Unknown"
    init_statuses = [_dict(s) for s in _list(status.get("initContainerStatuses"))]
    initializing = False
    for i, cs in enumerate(init_statuses):
        state = _dict(cs.get("state"))
        terminated, waiting = _dict(state.get("terminated")), _dict(state.get("waiting"))
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            reason = "Init:" + (terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}")
        elif waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(_list(spec.get('initContainers')))}"
        initializing = True
        break
    ready = restarts = 0
    if not initializing:
        running = False
        for cs in reversed(statuses):
            restarts += int(cs.get("restartCount") or 0)
            state = _dict(cs.get("state"))
            waiting, terminated = _dict(state.get("waiting")), _dict(state.get("terminated"))
            if waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = f"ExitCode:{terminated.get('exitCode')}"
            elif state.get("running") is not None and cs.get("ready"):
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running"
    if _meta(obj).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    gates = _list(spec.get("readinessGates"))
    return [
        _meta(obj).get("name", ""),
        f"{ready}/{len(containers)}",
        reason,
        str(restarts),
        _age(obj, now),
        _none(status.get("podIP")),
        _none(spec.get("nodeName")),
        _none(status.get("nominatedNodeName")),
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _node(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    conditions = {c.get("type"): c.get("status") for c in map(_dict, _list(status.get("conditions")))}
    ready = conditions.get("Ready")
    states = ["Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = _dict(_meta(obj).get("labels"))
    roles = sorted(
        k.removeprefix("node-role.kubernetes.io/") for k in labels if k.startswith("node-role.kubernetes.io/")
    )
    if labels.get("kubernetes.io/role"):
        roles.append(str(labels["kubernetes.io/role"]))
    addresses = {a.get("type"): a.get("address") for a in map(_dict, _list(status.get("addresses")))}
    info = _dict(status.get("nodeInfo"))
    return [
        _meta(obj).get("name", ""),
        ",".join(states),
        ",".join(roles) or "<none>",
        _age(obj, now),
        info.get("kubeletVersion", ""),
        _none(addresses.get("InternalIP")),
        _none(addresses.get("ExternalIP")),
        _none(info.get("osImage")),
        _none(info.get("kernelVersion")),
        _none(info.get("containerRuntimeVersion")),
    ]


def _namespace(obj: dict[str, Any], now: datetime) -> list[Any]:
    return [_meta(obj).get("name", ""), _dict(obj.get("status")).get("phase", ""), _age(obj, now)]


def _event(obj: dict[str, Any], now: datetime) -> list[Any]:
    involved = _dict(obj.get("involvedObject"))
    source = _dict(obj.get("source"))
    first = obj.get("firstTimestamp") or obj.get("eventTime") or _meta(obj).get("creationTimestamp")
    last = obj.get("lastTimestamp") or _dict(obj.get("series")).get("lastObservedTime") or first
    origin = source.get("component") or obj.get("reportingComponent") or ""
    if source.get("host"):
        origin = f"{origin}, {source['host']}"
    return [
        _since(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        origin,
        str(obj.get("message", "")).strip(),
        _since(first, now),
        int(obj.get("count") or 1),
        _meta(obj).get("name", ""),
    ]


def _device_class(obj: dict[str, Any], now: datetime) -> list[Any]:
    return [_meta(obj).get("name", ""), _age(obj, now)]


def _resource_slice(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec = _dict(obj.get("spec"))
    node = spec.get("nodeName") or ("<all nodes>" if spec.get("allNodes") else "<none>")
    return [
        _meta(obj).get("name", ""),
        node,
        spec.get("driver", ""),
        _dict(spec.get("pool")).get("name", ""),
        _age(obj, now),
    ]


def _resource_claim(obj: dict[str, Any], now: datetime) -> list[Any]:
    """printResourceClaim: pending, allocated, reserved, deleted."""
    status = _dict(obj.get("status"))
    states = []
    if _meta(obj).get("deletionTimestamp"):
        states.append("deleted")
    if status.get("allocation") is None:
        if not states:
            states.append("pending")
    else:
        states.append("allocated")
        if _list(status.get("reservedFor")):
            states.append("reserved")
    return [_meta(obj).get("name", ""), ",".join(states), _age(obj, now)]


def _resource_claim_template(obj: dict[str, Any], now: datetime) -> list[Any]:
    return [_meta(obj).get("name", ""), _age(obj, now)]


_NAME: Column = ("Name", "string", "name", 0, NAME_DESCRIPTION)
_AGE: Column = ("Age", "string", "", 0, AGE_DESCRIPTION)

TABLES: dict[str, tuple[tuple[Column, ...], Printer]] = {
    "Pod": (
        (
            _NAME,
            ("Ready", "string", "", 0, "The aggregate readiness state of this pod for accepting traffic."),
            ("Status", "string", "", 0, "The aggregate status of the containers in this pod."),
            ("Restarts", "string", "", 0, "The number of times the containers in this pod have been restarted."),
            _AGE,
            ("IP", "string", "", 1, "IP address allocated to the pod."),
            ("Node", "string", "", 1, "Name of the Node this pod runs on."),
            ("Nominated Node", "string", "", 1, "Name of the node the scheduler nominated for this pod."),
            ("Readiness Gates", "string", "", 1, "Pod's readiness gates."),
        ),
        _pod,
    ),
    "Node": (
        (
            _NAME,
            ("Status", "string", "", 0, "The status of the node"),
            ("Roles", "string", "", 0, "The roles of the node"),
            _AGE,
            ("Version", "string", "", 0, "Kubelet Version reported by the node."),
            ("Internal-IP", "string", "", 1, "List of internal IPs."),
            ("External-IP", "string", "", 1, "List of external IPs."),
            ("OS-Image", "string", "", 1, "OS Image reported by the node."),
            ("Kernel-Version", "string", "", 1, "Kernel Version reported by the node."),
            ("Container-Runtime", "string", "", 1, "Container Runtime Version reported by the node."),
        ),
        _node,
    ),
    "Namespace": (
        (_NAME, ("Status", "string", "", 0, "The status of the namespace"), _AGE),
        _namespace,
    ),
    "Event": (
        (
            ("Last Seen", "string", "", 0, "Time when last this event was observed."),
            ("Type", "string", "", 0, "Type of this event (Normal, Warning), new types could be added."),
            ("Reason", "string", "", 0, "The reason for the transition into the object's current status."),
            ("Object", "string", "", 0, "The object that this event is about."),
            ("Subobject", "string", "", 1, "The subobject that this event is about."),
            ("Source", "string", "", 1, "The component reporting this event."),
            ("Message", "string", "", 0, "A human-readable description of the status of this operation."),
            ("First Seen", "string", "", 1, "The time at which the event was first recorded."),
            ("Count", "integer", "", 1, "The number of times this event has occurred."),
            ("Name", "string", "name", 1, NAME_DESCRIPTION),
        ),
        _event,
    ),
    "DeviceClass": ((_NAME, _AGE), _device_class),
    "ResourceSlice": (
        (
            _NAME,
            ("Node", "string", "", 0, "The node the slice's devices are attached to."),
            ("Driver", "string", "", 0, "The DRA driver publishing the slice."),
            ("Pool", "string", "", 0, "The device pool the slice belongs to."),
            _AGE,
        ),
        _resource_slice,
    ),
    "ResourceClaim": (
        (_NAME, ("State", "string", "", 0, "A summary of the claim's state: allocated, reserved, deleted."), _AGE),
        _resource_claim,
    ),
    "ResourceClaimTemplate": ((_NAME, _AGE), _resource_claim_template),
}


def wants_table(accept: str | None) -> bool:
    """Whether an Accept header asks for a meta.k8s.io Table (kubectl get sends it first, with JSON after)."""
    if not accept:
        return False
    for part in accept.split(","):
        params = {p.strip().partition("=")[0]: p.strip().partition("=")[2] for p in part.split(";")[1:]}
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return True
    return False


def column_definitions(kind: str) -> list[dict[str, Any]]:
    columns, _ = TABLES[kind]
    return [
        {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}
        for name, type_, fmt, priority, description in columns
    ]


def table_row(kind: str, obj: dict[str, Any], now: datetime, include: str = "Metadata") -> dict[str, Any]:
    """One row; ``include`` is includeObject: None, Metadata (a PartialObjectMetadata) or Object."""
    _, printer = TABLES[kind]
    row: dict[str, Any] = {"cells": printer(obj, now)}
    if include == "Object":
        row["object"] = obj
    elif include != "None":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": _meta(obj),
        }
    return row


def table(
    kind: str, objects: list[dict[str, Any]], now: datetime, metadata: dict[str, Any], include: str = "Metadata",
) -> dict[str, Any]:
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": column_definitions(kind),
        "rows": [table_row(kind, obj, now, include) for obj in objects],
    }
