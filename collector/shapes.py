"""The field types Claimline's analysis relies on, checked once at the door.

The API server validates objects against their schema, but a dump or a broken
proxy may not: an object whose ``status.reservedFor`` is a number would be
stored fine and then trip every report that reads it. Checking the few
structural fields the domain walks keeps that failure at ingest, where it is
reported with the object's name and the rest of the snapshot still lands.
"""

from __future__ import annotations

from typing import Any

# kind -> (path, type); "*" steps into every element of a list.
_DICT, _LIST, _STR = dict, list, str
SHAPES: dict[str, tuple[tuple[tuple[str, ...], type], ...]] = {
    "*": (
        (("metadata", "labels"), _DICT),
        (("metadata", "annotations"), _DICT),
        (("metadata", "ownerReferences"), _LIST),
        (("metadata", "ownerReferences", "*"), _DICT),
        (("metadata", "finalizers"), _LIST),
    ),
    "ResourceClaim": (
        (("spec", "devices"), _DICT),
        (("spec", "devices", "requests"), _LIST),
        (("spec", "devices", "requests", "*"), _DICT),
        (("spec", "devices", "constraints"), _LIST),
        (("spec", "devices", "config"), _LIST),
        (("status", "allocation"), _DICT),
        (("status", "allocation", "devices"), _DICT),
        (("status", "allocation", "devices", "results"), _LIST),
        (("status", "allocation", "devices", "results", "*"), _DICT),
        (("status", "allocation", "nodeSelector"), _DICT),
        (("status", "reservedFor"), _LIST),
        (("status", "reservedFor", "*"), _DICT),
        (("status", "devices"), _LIST),
        (("status", "devices", "*"), _DICT),
    ),
    "ResourceClaimTemplate": (
        (("spec", "spec"), _DICT),
        (("spec", "spec", "devices"), _DICT),
        (("spec", "spec", "devices", "requests"), _LIST),
        (("spec", "spec", "devices", "requests", "*"), _DICT),
    ),
    "ResourceSlice": (
        (("spec", "driver"), _STR),
        (("spec", "pool"), _DICT),
        (("spec", "devices"), _LIST),
        (("spec", "devices", "*"), _DICT),
        (("spec", "nodeSelector"), _DICT),
    ),
    "DeviceClass": (
        (("spec", "selectors"), _LIST),
        (("spec", "selectors", "*"), _DICT),
        (("spec", "config"), _LIST),
    ),
    "DeviceTaintRule": (
        (("spec", "deviceSelector"), _DICT),
        (("spec", "taint"), _DICT),
        (("status", "conditions"), _LIST),
        (("status", "conditions", "*"), _DICT),
    ),
    "Workload": (
        (("spec", "podGroupTemplates"), _LIST),
        (("spec", "podGroupTemplates", "*"), _DICT),
    ),
    "PodGroup": (
        (("spec", "schedulingPolicy"), _DICT),
        (("spec", "resourceClaims"), _LIST),
        (("spec", "resourceClaims", "*"), _DICT),
        (("status", "conditions"), _LIST),
        (("status", "conditions", "*"), _DICT),
        (("status", "resourceClaimStatuses"), _LIST),
        (("status", "resourceClaimStatuses", "*"), _DICT),
    ),
    "Pod": (
        (("spec", "nodeName"), _STR),
        (("spec", "schedulingGroup"), _DICT),
        (("spec", "resourceClaims"), _LIST),
        (("spec", "resourceClaims", "*"), _DICT),
        (("spec", "containers"), _LIST),
        (("spec", "containers", "*"), _DICT),
        (("status", "conditions"), _LIST),
        (("status", "conditions", "*"), _DICT),
        (("status", "containerStatuses"), _LIST),
        (("status", "containerStatuses", "*"), _DICT),
        (("status", "initContainerStatuses"), _LIST),
        (("status", "resourceClaimStatuses"), _LIST),
        (("status", "resourceClaimStatuses", "*"), _DICT),
        (("status", "extendedResourceClaimStatus"), _DICT),
        (("status", "extendedResourceClaimStatus", "requestMappings"), _LIST),
        (("status", "extendedResourceClaimStatus", "requestMappings", "*"), _DICT),
    ),
    "Node": (
        (("spec", "taints"), _LIST),
        (("status", "conditions"), _LIST),
        (("status", "conditions", "*"), _DICT),
        (("status", "allocatable"), _DICT),
        (("status", "capacity"), _DICT),
    ),
    "Event": (
        (("involvedObject",), _DICT),
        (("reason",), _STR),
        (("message",), _STR),
    ),
}
_NAMES: dict[type, str] = {_DICT: "an object", _LIST: "a list", _STR: "a string"}


def _find_misfit(value: Any, path: tuple[str, ...], expected: type, where: str) -> str | None:
    if not path:
        if value is None or isinstance(value, expected):
            return None
        return f"{where} is {type(value).__name__}, expected {_NAMES[expected]}"
    step, rest = path[0], path[1:]
    if step == "*":
        if not isinstance(value, list):
            return None
        for i, item in enumerate(value):
            misfit = _find_misfit(item, rest, expected, f"{where}[{i}]")
            if misfit:
                return misfit
        return None
    if not isinstance(value, dict) or step not in value:
        return None
    return _find_misfit(value[step], rest, expected, f"{where}.{step}" if where else step)


def shape_problem(kind: str, obj: dict[str, Any]) -> str | None:
    """The first structural field of ``obj`` with the wrong type, described; None if all fit."""
    for path, expected in SHAPES["*"] + SHAPES.get(kind, ()):
        misfit = _find_misfit(obj, path, expected, "")
        if misfit:
            return misfit
    return None
