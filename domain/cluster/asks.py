"""What a claim asks for: its requests, their subrequests, classes, capacity and tolerations.

Plain readings of a ResourceClaim (or template) spec and its DeviceClasses, so
the simulator, reports and views agree on what a request means.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.cluster.quantity import Quantity, QuantityError
from domain.cluster.state import ClusterState, Object


class DeviceClassNotFound(LookupError):
    pass


# --- what a claim asks for -------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceAsk:
    """One concrete ask: a request's ``exactly``, or one ``firstAvailable`` subrequest."""

    name: str  # "gpu", or "gpu/a100" for a subrequest, as allocation results name it
    class_name: str
    mode: str  # ExactCount | All
    count: int
    selectors: tuple[str, ...]
    tolerations: tuple[Mapping[str, Any], ...]
    admin_access: bool = False
    capacity: tuple[tuple[str, Quantity], ...] = ()  # capacity.requests, per device

    @property
    def capacity_requests(self) -> dict[str, Quantity]:
        return dict(self.capacity)

    def wants(self) -> str:
        if self.mode == "All":
            wants = f"all devices of class {self.class_name}"
        else:
            noun = "device" if self.count == 1 else "devices"
            wants = f"{self.count} {noun} of class {self.class_name}"
        if self.capacity:
            wants += " with " + ", ".join(f"{name.rsplit('/', 1)[-1]} {q}" for name, q in self.capacity)
        return wants


@dataclass(frozen=True)
class ClaimRequest:
    name: str
    alternatives: tuple[DeviceAsk, ...]  # one for ``exactly``; the subrequests, in order

    @property
    def prioritized(self) -> bool:
        return len(self.alternatives) > 1 or self.alternatives[0].name != self.name


def _selector_exprs(selectors: Any) -> tuple[str, ...]:
    out = []
    for s in selectors or ():
        expr = (s.get("cel") or {}).get("expression") if isinstance(s, dict) else None
        if isinstance(expr, str):
            out.append(expr)
    return tuple(out)


def _ask(name: str, body: Mapping[str, Any]) -> DeviceAsk:
    mode = str(body.get("allocationMode") or "ExactCount")
    try:
        count = int(body.get("count") or 1)
    except (TypeError, ValueError):
        count = 1
    return DeviceAsk(
        name=name,
        class_name=str(body.get("deviceClassName") or ""),
        mode=mode,
        count=count,
        selectors=_selector_exprs(body.get("selectors")),
        tolerations=tuple(t for t in body.get("tolerations") or () if isinstance(t, dict)),
        admin_access=bool(body.get("adminAccess")),
        capacity=_capacity_requests(body.get("capacity")),
    )


def _capacity_requests(raw: Any) -> tuple[tuple[str, Quantity], ...]:
    requests = raw.get("requests") if isinstance(raw, dict) else None
    out = []
    for name, value in (requests or {}).items() if isinstance(requests, dict) else ():
        try:
            out.append((str(name), Quantity.parse(str(value))))
        except QuantityError:
            continue  # the API server validates quantities; a dump that does not parse asks for nothing
    return tuple(sorted(out, key=lambda kv: kv[0]))


def device_claim(claim: Object) -> dict[str, Any]:
    """``spec.devices`` of a ResourceClaim, or of the claim spec of a ResourceClaimTemplate."""
    spec = claim.get("spec") or {}
    if "spec" in spec and "devices" not in spec:  # a ResourceClaimTemplate
        spec = spec["spec"] or {}
    devices = spec.get("devices")
    return devices if isinstance(devices, dict) else {}


def claim_requests(claim: Object) -> list[ClaimRequest]:
    """The requests of a ResourceClaim (or of a template's claim spec)."""
    out = []
    for req in device_claim(claim).get("requests") or ():
        if not isinstance(req, dict):
            continue
        name = str(req.get("name") or "")
        if isinstance(req.get("firstAvailable"), list):
            subs = tuple(_ask(f"{name}/{s.get('name')}", s) for s in req["firstAvailable"] if isinstance(s, dict))
            if subs:
                out.append(ClaimRequest(name, subs))
        elif isinstance(req.get("exactly"), dict):
            out.append(ClaimRequest(name, (_ask(name, req["exactly"]),)))
        elif req.get("deviceClassName"):  # v1beta1 put the fields on the request itself
            out.append(ClaimRequest(name, (_ask(name, req),)))
    return out


def class_selectors(device_class: Object | None) -> tuple[str, ...]:
    return _selector_exprs(((device_class or {}).get("spec") or {}).get("selectors"))


_DRIVER_EQ = re.compile(r"""device\.driver\s*==\s*(['"])([^'"]+)\1|(['"])([^'"]+)\3\s*==\s*device\.driver""")


def class_drivers(device_class: Object | None) -> set[str]:
    """Drivers a class's selectors pin with ``device.driver == '…'``; empty when they don't say."""
    found = set()
    for expr in class_selectors(device_class):
        for m in _DRIVER_EQ.finditer(expr):
            found.add(m.group(2) or m.group(4))
    return found


def find_class(state: ClusterState, name: str) -> Object | None:
    return state.find("DeviceClass", "", name)


# --- taints ----------------------------------------------------------------------------------------


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if (toleration.get("operator") or "Equal") == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def taint_label(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    key = f"{taint.get('key')}={value}" if value else str(taint.get("key"))
    return f"{key}:{taint.get('effect')}"
