"""The nearest change to a request that would fit, for ``selector-unsatisfiable`` and ``insufficient-devices``.

A few candidate relaxations of the request that stopped the Pod, each tried by running the same
allocation simulation the verdict ran (``allocator.matching.simulate``) on a changed copy of its claim:

- ``constraint``: the claim's ``matchAttribute``/``distinctAttribute`` constraint the usable devices
  conflict on, dropped;
- ``count``: the largest smaller ``count`` that fits (a binary search: a few simulations);
- ``selector``: a comparison in the request's CEL selector (``compareTo(quantity(…))``,
  ``isGreaterThan``/``isLessThan``, ``>=``/``<=``/``==`` against a number or a string) moved to the
  nearest value the class's devices advertise.

A relaxation counts when the simulation's reason is no longer one of the two (it fits, or it would
wait on devices in use or tainted). The work is bounded (``MAX_SELECTOR_CANDIDATES`` comparisons, a
logarithmic count search) and the order is fixed, so the answer is deterministic.
"""

from __future__ import annotations

import copy
import re
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from domain.allocator.device_checks import CLASS_FALSE, SelectorCache
from domain.allocator.matching import Simulation, Stage, simulate
from domain.cluster.asks import DeviceAsk
from domain.cluster.quantity import Quantity, QuantityError
from domain.cluster.state import Object, ns_name, uid_of
from domain.inventory.devices import AdvertisedDevice, Inventory

SUGGESTED_FOR = frozenset({"selector-unsatisfiable", "insufficient-devices"})
MAX_SELECTOR_CANDIDATES = 4
_KEPT_MAX = 32  # distinct asks whose suggestions an inventory keeps
_KEPT: weakref.WeakKeyDictionary[Inventory, dict[Any, list[dict[str, Any]]]] = weakref.WeakKeyDictionary()

_LHS = r"device\.(?P<where>capacity|attributes)\[\s*(?P<q>['\"])(?P<domain>[^'\"]+)(?P=q)\s*\]\.(?P<name>[A-Za-z_]\w*)"
_LIT = r"(?P<lq>['\"])(?P<lit>[^'\"]*)(?P=lq)"
_COMPARE = re.compile(_LHS + r"\.compareTo\(\s*quantity\(\s*" + _LIT + r"\s*\)\s*\)\s*(?P<op>>=|<=|==|>|<)\s*0\b")
_IS = re.compile(_LHS + r"\.(?P<fn>isGreaterThan|isLessThan)\(\s*quantity\(\s*" + _LIT + r"\s*\)\s*\)")
_PLAIN = re.compile(_LHS + r"\s*(?P<op>>=|<=|==|>|<)\s*(?:(?P<num>-?\d+)\b|" + _LIT + ")")


@dataclass(frozen=True)
class Comparison:
    """One comparison of a selector with a literal: where it is, what it reads and which way it bounds."""

    expression: str
    span: tuple[int, int]
    where: str  # capacity | attributes
    domain: str
    name: str
    op: str  # >= | <= | ==  (what the rewritten comparison says)
    kind: str  # quantity | int | string
    literal: Any
    shown: str
    strict: bool = False  # ``>``/``<``: the literal itself is refused too

    def rewritten(self, value: Any) -> str:
        lhs = f"device.{self.where}['{self.domain}'].{self.name}"
        if self.kind == "quantity":
            new = f"{lhs}.compareTo(quantity('{value}')) {self.op} 0"
        elif self.kind == "int":
            new = f"{lhs} {self.op} {value}"
        else:
            new = f"{lhs} {self.op} '{value}'"
        start, end = self.span
        return self.expression[:start] + new + self.expression[end:]


def comparisons(expression: str) -> list[Comparison]:
    """The comparisons of ``expression`` a relaxation can move, in the order they appear."""
    found: list[Comparison] = []
    for m in _COMPARE.finditer(expression):
        op = {">": ">=", "<": "<="}.get(m["op"], m["op"])
        literal = _quantity(m["lit"])
        if literal is not None:
            found.append(_comparison(expression, m, op, "quantity", literal, f"{m['op']} {m['lit']}"))
    for m in _IS.finditer(expression):
        literal = _quantity(m["lit"])
        if literal is not None:
            op = ">=" if m["fn"] == "isGreaterThan" else "<="
            found.append(_comparison(expression, m, op, "quantity", literal, f"{op[0]} {m['lit']}"))
    for m in _PLAIN.finditer(expression):
        op = {">": ">=", "<": "<="}.get(m["op"], m["op"])
        if m["num"] is not None:
            found.append(_comparison(expression, m, op, "int", int(m["num"]), f"{m['op']} {m['num']}"))
        elif m["op"] == "==":
            found.append(_comparison(expression, m, op, "string", m["lit"], f"== '{m['lit']}'"))
    return sorted(found, key=lambda c: c.span)


