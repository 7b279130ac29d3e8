"""The allocation simulator: which advertised devices a claim's requests could get, and why not.

It follows what the scheduler's structured allocator checks, in its order: the
DeviceClass selectors and the request selectors (CEL), then that enough matching
devices are reachable from one node, then that they are free (not allocated to
another claim), then that their taints are tolerated. Every device gets its own
outcome, so a verdict can say why each one was passed over.

Not modelled: request constraints (matchAttribute), consumable capacity sharing
beyond ``allowMultipleAllocations``, and node-level scheduling (CPU, node taints).
"""

from __future__ import annotations

import re
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from dashboard.domain.cel import (
    CompiledSelector,
    Device,
    SelectorCompileError,
    SelectorEvaluationError,
    compile_selector,
)
from dashboard.domain.inventory import (
    BLOCKING_EFFECTS,
    AdvertisedDevice,
    DeviceId,
    Inventory,
    NodeInfo,
)
from dashboard.domain.quantity import Quantity, QuantityError
from dashboard.domain.state import ClusterState, Object, ns_name, uid_of


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

    def wants(self) -> str:
        if self.mode == "All":
            return f"all devices of class {self.class_name}"
        noun = "device" if self.count == 1 else "devices"
        return f"{self.count} {noun} of class {self.class_name}"


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
    )


def claim_requests(claim: Object) -> list[ClaimRequest]:
    """The requests of a ResourceClaim (or of a template's claim spec)."""
    spec = claim.get("spec") or {}
    if "spec" in spec and "devices" not in spec:  # a ResourceClaimTemplate
        spec = spec["spec"] or {}
    out = []
    for req in (spec.get("devices") or {}).get("requests") or ():
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


