"""Claim constraints: which devices may be allocated together (``matchAttribute``, ``distinctAttribute``).

A constraint names requests of its claim (none: all of them); naming a
``firstAvailable`` request covers whichever subrequest is chosen, and
``request/subrequest`` covers only that one. ``matchAttribute`` wants one value
of the attribute on every device of those requests, ``distinctAttribute`` a
different value on each. A device without the attribute satisfies neither.
Values compare with their type, as in the API (``{"int": 1}`` is not ``{"string": "1"}``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from domain.cluster.asks import device_claim
from domain.cluster.state import Object
from domain.inventory.devices import AdvertisedDevice

MATCH = "matchAttribute"
DISTINCT = "distinctAttribute"


@dataclass(frozen=True)
class Constraint:
    kind: str  # MATCH | DISTINCT
    attribute: str  # fully qualified: "gpu.nvidia.com/productName"
    requests: tuple[str, ...] = ()

    def applies_to(self, ask_name: str) -> bool:
        """Whether the constraint covers an ask ("gpu", or "gpu/a100" for a subrequest)."""
        if not self.requests:
            return True
        return ask_name in self.requests or ask_name.split("/", 1)[0] in self.requests

    @property
    def short_attribute(self) -> str:
        return self.attribute.rsplit("/", 1)[-1]

    def describe(self) -> str:
        same = "the same" if self.kind == MATCH else "distinct"
        return f"{same} {self.attribute}"


def claim_constraints(claim: Object) -> tuple[Constraint, ...]:
    """The constraints of a claim (or of a template's claim spec)."""
    out = []
    for raw in device_claim(claim).get("constraints") or ():
        if not isinstance(raw, dict):
            continue
        requests = tuple(str(r) for r in raw.get("requests") or ())
        for kind in (MATCH, DISTINCT):
            if isinstance(raw.get(kind), str) and raw[kind]:
                out.append(Constraint(kind, raw[kind], requests))
                break
    return tuple(out)


Picked = tuple[str, AdvertisedDevice]  # (ask name, device)
_MISSING = ("", None)


def attribute_key(device: AdvertisedDevice, attribute: str) -> tuple[str, Any]:
    """(type, value) of a qualified attribute on a device; ``("", None)`` when it has none."""
    domain, _, name = attribute.rpartition("/")
    typed = device.attributes.get(attribute)
    if typed is None and domain == device.driver:
        typed = device.attributes.get(name)
    if not isinstance(typed, dict):
        return _MISSING
    for kind in ("string", "int", "bool", "version"):
        if kind in typed:
            return (kind, typed[kind])
    return _MISSING


def shown_value(device: AdvertisedDevice, attribute: str) -> str:
    key = attribute_key(device, attribute)
    return "(none)" if key == _MISSING else str(key[1])


def violated(
    constraints: Sequence[Constraint], picked: Iterable[Picked], ask_name: str, device: AdvertisedDevice
) -> Constraint | None:
    """The first constraint that adding ``device`` for ``ask_name`` to ``picked`` would break."""
    for constraint in constraints:
        if not constraint.applies_to(ask_name):
            continue
        key = attribute_key(device, constraint.attribute)
        if key == _MISSING:
            return constraint
        for other_ask, other in picked:
            if not constraint.applies_to(other_ask):
                continue
            same = attribute_key(other, constraint.attribute) == key
            if same != (constraint.kind == MATCH):
                return constraint
    return None


def applying(constraints: Sequence[Constraint], ask_name: str) -> list[Constraint]:
    return [c for c in constraints if c.applies_to(ask_name)]


def conflict_sentence(
    subject: str,
    wants: str,
    constraint: Constraint,
    node: str,
    candidates: Sequence[AdvertisedDevice],
    earlier: Sequence[Picked] = (),
) -> str:
    """Why no set of candidates satisfies a constraint, with the values they have.

    E.g. "request gpus needs 2 devices of class gpu.nvidia.com with the same
    gpu.nvidia.com/productName on one node: a-0 has 2 free but productName differs: A100, H100".
    """
    name = constraint.short_attribute
    values = sorted({shown_value(d, constraint.attribute) for d in candidates})
    fixed = sorted({shown_value(d, constraint.attribute) for a, d in earlier if constraint.applies_to(a)})
    head = f"{subject} needs {wants} with {constraint.describe()} on one node: {node} has {len(candidates)} free"
    if fixed:
        relation = "as" if constraint.kind == MATCH else "from"
        return (
            f"{head} but the claim's other requests took devices with {name} {', '.join(fixed)}; "
            f"{'the same' if constraint.kind == MATCH else 'a different'} {name} {relation} those is not left "
            f"(the free ones have {', '.join(values) or 'none'})"
        )
    if constraint.kind == MATCH:
        missing = sum(1 for d in candidates if attribute_key(d, constraint.attribute) == _MISSING)
        if missing and len(values) == 1:
            return f"{head} but they have no {name}"
        return f"{head} but {name} differs: {', '.join(values)}"
    return f"{head} but {name} repeats: only {len([v for v in values if v != '(none)'])} distinct ({', '.join(values)})"