def _comparison(expression: str, m: re.Match[str], op: str, kind: str, literal: Any, shown: str) -> Comparison:
    strict = m.groupdict().get("op") in (">", "<") or m.groupdict().get("fn") is not None
    return Comparison(expression, m.span(), m["where"], m["domain"], m["name"], op, kind, literal, shown, strict)


def _quantity(text: str) -> Quantity | None:
    try:
        return Quantity.parse(text)
    except QuantityError:
        return None


def advertised(device: AdvertisedDevice, c: Comparison) -> Any:
    """The device's value of what ``c`` reads (its attribute or capacity), None when it has none of that type."""
    entries = device.entry.get(c.where) or {}
    entry = entries.get(f"{c.domain}/{c.name}")
    if entry is None and c.domain == device.driver:
        entry = entries.get(c.name)
    if not isinstance(entry, dict):
        return None
    if c.kind == "quantity":
        return _quantity(str(entry.get("value"))) if c.where == "capacity" else None
    if c.kind == "int":
        value = entry.get("int")
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    value = entry.get("string")
    return value if isinstance(value, str) else None


def nearest(c: Comparison, values: Iterable[Any]) -> Any:
    """The advertised value closest to the literal on the side the comparison refuses, None when none is."""
    present = sorted(set(values))
    if c.op == ">=":
        below = [v for v in present if v < c.literal or (c.strict and v == c.literal)]
        return below[-1] if below else None
    if c.op == "<=":
        above = [v for v in present if v > c.literal or (c.strict and v == c.literal)]
        return above[0] if above else None
    others = [v for v in present if v != c.literal]
    if not others:
        return None
    if c.kind == "string":
        counts = Counter(values)
        return min(others, key=lambda v: (-counts[v], v))
    if c.kind == "quantity":
        return min(others, key=lambda v: (abs(v.nanos - c.literal.nanos), v.nanos))
    return min(others, key=lambda v: (abs(v - c.literal), v))


@dataclass
class Trial:
    """A relaxation and what the simulation said of it."""

    kind: str
    change: str
    sim: Simulation
    ask_name: str

    @property
    def reason(self) -> str | None:
        return self.sim.reason

    @property
    def helps(self) -> bool:
        return self.sim.best is not None and self.reason not in SUGGESTED_FOR

    def to_dict(self) -> dict[str, Any]:
        fitting = [f.node for f in self.sim.fits if f.stage == Stage.FITS]
        would_match = sum(
            len(a.matches(ask))
            for a in self.sim.requests
            for ask in a.request.alternatives
            if ask.name == self.ask_name
        )
        if fitting:
            where = (
                f"{fitting[0]} fits" if len(fitting) == 1 else f"{len(fitting)} nodes fit ({', '.join(fitting[:3])})"
            )
        else:
            where = f"it would still wait ({self.reason})"
        return {
            "kind": self.kind,
            "change": f"{self.change}, {where}",
            "would_match": would_match,
            "nodes": fitting,
            "reason": self.reason or "ok",
        }