def blocking_taints(device: AdvertisedDevice, tolerations: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Taints that keep the device from being allocated: effect None only informs."""
    tols = list(tolerations)
    return [
        t for t in device.taints if t.get("effect") in BLOCKING_EFFECTS and not any(tolerates(tol, t) for tol in tols)
    ]


def taint_label(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    key = f"{taint.get('key')}={value}" if value else str(taint.get("key"))
    return f"{key}:{taint.get('effect')}"


# --- selectors over devices ------------------------------------------------------------------------

MATCH = "match"
CLASS_FALSE = "class-selector-false"
SELECTOR_FALSE = "selector-false"
ERROR = "error"


@dataclass(frozen=True)
class DeviceCheck:
    device: AdvertisedDevice
    outcome: str  # MATCH | CLASS_FALSE | SELECTOR_FALSE | ERROR
    expression: str | None = None  # the selector that said no, or failed
    error: str | None = None
    from_class: bool = False  # whether that selector is the DeviceClass's

    @property
    def matched(self) -> bool:
        return self.outcome == MATCH


class SelectorCache:
    """Compiled selectors and CEL devices, built once per analysis."""

    def __init__(self) -> None:
        self._devices: dict[DeviceId, Device] = {}
        self._compiled: dict[str, CompiledSelector | SelectorCompileError] = {}
        # Every pending claim of a report asks the same class selector of the same devices.
        self._results: dict[tuple[str, DeviceId], tuple[bool, str | None]] = {}
        self._checks: dict[tuple[tuple[str, ...], tuple[str, ...]], list[DeviceCheck]] = {}

    def device(self, device: AdvertisedDevice) -> Device:
        cel_device = self._devices.get(device.id)
        if cel_device is None:
            cel_device = Device.from_slice_entry(device.driver, dict(device.entry))
            self._devices[device.id] = cel_device
        return cel_device

    def checks(
        self, devices: Sequence[AdvertisedDevice], class_exprs: Sequence[str], request_exprs: Sequence[str]
    ) -> list[DeviceCheck]:
        """Every device checked against one class + request selector set, once per analysis.

        Pending Pods of one workload ask the same thing; a report over all of them
        would otherwise walk every device once per Pod. The list is shared: read it only.
        """
        key = (tuple(class_exprs), tuple(request_exprs))
        found = self._checks.get(key)
        if found is None:
            found = self._checks[key] = [check_device(self, d, class_exprs, request_exprs) for d in devices]
        return found

    def evaluate(self, expr: str, device: AdvertisedDevice) -> tuple[bool, str | None]:
        """(matched, error); a selector that does not compile is an error on every device."""
        key = (expr, device.id)
        result = self._results.get(key)
        if result is None:
            result = self._results[key] = self._evaluate(expr, device)
        return result

    def _evaluate(self, expr: str, device: AdvertisedDevice) -> tuple[bool, str | None]:
        compiled = self._compiled.get(expr)
        if compiled is None:
            try:
                compiled = compile_selector(expr)
            except SelectorCompileError as exc:
                compiled = exc
            self._compiled[expr] = compiled
        if isinstance(compiled, SelectorCompileError):
            return False, f"selector does not compile: {compiled}"
        try:
            return bool(compiled.matches(self.device(device))), None
        except SelectorEvaluationError as exc:
            return False, str(exc)


_CACHES: weakref.WeakKeyDictionary[Inventory, SelectorCache] = weakref.WeakKeyDictionary()


def selector_cache(inventory: Inventory) -> SelectorCache:
    """One cache per inventory (one state), shared by every simulation over it."""
    cache = _CACHES.get(inventory)
    if cache is None:
        cache = _CACHES[inventory] = SelectorCache()
    return cache


def check_device(
    cache: SelectorCache, device: AdvertisedDevice, class_exprs: Sequence[str], request_exprs: Sequence[str]
) -> DeviceCheck:
    """Class selectors first, then the request's; the first that says no decides."""
    for exprs, from_class in ((class_exprs, True), (request_exprs, False)):
        for expr in exprs:
            ok, error = cache.evaluate(expr, device)
            if error is not None:
                return DeviceCheck(device, ERROR, expr, error, from_class)
            if not ok:
                return DeviceCheck(device, CLASS_FALSE if from_class else SELECTOR_FALSE, expr, None, from_class)
    return DeviceCheck(device, MATCH)


# --- match-devices ---------------------------------------------------------------------------------


def match_devices(state: ClusterState, expression: str, class_name: str | None = None) -> dict[str, Any]:
    """Which advertised devices ``expression`` matches (within ``class_name`` when given).

    A bad expression raises SelectorCompileError; an unknown class DeviceClassNotFound.
    """
    compile_selector(expression)  # fail loudly before looking at any device
    class_exprs: tuple[str, ...] = ()
    if class_name:
        device_class = find_class(state, class_name)
        if device_class is None:
            raise DeviceClassNotFound(f"DeviceClass {class_name} does not exist")
        class_exprs = class_selectors(device_class)
    cache = SelectorCache()
    inventory = Inventory.of(state)
    matched, errors, rejected = [], [], []
    failed: list[DeviceCheck] = []
    for device in inventory.devices:
        check = check_device(cache, device, class_exprs, (expression,))
        if check.matched:
            node = device.node_name
            if node is None:
                nodes = inventory.nodes_of(device)
                node = nodes[0] if len(nodes) == 1 else None
            matched.append({"driver": device.driver, "pool": device.pool, "device": device.name, "node": node})
        elif check.outcome == ERROR:
            where = "class selector" if check.from_class else "expression"
            errors.append({"device": device.label, "error": f"{where}: {check.error}"})
        else:
            failed.append(check)
            whose = f"DeviceClass {class_name} selector" if check.from_class else "expression"
            rejected.append({"device": device.label, "why": f"the {whose} `{check.expression}` is false"})
    return {
        "total": len(inventory.devices),
        "matched": matched,
        "errors": errors,
        "rejected": rejected,
        "why_not": _why_not(failed),
    }


def _why_not(failed: list[DeviceCheck]) -> list[str]:
    """One sentence per failing selector, grouped by the values it reads ("all 16 have memory 40Gi")."""
    by_class = [c for c in failed if c.from_class]
    by_request = [c for c in failed if not c.from_class]
    return [
        phrase
        for whose, group in (("class", by_class), ("request", by_request))
        if group
        for phrase in _fail_phrases(group, whose, len(group))
    ]


# --- the simulation --------------------------------------------------------------------------------


class Stage(IntEnum):
    """How far an ask gets on a node; the furthest stage over all nodes names the reason."""

    NO_MATCH = 0
    TOO_FEW = 1
    IN_USE = 2
    TAINTED = 3
    FITS = 4


STAGE_REASONS = {
    Stage.NO_MATCH: "selector-unsatisfiable",
    Stage.TOO_FEW: "insufficient-devices",
    Stage.IN_USE: "devices-in-use",
    Stage.TAINTED: "devices-tainted",
}


@dataclass
class AskOnNode:
    """One ask tried on one node, after earlier asks of the same Pod took their devices."""

    ask: DeviceAsk
    claim_name: str
    node: str
    stage: Stage
    needed: int
    matching: list[AdvertisedDevice]  # match and reachable from the node, not taken by earlier asks
    taken_by_siblings: int = 0
    held: dict[DeviceId, Object] = field(default_factory=dict)
    tainted: dict[DeviceId, list[Mapping[str, Any]]] = field(default_factory=dict)
    picked: list[AdvertisedDevice] = field(default_factory=list)
    incomplete_pools: list[str] = field(default_factory=list)

    @property
    def progress(self) -> int:
        """How many devices got through the stage that failed (to rank nodes at the same stage)."""
        if self.stage is Stage.IN_USE:
            return len(self.matching) - len(self.held)
        if self.stage is Stage.TAINTED:
            return len(self.matching) - len(self.held) - len(self.tainted)
        return len(self.matching)


@dataclass
class NodeFit:
    node: str
    asks: list[AskOnNode]  # per request, the alternative chosen (or the one that got furthest)

    @property
    def stage(self) -> Stage:
        return min((a.stage for a in self.asks), default=Stage.FITS)

    @property
    def failing(self) -> AskOnNode | None:
        stage = self.stage
        return next((a for a in self.asks if a.stage == stage), None) if stage < Stage.FITS else None

    def score(self) -> tuple[int, int]:
        failing = self.failing
        return (int(self.stage), failing.progress if failing else 0)


@dataclass
class RequestAnalysis:
    """A claim request's device checks, per alternative, independent of nodes."""

    claim_uid: str
    claim_name: str
    request: ClaimRequest
    classes: dict[str, Object | None]
    checks: dict[str, list[DeviceCheck]]  # by ask name

    _matched: dict[str, list[DeviceCheck]] = field(default_factory=dict, repr=False)
    _by_node: dict[str, tuple[dict[str, list[AdvertisedDevice]], list[AdvertisedDevice]]] = field(
        default_factory=dict, repr=False
    )

    def matches(self, ask: DeviceAsk) -> list[DeviceCheck]:
        found = self._matched.get(ask.name)
        if found is None:
            found = self._matched[ask.name] = [c for c in self.checks[ask.name] if c.matched]
        return found

    def reachable_matches(self, ask: DeviceAsk, node: NodeInfo) -> list[AdvertisedDevice]:
        """Matching devices usable from ``node``; node-local ones are indexed, as most devices are."""
        index = self._by_node.get(ask.name)
        if index is None:
            local: dict[str, list[AdvertisedDevice]] = {}
            elsewhere: list[AdvertisedDevice] = []
            for check in self.matches(ask):
                device = check.device
                if device.node_name is not None:
                    local.setdefault(device.node_name, []).append(device)
                else:
                    elsewhere.append(device)
            index = self._by_node[ask.name] = (local, elsewhere)
        local, elsewhere = index
        return local.get(node.name, []) + [d for d in elsewhere if d.reachable_from(node)]


@dataclass
class Simulation:
    requests: list[RequestAnalysis]
    fits: list[NodeFit]
    claim_names: list[str]
    pinned: list[str] | None = None  # the only nodes the Pod could still go to

    @property
    def best(self) -> NodeFit | None:
        if not self.fits:
            return None
        # max() keeps the first of equals, and fits come in node-name order
        return max(self.fits, key=lambda f: f.score())

    @property
    def reason(self) -> str | None:
        best = self.best
        if best is None:
            return "insufficient-devices"
        return STAGE_REASONS.get(best.stage)

    @property
    def fitting_node(self) -> NodeFit | None:
        best = self.best
        return best if best is not None and best.stage == Stage.FITS else None

    def message(self) -> str:
        """One sentence on why the claims cannot be allocated (or where they fit)."""
        best = self.best
        if best is None:
            return "no node in the cluster could host the claims' devices"
        failing = best.failing
        if failing is None:
            picked = ", ".join(d.label for a in best.asks for d in a.picked)
            return f"the requests fit on {best.node} ({picked})"
        analysis = self._analysis_for(failing)
        subject = self._request_subject(analysis)
        if best.stage == Stage.NO_MATCH:
            return f"no device satisfies {subject}: {self._no_match_details(analysis)}"
        if best.stage == Stage.TOO_FEW:
            return self._too_few(subject, failing, analysis)
        if best.stage == Stage.IN_USE:
            return self._in_use(subject, failing)
        return self._tainted(subject, failing)

    def device_outcomes(self) -> list[dict[str, Any]]:
        """Per device and ask, why it was (not) usable on the best node, as evidence entries."""
        return list(self.iter_device_outcomes())

    def iter_device_outcomes(self) -> Iterator[dict[str, Any]]:
        """``device_outcomes`` one at a time: evidence wants only the first few of thousands."""
        best = self.best
        for analysis in self.requests:
            for ask in analysis.request.alternatives:
                on_node = next((a for a in best.asks if a.ask is ask), None) if best else None
                for check in analysis.checks[ask.name]:
                    yield _outcome_entry(analysis, ask, check, on_node)

    # -- message parts --

    def _analysis_for(self, on_node: AskOnNode) -> RequestAnalysis:
        for analysis in self.requests:
            if on_node.ask in analysis.request.alternatives and analysis.claim_name == on_node.claim_name:
                return analysis
        raise LookupError(on_node.ask.name)

    def _request_subject(self, analysis: RequestAnalysis) -> str:
        subject = f"request {analysis.request.name}"
        if len(self.claim_names) > 1:
            subject += f" of claim {analysis.claim_name}"
        return subject

    def _no_match_details(self, analysis: RequestAnalysis) -> str:
        parts = []
        for ask in analysis.request.alternatives:
            summary = summarize_checks(analysis.checks[ask.name], ask, analysis.classes.get(ask.class_name))
            if analysis.request.prioritized:
                summary = f"subrequest {ask.name.split('/', 1)[-1]}: {summary}"
            parts.append(summary)
        return "; ".join(parts)

    def _too_few(self, subject: str, failing: AskOnNode, analysis: RequestAnalysis) -> str:
        ask = failing.ask
        if failing.incomplete_pools:
            pools = ", ".join(failing.incomplete_pools)
            return (
                f"{subject} asks for {ask.wants()} on {failing.node}, but pool {pools} is being updated "
                "(not all of its slices are published)"
            )
        matching = analysis.matches(ask)
        per_node = _per_node_counts(matching, self.fits, ask)
        total = len(matching)
        noun = "device matches" if total == 1 else "devices match"
        if not per_node or max(per_node.values()) == 0:
            where = sorted({d.device.reach.describe() for d in matching})
            return (
                f"{subject} needs {ask.wants()}: {total} {noun}, but none is reachable from a node "
                f"of the cluster (they are advertised for {', '.join(where)})"
            )
        if failing.taken_by_siblings:
            on_node = len(failing.matching) + failing.taken_by_siblings
            pinned = " (its allocated claims pin it there)" if self.pinned else ""
            return (
                f"{subject} needs {ask.wants()} on one node, but the Pod's other requests already take "
                f"{failing.taken_by_siblings} of the {on_node} matching devices on {failing.node}{pinned}, "
                f"leaving {len(failing.matching)}"
            )
        ranked = sorted(per_node.items(), key=lambda kv: (-kv[1], kv[0]))
        spread = ", ".join(f"{n}: {c}" for n, c in ranked[:4])
        if len(ranked) > 4:
            spread += f", {len(ranked) - 4} more nodes"
        most = max(per_node.values())
        if total < failing.needed:
            return f"{subject} needs {ask.wants()} on one node, but only {total} {noun} in the cluster ({spread})"
        return (
            f"{subject} needs {ask.wants()} on one node: {total} {noun} in the cluster, "
            f"but at most {most} are on one node ({spread})"
        )

    def _in_use(self, subject: str, failing: AskOnNode) -> str:
        holders = Counter(_claim_label(c) for c in failing.held.values())
        named = ", ".join(f"{name} ({n})" for name, n in sorted(holders.items(), key=lambda kv: (-kv[1], kv[0])))
        return (
            f"{subject} needs {failing.ask.wants()} and {len(failing.matching)} match on {failing.node}, "
            f"but {len(failing.held)} of them are allocated to other claims: {named}"
        )

    def _tainted(self, subject: str, failing: AskOnNode) -> str:
        taints = Counter(taint_label(t) for ts in failing.tainted.values() for t in ts)
        named = ", ".join(f"{name} ({n})" for name, n in sorted(taints.items(), key=lambda kv: (-kv[1], kv[0])))
        free = len(failing.matching) - len(failing.held)
        return (
            f"{subject} needs {failing.ask.wants()} and {free} free matching devices are on {failing.node}, "
            f"but {len(failing.tainted)} of them carry taints the request does not tolerate: {named}"
        )


def _claim_label(claim: Object) -> str:
    namespace, name = ns_name(claim)
    return f"{namespace}/{name}"


def _per_node_counts(matching: list[DeviceCheck], fits: list[NodeFit], ask: DeviceAsk) -> dict[str, int]:
    counts = {}
    for fit in fits:
        on_node = next((a for a in fit.asks if a.ask is ask), None)
        if on_node is not None:
            counts[fit.node] = len(on_node.matching) + on_node.taken_by_siblings
    return counts


def _outcome_entry(
    analysis: RequestAnalysis, ask: DeviceAsk, check: DeviceCheck, on_node: AskOnNode | None
) -> dict[str, Any]:
    device = check.device
    entry: dict[str, Any] = {
        "kind": "DeviceMatch",
        "claim": analysis.claim_uid,
        "request": ask.name,
        "driver": device.driver,
        "pool": device.pool,
        "device": device.name,
    }
    if check.outcome == CLASS_FALSE:
        entry.update(outcome="class-selector-false", selector=check.expression)
    elif check.outcome == SELECTOR_FALSE:
        entry.update(outcome="selector-false", selector=check.expression)
    elif check.outcome == ERROR:
        entry.update(outcome="evaluation-error", selector=check.expression, error=check.error)
    elif on_node is None:
        entry.update(outcome="match")
    elif device.id in on_node.held:
        entry.update(outcome="held", holder=_claim_label(on_node.held[device.id]))
    elif device.id in on_node.tainted:
        entry.update(outcome="tainted", taints=[taint_label(t) for t in on_node.tainted[device.id]])
    elif not any(d.id == device.id for d in on_node.matching):
        entry.update(outcome="not-reachable", node=on_node.node)
    elif any(d.id == device.id for d in on_node.picked):
        entry.update(outcome="picked", node=on_node.node)
    else:
        entry.update(outcome="match")
    return entry


def _incomplete_pools(devices: list[AdvertisedDevice]) -> list[str]:
    return sorted({d.pool for d in devices if not d.pool_complete})


def _ask_on_node(
    inventory: Inventory,
    analysis: RequestAnalysis,
    ask: DeviceAsk,
    node: NodeInfo,
    taken: set[DeviceId],
    own_claims: set[str],
) -> AskOnNode:
    matches = analysis.reachable_matches(ask, node)
    matching = [d for d in matches if d.id not in taken]
    result = AskOnNode(
        ask, analysis.claim_name, node.name, Stage.NO_MATCH, ask.count, matching, len(matches) - len(matching)
    )
    if not analysis.matches(ask):
        return result
    if ask.mode == "All":
        result.needed = len(matching)
        result.incomplete_pools = _incomplete_pools(matching)
    if not matching or len(matching) < result.needed or result.incomplete_pools:
        result.stage = Stage.TOO_FEW
        return result
    for device in matching:
        holder = inventory.holders.get(device.id)
        # adminAccess and shareable devices may be used next to their holder
        blocked = holder is not None and not ask.admin_access and not device.shareable
        if blocked and holder is not None and uid_of(holder) not in own_claims:
            result.held[device.id] = holder
    free = [d for d in matching if d.id not in result.held]
    if len(free) < result.needed or (ask.mode == "All" and result.held):
        result.stage = Stage.IN_USE
        return result
    for device in free:
        taints = blocking_taints(device, ask.tolerations)
        if taints:
            result.tainted[device.id] = taints
    usable = [d for d in free if d.id not in result.tainted]
    if len(usable) < result.needed or (ask.mode == "All" and result.tainted):
        result.stage = Stage.TAINTED
        return result
    result.picked = usable[: result.needed]
    result.stage = Stage.FITS
    return result


def analyze_request(
    inventory: Inventory, cache: SelectorCache, claim: Object, request: ClaimRequest
) -> RequestAnalysis:
    classes: dict[str, Object | None] = {}
    checks: dict[str, list[DeviceCheck]] = {}
    for ask in request.alternatives:
        device_class = classes.setdefault(ask.class_name, find_class(inventory.state, ask.class_name))
        class_exprs = class_selectors(device_class)
        checks[ask.name] = cache.checks(inventory.devices, class_exprs, tuple(ask.selectors))
    return RequestAnalysis(uid_of(claim), ns_name(claim)[1], request, classes, checks)


def simulate(
    inventory: Inventory,
    claims: Sequence[Object],
    nodes: Iterable[str] | None = None,
    cache: SelectorCache | None = None,
    sibling_claims: Iterable[str] = (),
) -> Simulation:
    """Try to allocate every request of ``claims`` on one node, for each candidate node.

    All of one Pod's claims are simulated together: the devices must all be
    reachable from the node the Pod will run on, and one request's devices are
    not available to the next. ``nodes`` narrows the candidates (e.g. to the node
    an already allocated claim pins the Pod to); devices held by
    ``sibling_claims`` (the Pod's claims allocated already) count as taken by the
    Pod's other requests rather than as in use by strangers.
    """
    cache = cache or selector_cache(inventory)
    analyses = [analyze_request(inventory, cache, c, r) for c in claims for r in claim_requests(c)]
    own = {uid_of(c) for c in claims} | set(sibling_claims)
    held_by_siblings = {d for d, holder in inventory.holders.items() if uid_of(holder) in own}
    allowed = set(nodes) if nodes is not None else None
    candidates = [n for n in inventory.nodes if allowed is None or n.name in allowed]
    if allowed is not None:
        known = {n.name for n in inventory.nodes}
        candidates += [NodeInfo(n) for n in sorted(allowed - known)]
    fits = []
    for node in candidates:
        taken: set[DeviceId] = set(held_by_siblings)
        asks = []
        for analysis in analyses:
            best: AskOnNode | None = None
            for ask in analysis.request.alternatives:
                tried = _ask_on_node(inventory, analysis, ask, node, taken, own)
                if best is None or tried.stage > best.stage:
                    best = tried
                if tried.stage == Stage.FITS:
                    break  # firstAvailable: the first subrequest that fits wins
            assert best is not None
            taken.update(d.id for d in best.picked)
            asks.append(best)
        fits.append(NodeFit(node.name, asks))
    pinned = sorted(allowed) if allowed is not None else None
    return Simulation(analyses, fits, [ns_name(c)[1] for c in claims], pinned)


def missing_inventory(inventory: Inventory, claim: Object) -> str | None:
    """Why no device could ever be found for a claim, when no slice advertises its drivers.

    Per request, the inventory is there if any alternative's class has devices of
    its driver advertised (or, for a class that does not pin a driver, any device).
    """
    advertised = inventory.drivers()
    for request in claim_requests(claim):
        wanted: set[str] = set()
        satisfied = False
        for ask in request.alternatives:
            drivers = class_drivers(find_class(inventory.state, ask.class_name))
            wanted |= drivers
            if (drivers & advertised) or (not drivers and advertised):
                satisfied = True
        if not satisfied:
            if wanted:
                names = ", ".join(sorted(wanted))
                plural = "s" if len(wanted) > 1 else ""
                return f"no ResourceSlice advertises any device of driver{plural} {names} (request {request.name})"
            return f"no ResourceSlice advertises any device (request {request.name})"
    return None


# --- summaries of why devices fail -----------------------------------------------------------------

_REF = re.compile(
    r"""device\.(attributes|capacity)\s*\[\s*(['"])([^'"]+)\2\s*\]\s*(?:\.\s*([A-Za-z_]\w*)|\[\s*(['"])([^'"]+)\5\s*\])"""
)


def selector_references(expr: str) -> list[tuple[str, str, str]]:
    """``(kind, domain, name)`` of the attributes/capacities an expression reads; kind ``driver`` too."""
    refs: list[tuple[str, str, str]] = []
    for m in _REF.finditer(expr):
        ref = (m.group(1), m.group(3), m.group(4) or m.group(6))
        if ref not in refs:
            refs.append(ref)
    if "device.driver" in expr:
        refs.append(("driver", "", "driver"))
    return refs


def _quantity_key(value: str) -> Any:
    try:
        return Quantity.parse(value).nanos
    except QuantityError:
        return value


def _value_of(device: AdvertisedDevice, ref: tuple[str, str, str]) -> tuple[Any, str]:
    """(grouping key, how to show it) for one reference."""
    kind, domain, name = ref
    if kind == "driver":
        return device.driver, f"driver {device.driver}"
    if kind == "capacity":
        raw = device.capacity_value(name, domain)
        if raw is None:
            return None, f"no {name}"
        return _quantity_key(raw), f"{name} {raw}"
    value = device.attribute(name, domain)
    if value is None:
        return None, f"no {name}"
    shown = f"'{value}'" if isinstance(value, str) and " " in value else str(value)
    return value, f"{name} {shown}"


def _group_phrase(checks: list[DeviceCheck], expr: str, total: int) -> str:
    """E.g. "all 8 have memory 40Gi" or "3 have memory 80Gi and 1 has memory 24Gi"."""
    refs = selector_references(expr)
    if len({c.device.driver for c in checks}) == 1:
        refs = [r for r in refs if r[0] != "driver"]  # the same for every device: says nothing
    shown_as: dict[tuple[Any, ...], Counter[str]] = {}
    counts: Counter[tuple[Any, ...]] = Counter()
    for check in checks:
        pairs = [_value_of(check.device, r) for r in refs]
        key = tuple(k for k, _ in pairs)
        # 80Gi and 81920Mi group together; show the spelling most devices use
        shown_as.setdefault(key, Counter())[" and ".join(s for _, s in pairs)] += 1
        counts[key] += 1
    ranked = counts.most_common()
    phrases = []
    for key, n in ranked[:3]:
        desc = shown_as[key].most_common(1)[0][0]
        who = str(n)
        if len(ranked) == 1 and n == total and n > 1:
            who = "both" if n == 2 else f"all {n}"
        verb = "has" if who == "1" else "have"
        phrases.append(f"{who} {verb} {desc}" if desc else who)
    if len(ranked) > 3:
        phrases.append(f"{sum(n for _, n in ranked[3:])} more have other values")
    if len(phrases) > 1:
        return ", ".join(phrases[:-1]) + " and " + phrases[-1]
    return phrases[0] if phrases else "none"


def summarize_checks(checks: list[DeviceCheck], ask: DeviceAsk, device_class: Object | None) -> str:
    """Why the devices a class could offer fail an ask, grouped by the values the selectors read.

    E.g. "8 devices of class gpu.nvidia.com checked, all 8 have memory 40Gi, which the
    request selector `…` rejects".
    """
    drivers = class_drivers(device_class)
    considered = [c for c in checks if not drivers or c.device.driver in drivers]
    in_class = [c for c in considered if c.outcome != CLASS_FALSE and not (c.outcome == ERROR and c.from_class)]
    parts: list[str] = []
    if not in_class:
        scope = f"driver {', '.join(sorted(drivers))}" if drivers else "any driver"
        parts.append(f"{len(considered)} devices of {scope} checked, none is in class {ask.class_name}")
        parts += _fail_phrases([c for c in considered if c.outcome == CLASS_FALSE], "class", len(considered))
    else:
        noun = "device" if len(in_class) == 1 else "devices"
        parts.append(f"{len(in_class)} {noun} of class {ask.class_name} checked")
        parts += _fail_phrases([c for c in in_class if c.outcome == SELECTOR_FALSE], "request", len(in_class))
    errors = [c for c in considered if c.outcome == ERROR]
    if errors:
        first = errors[0]
        parts.append(f"{len(errors)} could not be evaluated ({first.error} in `{first.expression}`)")
    return ", ".join(parts)


def _fail_phrases(failed: list[DeviceCheck], whose: str, total: int) -> list[str]:
    by_expr: dict[str, list[DeviceCheck]] = {}
    for check in failed:
        by_expr.setdefault(check.expression or "", []).append(check)
    return [
        f"{_group_phrase(group, expr, total)}, which the {whose} selector `{expr}` rejects"
        for expr, group in by_expr.items()
    ]


def describe_device(device: AdvertisedDevice) -> dict[str, Any]:
    """A device as evidence: identity, where it is, its uuid."""
    out: dict[str, Any] = {
        "kind": "Device",
        "driver": device.driver,
        "pool": device.pool,
        "device": device.name,
        "node": device.node_name,
        "slice": device.slice_name,
    }
    if device.uuid:
        out["uuid"] = device.uuid
    return out
