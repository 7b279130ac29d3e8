"""Binding conditions: devices the scheduler allocates but will not bind a Pod to until the driver says so.

A device may list ``bindingConditions`` (and ``bindingFailureConditions``) in
its ResourceSlice; the allocator copies them into the claim's allocation
results. The scheduler then waits in PreBind — the Pod stays unbound, kubelet
never sees it — until every binding condition of every allocated device is a
``True`` condition in the claim's ``status.devices[]``. A ``True`` failure
condition, or a wait longer than the binding timeout (600 s by default,
counted from ``allocationTimestamp``), fails binding: the scheduler deallocates
the claim and schedules the Pod again.

These conditions belong to the allocation boundary, not to preparation: a
missing or ``False`` binding condition is a wait, not a driver failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from domain.cluster.state import Object, status_of
from domain.cluster.timefmt import parse_time

BINDING_TIMEOUT_SECONDS = 600
PENDING_EVENT = "BindingConditionsPending"  # Normal, from the scheduler's DynamicResources PreBind

# PreBind's errors once it gives up (in the Pod's FailedScheduling event); the claim is then deallocated.
_FAILED_BINDING = re.compile(r"binding failed: reason=|binding timeout")

DeviceKey = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True)
class BindingWait:
    """Why the scheduler has not bound the Pod yet (``pending``), or has given up on this allocation (``failed``)."""

    state: str  # pending | failed
    reason: str  # binding-pending | binding-failed
    message: str
    since: str | None
    evidence: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _DeviceBinding:
    key: DeviceKey
    conditions: tuple[str, ...]
    failure_conditions: tuple[str, ...]
    reported: dict[str, Mapping[str, Any]]  # condition type → the condition in status.devices[]

    @property
    def label(self) -> str:
        return f"{self.key[1]}/{self.key[2]}"

    def missing(self) -> list[str]:
        return [c for c in self.conditions if (self.reported.get(c) or {}).get("status") != "True"]

    def failed(self) -> Mapping[str, Any] | None:
        for ctype in self.failure_conditions:
            cond = self.reported.get(ctype)
            if cond is not None and cond.get("status") == "True":
                return cond
        return None

    def as_evidence(self) -> dict[str, Any]:
        return {
            "kind": "BindingConditions",
            "driver": self.key[0],
            "pool": self.key[1],
            "device": self.key[2],
            "bindingConditions": list(self.conditions),
            "bindingFailureConditions": list(self.failure_conditions),
            "reported": [
                {k: cond.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                for ctype, cond in sorted(self.reported.items())
                if ctype in self.conditions or ctype in self.failure_conditions
            ],
        }


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _key(entry: Mapping[str, Any]) -> DeviceKey:
    return (str(entry.get("driver") or ""), str(entry.get("pool") or ""), str(entry.get("device") or ""))


def _allocation(claim: Object) -> dict[str, Any]:
    allocation = status_of(claim).get("allocation")
    return allocation if isinstance(allocation, dict) else {}


def _results(claim: Object) -> Iterator[Mapping[str, Any]]:
    devices = _allocation(claim).get("devices")
    results = devices.get("results") if isinstance(devices, dict) else None
    yield from (r for r in results or () if isinstance(r, dict))


def _reported(claim: Object) -> dict[DeviceKey, dict[str, Mapping[str, Any]]]:
    out: dict[DeviceKey, dict[str, Mapping[str, Any]]] = {}
    for dev in status_of(claim).get("devices") or ():
        if not isinstance(dev, dict):
            continue
        conditions = out.setdefault(_key(dev), {})
        for cond in dev.get("conditions") or ():
            if isinstance(cond, dict) and cond.get("type"):
                conditions[str(cond["type"])] = cond
    return out


def _device_bindings(claim: Object) -> list[_DeviceBinding]:
    reported = _reported(claim)
    out = []
    for result in _results(claim):
        conditions = _strings(result.get("bindingConditions"))
        if not conditions:
            continue  # the scheduler ignores failure conditions of a device without binding conditions
        key = _key(result)
        failure_conditions = _strings(result.get("bindingFailureConditions"))
        out.append(_DeviceBinding(key, conditions, failure_conditions, reported.get(key, {})))
    return out


def binding_condition_types(claim: Object) -> set[tuple[str, str, str, str]]:
    """(driver, pool, device, condition type) of every binding and binding failure condition allocated."""
    out = set()
    for result in _results(claim):
        for ctype in _strings(result.get("bindingConditions")) + _strings(result.get("bindingFailureConditions")):
            out.add((*_key(result), ctype))
    return out


def binding_wait(claim: Object, claim_label: str, as_of: datetime) -> BindingWait | None:
    """Whether the claim's binding conditions keep its (unbound) Pod from being bound, as of ``as_of``.

    None when no allocated device has binding conditions or all of them hold.
    """
    devices = _device_bindings(claim)
    if not devices:
        return None
    evidence = [d.as_evidence() for d in devices]
    for device in devices:
        cond = device.failed()
        if cond is not None:
            detail = f"{cond.get('reason')}: {cond.get('message')}" if cond.get("message") else str(cond.get("reason"))
            return BindingWait(
                "failed",
                "binding-failed",
                f"device {device.label} of claim {claim_label} reports binding failure condition "
                f"{cond.get('type')}=True ({detail}); the scheduler fails binding, deallocates the claim and retries",
                str(cond.get("lastTransitionTime") or "") or None,
                evidence,
            )
    waiting = [(d, d.missing()) for d in devices if d.missing()]
    if not waiting:
        return None
    allocated_at = _allocation(claim).get("allocationTimestamp")
    started = parse_time(allocated_at)
    waited = int((as_of - started).total_seconds()) if started is not None else None
    missing = "; ".join(f"device {d.label} lacks {', '.join(_shown(d, c) for c in conds)}" for d, conds in waiting)
    since = str(allocated_at) if allocated_at else None
    if waited is not None and waited > BINDING_TIMEOUT_SECONDS:
        return BindingWait(
            "failed",
            "binding-failed",
            f"binding of claim {claim_label} timed out after {waited} s (the scheduler waits "
            f"{BINDING_TIMEOUT_SECONDS} s for binding conditions, then deallocates the claim and retries): {missing}",
            since,
            evidence,
        )
    so_far = (
        f"for {waited} s of the scheduler's {BINDING_TIMEOUT_SECONDS} s binding timeout"
        if waited is not None
        else f"since an unknown time (the binding timeout is {BINDING_TIMEOUT_SECONDS} s)"
    )
    return BindingWait(
        "pending",
        "binding-pending",
        f"claim {claim_label} is allocated, but the scheduler waits for the driver's binding conditions before "
        f"binding the Pod, {so_far}: {missing}",
        since,
        evidence,
    )


def _shown(device: _DeviceBinding, ctype: str) -> str:
    cond = device.reported.get(ctype)
    if cond is None:
        return f"{ctype} (not reported)"
    reason = f", {cond.get('reason')}" if cond.get("reason") else ""
    return f"{ctype} ({cond.get('status')}{reason})"


def is_binding_failure(scheduler_message: str) -> bool:
    """Whether a FailedScheduling message is PreBind giving up on binding conditions (failure or timeout)."""
    return _FAILED_BINDING.search(scheduler_message) is not None