def suggest(
    inventory: Inventory,
    claims: Sequence[Object],
    sim: Simulation,
    nodes: Sequence[str] | None,
    cache: SelectorCache,
    siblings: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The relaxations of the stopping request that would get it past the verdict's reason, nearest first.

    Pods whose claims ask the same (a Job's replicas) share the answer, per inventory, as they share
    the simulation (``allocator.shared_simulations``): it names no claim when the Pod has one.
    """
    key = None
    if not siblings:
        specs = tuple(orjson.dumps((c.get("spec") or {}).get("devices"), option=orjson.OPT_SORT_KEYS) for c in claims)
        key = (specs, tuple(nodes) if nodes is not None else None, () if len(claims) == 1 else _names(claims))
        kept = _KEPT.setdefault(inventory, {})
        if key in kept:
            return copy.deepcopy(kept[key])
    found = _suggest(inventory, claims, sim, nodes, cache, siblings)
    if key is not None:
        if len(kept) >= _KEPT_MAX:
            del kept[next(iter(kept))]
        kept[key] = copy.deepcopy(found)
    return found


def _names(claims: Sequence[Object]) -> tuple[str, ...]:
    return tuple(ns_name(c)[1] for c in claims)


def _suggest(
    inventory: Inventory,
    claims: Sequence[Object],
    sim: Simulation,
    nodes: Sequence[str] | None,
    cache: SelectorCache,
    siblings: Sequence[str],
) -> list[dict[str, Any]]:
    best = sim.best
    failing = best.failing if best is not None else None
    if failing is None or sim.reason not in SUGGESTED_FOR:
        return []
    analysis = sim.analysis_for(failing)
    ask = failing.ask
    index = next((i for i, c in enumerate(claims) if uid_of(c) == analysis.claim_uid), None)
    if index is None:
        return []
    claim = claims[index]
    label = f"request {ask.name}" if len(claims) == 1 else f"request {ask.name} of claim {ns_name(claim)[1]}"

    def run(changed: Object) -> Simulation:
        return simulate(inventory, [changed if i == index else c for i, c in enumerate(claims)], nodes, cache, siblings)

    trials: list[Trial] = []
    constraint = failing.conflict.constraint if failing.conflict is not None else None
    if constraint is not None:
        key = constraint.kind  # matchAttribute | distinctAttribute, as the spec names it
        changed = copy.deepcopy(claim)
        devices = changed["spec"]["devices"]
        devices["constraints"] = [c for c in devices.get("constraints") or () if c.get(key) != constraint.attribute]
        trials.append(Trial("constraint", f"with `{key}: {constraint.attribute}` dropped", run(changed), ask.name))
    if ask.mode == "ExactCount" and ask.count > 1 and best is not None and best.stage == Stage.TOO_FEW:
        trial = _fewer(claim, ask, run)
        if trial is not None:
            trials.append(trial)
    if best is not None and best.stage == Stage.NO_MATCH:
        considered = [c.device for c in analysis.checks[ask.name] if c.outcome != CLASS_FALSE]
        tried = 0
        for position, expression in enumerate(ask.selectors):
            for c in comparisons(expression):
                if tried >= MAX_SELECTOR_CANDIDATES:
                    break
                values = [v for v in (advertised(d, c) for d in considered) if v is not None]
                value = nearest(c, values)
                if value is None:
                    continue
                tried += 1
                changed = copy.deepcopy(claim)
                _request_of(changed, ask.name)["selectors"][position] = {"cel": {"expression": c.rewritten(value)}}
                having = sum(1 for v in values if v == value)
                shown = str(value)
                change = (
                    f"{having} {'device has' if having == 1 else 'devices have'} {c.name} {shown}; "
                    f"{label} asks for {c.name} {c.shown}: with {c.name} {c.op} {shown}"
                )
                trials.append(Trial("selector", change, run(changed), ask.name))
    return [t.to_dict() for t in trials if t.helps]


def _fewer(claim: Object, ask: DeviceAsk, run: Any) -> Trial | None:
    """The largest count below the asked one that gets past the reason (counts fit downward)."""
    low, high, found = 1, ask.count - 1, None
    while low <= high:
        count = (low + high) // 2
        changed = copy.deepcopy(claim)
        _request_of(changed, ask.name)["count"] = count
        trial = Trial("count", f"with count {count} instead of {ask.count}", run(changed), ask.name)
        if trial.helps:
            found, low = trial, count + 1
        else:
            high = count - 1
    return found


def _request_of(claim: Object, ask_name: str) -> dict[str, Any]:
    """The ``exactly`` (or subrequest) of the claim's spec the ask is."""
    name, _, sub = ask_name.partition("/")
    for request in claim["spec"]["devices"].get("requests") or ():
        if request.get("name") != name:
            continue
        if sub:
            return next(s for s in request["firstAvailable"] if s.get("name") == sub)  # type: ignore[no-any-return]
        exactly = request.get("exactly")
        found = exactly if isinstance(exactly, dict) else request
        found.setdefault("selectors", [])
        return found  # type: ignore[no-any-return]
    raise LookupError(ask_name)
