"""The allocation simulator: which advertised devices a claim's requests could get, and why not.

It follows what the scheduler's structured allocator checks, in its order: the
DeviceClass selectors and the request selectors (CEL), then that enough matching
devices are reachable from one node, then that they are free (not allocated to
another claim, their shared counters and consumable capacity not taken by other
allocations), then that their taints are tolerated, and finally that a
combination of them satisfies the claim's constraints and goes together on
counters and capacity. Every device gets its own outcome, so a verdict can say
why each one was passed over.

Each claim's devices are first chosen after the previous claim's, request by
request; where that leaves a request without devices, every request of every
claim is searched together, as the allocator does. Not modelled: node-level
scheduling (CPU, node taints). Checked against the allocator itself by
tests/test_allocator_differential.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import Any

from domain.allocator.cel import compile_selector
from domain.allocator.constraints import Constraint, Picked, applying, claim_constraints, conflict_sentence
from domain.allocator.device_checks import (
    CLASS_FALSE,
    ERROR,
    MATCH,
    SELECTOR_FALSE,
    DeviceCheck,
    SelectorCache,
    summarize_checks,
)
from domain.allocator.device_checks import selector_cache as selector_cache
from domain.allocator.device_checks import selector_references as selector_references
from domain.allocator.device_stock import DeviceStock, InventoryStock
from domain.allocator.picking import BUDGET, Choice, search
from domain.allocator.refusals import refusals
from domain.cluster.asks import ClaimRequest, DeviceAsk, class_selectors, taint_label
from domain.cluster.asks import DeviceClassNotFound as DeviceClassNotFound
from domain.cluster.asks import claim_requests as claim_requests
from domain.cluster.asks import class_drivers as class_drivers
from domain.cluster.asks import find_class as find_class
from domain.cluster.asks import tolerates as tolerates
from domain.cluster.state import ClusterState, Object, ns_name, uid_of
from domain.inventory.devices import (
    BLOCKING_EFFECTS,
    RULE_KEY,
    AdvertisedDevice,
    DeviceId,
    Inventory,
    NodeInfo,
    PoolState,
)
from domain.inventory.sharing import (
    Amounts,
    Sharing,
    Shortage,
    Unfit,
    Usage,
    device_counters,
    ledger_of,
    share_of,
    short_name,
)

__all__ = ["SelectorCache", "selector_cache", "selector_references"]


# --- match-devices ---------------------------------------------------------------------------------


def blocking_taints(device: AdvertisedDevice, tolerations: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Taints that keep the device from being allocated: effect None only informs."""
    tols = list(tolerations)
    return [
        t for t in device.taints if t.get("effect") in BLOCKING_EFFECTS and not any(tolerates(tol, t) for tol in tols)
    ]


def match_devices(
    state: ClusterState, expression: str, class_name: str | None = None, stock: DeviceStock | None = None
) -> dict[str, Any]:
    """Which advertised devices ``expression`` matches (within ``class_name`` when given).

    The devices, their holders and availability come from ``stock`` when given (the derived layer's
    rows), else from the state's ``Inventory``; the DeviceClass from the state either way.
    A bad expression raises SelectorCompileError; an unknown class DeviceClassNotFound.
    """
    compile_selector(expression)  # fail loudly before looking at any device
    class_exprs: tuple[str, ...] = ()
    if class_name:
        device_class = find_class(state, class_name)
        if device_class is None:
            raise DeviceClassNotFound(f"DeviceClass {class_name} does not exist")
        class_exprs = class_selectors(device_class)
    stock = stock or InventoryStock(Inventory.of(state))
    devices = stock.devices
    verdicts = stock.selectors.verdicts(devices, class_exprs, (expression,))
    matched = []
    # A device on a node of its own has the same entry while it is available, in this answer and the
    # next snapshot's: kept by the selector cache (shared between answers, so never changed in place).
    places = stock.selectors.memo(("matched",))
    for device, verdict in zip(devices, verdicts, strict=True):
        if verdict.outcome == MATCH:
            entry: dict[str, Any] | None = places.get(device.id)
            if entry is None:
                node = device.reach.node_name
                if node is None:  # where it is reachable from depends on the Nodes: asked each time
                    nodes = stock.nodes_of(device)
                    node = nodes[0] if len(nodes) == 1 else None
                entry = {"driver": device.driver, "pool": device.pool, "device": device.name, "node": node}
                if device.reach.node_name is not None:
                    places[device.id] = entry
            holder = stock.holder_label(device.id)
            if holder is not None and not device.shareable:
                entry = {**entry, "available": False, "unavailable": f"allocated to {holder}"}
            else:
                shortage = stock.unavailable(device)
                if shortage is not None:
                    entry = {**entry, "available": False, "unavailable": shortage}
            matched.append(entry)  # an available device's entry keeps the shape it always had
    # The errors, rejections and why-not sentences follow from the verdicts alone: asked again of the
    # same devices (a new snapshot whose slices did not change) they are the lists of the last answer,
    # shared, so no reader may change them. Only the matched entries name holders, which move.
    errors, rejected, why_not = stock.selectors.kept(
        devices,
        ("refusals", class_name, class_exprs, expression),
        lambda: refusals(stock.selectors, devices, verdicts, (class_name, class_exprs, expression)),
    )
    return {"total": len(devices), "matched": matched, "errors": errors, "rejected": rejected, "why_not": why_not}


def class_matches(state: ClusterState) -> dict[str, dict[str, int]]:
    """Per DeviceClass, how many advertised devices its selectors match, and fail to evaluate on, of
    how many: the device classes page's counts (``match_devices`` with no expression of its own)."""
    inventory = Inventory.of(state)
    cache = selector_cache(inventory)
    counts = {}
    for device_class in state.of_kind("DeviceClass"):
        name = str((device_class.get("metadata") or {}).get("name") or "")
        # Counted from the verdicts alone: match_devices' entries name each device's holder.
        outcomes = [v.outcome for v in cache.verdicts(inventory.devices, class_selectors(device_class), ("true",))]
        counts[name] = {"matched": outcomes.count(MATCH), "errors": outcomes.count(ERROR), "total": len(outcomes)}
    return dict(sorted(counts.items()))


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

    ask: DeviceAsk  # one claim's own (claim_requests makes new ones per claim): told apart by identity
    node: str
    stage: Stage
    needed: int
    matching: list[AdvertisedDevice]  # match and reachable from the node, not taken by earlier asks
    taken_by_siblings: int = 0
    held: dict[DeviceId, Object] = field(default_factory=dict)
    tainted: dict[DeviceId, list[Mapping[str, Any]]] = field(default_factory=dict)
    picked: list[AdvertisedDevice] = field(default_factory=list)
    refused_pools: list[PoolState] = field(default_factory=list)  # being updated or invalid: nothing is taken from them
    short: dict[DeviceId, Shortage] = field(default_factory=dict)  # counters or capacity taken by others
    usable: list[AdvertisedDevice] = field(default_factory=list)  # free and tolerated: what picking chose from
    conflict: Conflict | None = None  # usable devices enough, but no combination of them goes together

    @property
    def progress(self) -> int:
        """How many devices got through the stage that failed (to rank nodes at the same stage)."""
        if self.stage is Stage.IN_USE:
            return len(self.matching) - len(self.held) - len(self.short)
        if self.stage is Stage.TAINTED:
            return len(self.matching) - len(self.held) - len(self.short) - len(self.tainted)
        return len(self.matching)


@dataclass(frozen=True)
class Conflict:
    """Why the usable devices of an ask do not go together: a constraint, or shared counters/capacity."""

    constraint: Constraint | None
    earlier: tuple[Picked, ...] = ()  # devices the claim's previous requests took
    exhausted: bool = False  # the search gave up before trying every combination
    gave_up: bool = False  # an "All" request broke the constraint: the allocator stops there, for the node


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
    constraints: tuple[Constraint, ...] = ()  # the claim's

    _matched: dict[str, list[DeviceCheck]] = field(default_factory=dict, repr=False)
    _unfit: dict[str, dict[DeviceId, Unfit]] = field(default_factory=dict, repr=False)
    _shares: dict[tuple[str, DeviceId], Amounts | Unfit] = field(default_factory=dict, repr=False)
    _by_node: dict[str, tuple[dict[str, list[AdvertisedDevice]], list[AdvertisedDevice]]] = field(
        default_factory=dict, repr=False
    )

    def matches(self, ask: DeviceAsk) -> list[DeviceCheck]:
        """Devices the selectors accept and whose capacity could ever give what the ask requests."""
        found = self._matched.get(ask.name)
        if found is None:
            found = [c for c in self.checks[ask.name] if c.matched]
            if ask.capacity:
                unfit = self._unfit[ask.name] = {}
                for check in found:
                    share = self.share(ask, check.device)
                    if isinstance(share, Unfit):
                        unfit[check.device.id] = share
                found = [c for c in found if c.device.id not in unfit]
            self._matched[ask.name] = found
        return found

    def unfit(self, ask: DeviceAsk) -> dict[DeviceId, Unfit]:
        self.matches(ask)
        return self._unfit.get(ask.name, {})

    def share(self, ask: DeviceAsk, device: AdvertisedDevice) -> Amounts | Unfit:
        """What one allocation of the device for the ask consumes of its capacity."""
        key = (ask.name, device.id)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = share_of(device, ask.capacity_requests)
        return share

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

    @cached_property  # read by the verdict, its message and its evidence
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
        analysis = self.analysis_for(failing)
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

    def analysis_for(self, on_node: AskOnNode) -> RequestAnalysis:
        """The claim request the ask on a node belongs to."""
        for analysis in self.requests:
            if any(on_node.ask is ask for ask in analysis.request.alternatives):
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
            device_class = analysis.classes.get(ask.class_name)
            summary = summarize_checks(analysis.checks[ask.name], ask.class_name, class_drivers(device_class))
            unfit = list(analysis.unfit(ask).values())
            if unfit:
                first = unfit[0]
                summary += (
                    f", {len(unfit)} cannot give {short_name(first.capacity, first.device.driver)} "
                    f"{first.requested} ({first.device.name} {first.why})"
                )
            if analysis.request.prioritized:
                summary = f"subrequest {ask.name.split('/', 1)[-1]}: {summary}"
            parts.append(summary)
        return "; ".join(parts)

    def _too_few(self, subject: str, failing: AskOnNode, analysis: RequestAnalysis) -> str:
        ask = failing.ask
        if failing.conflict is not None:
            return _conflict_message(subject, failing, failing.conflict)
        if failing.refused_pools:
            drivers = class_drivers(analysis.classes.get(ask.class_name))
            refusals = "; ".join(p.why(bool(drivers) and p.driver not in drivers) for p in failing.refused_pools)
            return f"{subject} asks for {ask.wants()} on {failing.node}, but {refusals}"
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
        parts = [f"{len(failing.held)} of them are allocated to other claims: {named}"] if failing.held else []
        shortages = list(failing.short.values())
        if shortages:
            shown = "; ".join(s.sentence() for s in shortages[:2])
            more = f"; {len(shortages) - 2} more likewise" if len(shortages) > 2 else ""
            verb = "lacks" if len(shortages) == 1 else "lack"
            lack = f"{len(shortages)} of them {verb} shared counters or capacity other claims hold"
            parts.append(f"{lack}: {shown}{more}")
        return (
            f"{subject} needs {failing.ask.wants()} and {len(failing.matching)} match on {failing.node}, "
            f"but {'; '.join(parts)}"
        )

    def _tainted(self, subject: str, failing: AskOnNode) -> str:
        taints = Counter(taint_named(t) for ts in failing.tainted.values() for t in ts)
        named = ", ".join(f"{name} ({n})" for name, n in sorted(taints.items(), key=lambda kv: (-kv[1], kv[0])))
        free = len(failing.matching) - len(failing.held)
        return (
            f"{subject} needs {failing.ask.wants()} and {free} free matching devices are on {failing.node}, "
            f"but {len(failing.tainted)} of them carry taints the request does not tolerate: {named}"
        )


def _conflict_message(subject: str, failing: AskOnNode, conflict: Conflict) -> str:
    ask = failing.ask
    if conflict.gave_up and conflict.constraint is not None:
        return (
            f"{subject} asks for {ask.wants()} on {failing.node}, but they do not all have "
            f"{conflict.constraint.describe()} (with each other and the claim's other devices), and there the "
            "allocator gives up on the node"
        )
    if conflict.constraint is not None:
        return conflict_sentence(
            subject, ask.wants(), conflict.constraint, failing.node, failing.usable, conflict.earlier
        )
    sets = sorted({key[2] for d in failing.usable for key in device_counters(d)})
    shared = [d.name for d in failing.usable if d.shareable]
    head = f"{subject} needs {ask.wants()} on one node: {failing.node} has {len(failing.usable)} free"
    if conflict.exhausted:
        return f"{head}, but no {failing.needed} of them were found to go together within {BUDGET} tries"
    what = f"counter set {', '.join(sets)}" if sets else f"the capacity of {', '.join(shared[:4])}"
    return f"{head}, but no {failing.needed} of them fit {what} together"


def taint_named(taint: Mapping[str, Any]) -> str:
    """``key=value:Effect``, and the DeviceTaintRule it came from (a slice's own taint names none)."""
    rule = taint.get(RULE_KEY)
    return f"{taint_label(taint)} (DeviceTaintRule {rule})" if rule else taint_label(taint)


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
    elif device.id in analysis.unfit(ask):
        unfit = analysis.unfit(ask)[device.id]
        entry.update(outcome="capacity-unfit", capacity=unfit.capacity, requested=str(unfit.requested), why=unfit.why)
    elif on_node is None:
        entry.update(outcome="match")
    elif device.id in on_node.held:
        entry.update(outcome="held", holder=_claim_label(on_node.held[device.id]))
    elif device.id in on_node.short:
        entry.update(outcome="short", unavailable=on_node.short[device.id].sentence())
    elif device.id in on_node.tainted:
        entry.update(outcome="tainted", taints=[taint_named(t) for t in on_node.tainted[device.id]])
    elif device.pool_refusal is not None and any((p.driver, p.name) == device.id[:2] for p in on_node.refused_pools):
        entry.update(outcome="pool-refused", why=device.pool_refusal)
    elif not any(d.id == device.id for d in on_node.matching):
        entry.update(outcome="not-reachable", node=on_node.node)
    elif any(d.id == device.id for d in on_node.picked):
        entry.update(outcome="picked", node=on_node.node)
    else:
        entry.update(outcome="match")
    return entry


Taken = dict[DeviceId, set[str]]  # devices the Pod's requests took, and the claims (UIDs) that took each


class _Placement:
    """The Pod's requests placed one after the other on one node: what they took so far.

    ``taken`` holds devices that cannot be given twice, with the claims that took
    them (``adminAccess`` may share a device with another claim's request, not
    with its own claim's); ``usage`` what the picks took of counter sets and
    shared capacity, on top of what other claims hold.
    """

    def __init__(self, inventory: Inventory, sharing: Sharing, node: NodeInfo, taken: Taken, own: set[str]):
        self.inventory = inventory
        self.sharing = sharing
        self.node = node
        self.taken = taken
        self.own = own
        self.usage = Usage()
        self.claim_picks: list[Picked] = []  # the current claim's, for its constraints
        self.plain = not sharing.ledger.accounted  # no partitions or shared devices at all: the common case
        self._untouched = {k: set(v) for k, v in taken.items()}
        # A request that fits nowhere on the node before the Pod took anything: no search can place the Pod.
        self.hopeless = False

    def _free_of_pod(self, analysis: RequestAnalysis, ask: DeviceAsk, device: AdvertisedDevice) -> bool:
        takers = self.taken.get(device.id)
        return not takers or (ask.admin_access and analysis.claim_uid not in takers)

    def try_ask(self, analysis: RequestAnalysis, ask: DeviceAsk, pick: bool = True) -> AskOnNode:
        matches = analysis.reachable_matches(ask, self.node)
        refused = [d for d in matches if d.pool_refusal is not None] if self.inventory.refuses_any else []
        if refused:  # the allocator takes nothing from a pool being updated or invalid
            matches = [d for d in matches if d.pool_refusal is None]
        taken = self.taken
        if ask.admin_access:
            matching = [d for d in matches if self._free_of_pod(analysis, ask, d)]
        else:
            matching = [d for d in matches if d.id not in taken]
        if self.usage:
            matching = [d for d in matching if not self._taken_by_pod(analysis, ask, d)]
        result = AskOnNode(ask, self.node.name, Stage.NO_MATCH, ask.count, matching, len(matches) - len(matching))
        if refused:
            pools = self.inventory.pools
            result.refused_pools = [pools[k] for k in dict.fromkeys((d.driver, d.pool) for d in refused) if k in pools]
        if not analysis.matches(ask):
            return result
        if ask.mode == "All":
            # Every matching device the node reads, those the Pod's other requests took included; the allocator
            # also refuses "All" on a node reading any pool being updated or invalid, matching or not.
            result.needed = len(matches)
            result.refused_pools = self.inventory.refused_pools(self.node)
        if not matching or len(matching) < result.needed or (ask.mode == "All" and result.refused_pools):
            result.stage = Stage.TOO_FEW
            return result
        self._find_unavailable(analysis, ask, result)
        free = [d for d in matching if d.id not in result.held and d.id not in result.short]
        if len(free) < result.needed or (ask.mode == "All" and (result.held or result.short)):
            result.stage = Stage.IN_USE
            return result
        for device in free:
            taints = blocking_taints(device, ask.tolerations)
            if taints:
                result.tainted[device.id] = taints
        result.usable = [d for d in free if d.id not in result.tainted]
        if len(result.usable) < result.needed or (ask.mode == "All" and result.tainted):
            result.stage = Stage.TAINTED
            return result
        result.stage = Stage.FITS
        if pick:
            self._pick(analysis, ask, result)
        return result

    def _find_unavailable(self, analysis: RequestAnalysis, ask: DeviceAsk, result: AskOnNode) -> None:
        holders = self.inventory.holders
        for device in result.matching:
            accounted = not self.plain and self.sharing.accounted(device)
            # adminAccess may use a device next to its holder, but still takes its counters and capacity
            if (not accounted or not device.shareable) and not ask.admin_access:
                holder = holders.get(device.id)
                if holder is not None and uid_of(holder) not in self.own:
                    result.held[device.id] = holder
                    continue
            if not accounted:
                continue
            take = self._take_of(analysis, ask, device, None)
            if not take.empty:
                shortage = self.sharing.shortage(device, take)
                if shortage is not None:
                    result.short[device.id] = shortage

    def _take_of(self, analysis: RequestAnalysis, ask: DeviceAsk, device: AdvertisedDevice, usage: Usage | None):  # noqa: ANN202
        share = analysis.share(ask, device) if device.shareable else {}
        return self.sharing.take(device, share if isinstance(share, dict) else {}, usage)

    def _taken_by_pod(self, analysis: RequestAnalysis, ask: DeviceAsk, device: AdvertisedDevice) -> bool:
        """Free of other claims, but the Pod's earlier picks took the counters or capacity it needs."""
        if not self.sharing.accounted(device):
            return False
        take = self._take_of(analysis, ask, device, self.usage)
        if take.empty or self.sharing.shortage(device, take, self.usage) is None:
            return False
        return self.sharing.shortage(device, self._take_of(analysis, ask, device, None)) is None

    def taker(self, choice: Choice, device: AdvertisedDevice) -> Callable[[], None] | None:
        analysis, ask = choice.handle
        if not self._free_of_pod(analysis, ask, device):
            return None
        take = self._take_of(analysis, ask, device, self.usage)
        if not take.empty:
            if self.sharing.shortage(device, take, self.usage) is not None:
                return None
            self.usage.add(take, device)
        exclusive = not device.shareable
        if exclusive:
            self._take(device, analysis.claim_uid)

        def undo() -> None:
            if not take.empty:
                self.usage.add(take, device, sign=-1)
            if exclusive:
                takers = self.taken[device.id]
                takers.discard(analysis.claim_uid)
                if not takers:
                    del self.taken[device.id]

        return undo

    def _take(self, device: AdvertisedDevice, claim_uid: str) -> None:
        self.taken.setdefault(device.id, set()).add(claim_uid)

    def _pick(self, analysis: RequestAnalysis, ask: DeviceAsk, result: AskOnNode) -> None:
        constraints = applying(analysis.constraints, ask.name)
        choice = Choice(ask.name, result.needed, result.usable, (analysis, ask))
        accounted = not self.plain and any(self.sharing.accounted(d) for d in result.usable)
        if not constraints and not accounted:
            result.picked = result.usable[: result.needed]  # nothing can conflict: the first ones
            for device in result.picked:
                self._take(device, analysis.claim_uid)
        else:
            outcome = search([[choice]], constraints, self.taker, self.claim_picks)
            if outcome.picks is None:
                result.stage = Stage.TOO_FEW
                constraint = outcome.blocking_constraint()
                result.conflict = Conflict(constraint, tuple(self.claim_picks), outcome.exhausted)
                return
            result.picked = outcome.picks[0][1]
        self.claim_picks += [(ask.name, d) for d in result.picked]

    def _saved(self) -> tuple[Taken, Usage]:
        return {k: set(v) for k, v in self.taken.items()}, self.usage.copy()

    def _restore(self, taken: Taken, usage: Usage) -> None:
        self.taken.clear()
        self.taken.update(taken)
        self.usage = usage

    def place_claim(self, analyses: Sequence[RequestAnalysis]) -> list[AskOnNode]:
        """The claim's requests in order, each the first alternative that fits (firstAvailable).

        When that leaves a constraint unsatisfied, the claim is searched as a whole,
        since an earlier request's other choice may let a later one fit.
        """
        constrained = any(a.constraints for a in analyses)
        before = self._saved() if constrained else None
        self.claim_picks = []
        asks = [self._place_request(a) for a in analyses]
        if before is not None and any(a.stage < Stage.FITS for a in asks) and any(a.conflict for a in asks):
            after, picks = self._saved(), list(self.claim_picks)
            self._restore(*before)
            whole = self._search_claim(analyses)
            if whole is not None:
                return whole
            self._restore(*after)
            self.claim_picks = picks
        return asks

    def _place_request(self, analysis: RequestAnalysis) -> AskOnNode:
        untouched = not self.usage and self.taken == self._untouched
        best: AskOnNode | None = None
        for ask in analysis.request.alternatives:
            tried = self.try_ask(analysis, ask)
            if best is None or tried.stage > best.stage:
                best = tried
            if tried.stage == Stage.FITS:
                break  # firstAvailable: the first subrequest that fits wins
        assert best is not None
        self.hopeless |= untouched and best.stage < Stage.FITS
        return best

    def _search_claim(self, analyses: Sequence[RequestAnalysis]) -> list[AskOnNode] | None:
        placed = self.place_together([analyses])
        if placed is not None:
            self.claim_picks = [(on_node.ask.name, d) for on_node in placed for d in on_node.picked]
        return placed

    def place_together(
        self, per_claim: Sequence[Sequence[RequestAnalysis]], in_order: bool = False
    ) -> list[AskOnNode] | None:
        """Every request of the claims searched together, as the allocator searches a Pod's: an earlier request
        (of the claim or of an earlier claim) may have to take other devices than the first that fit, or another
        subrequest, for a later one to fit. The placed asks, or None when no combination is found.

        ``in_order`` follows the allocator's own path, device by device in its order, where the path decides more
        than whether a combination exists: an "All" request that breaks a constraint ends the search there. Then
        the asks are returned failed at that request (``Conflict.gave_up``).
        """
        slots: list[list[Choice]] = []
        tried: dict[int, AskOnNode] = {}  # by the ask's identity: two claims may name requests alike
        for scope, analyses in enumerate(per_claim):
            for analysis in analyses:
                choices = []
                for ask in analysis.request.alternatives:
                    on_node = tried[id(ask)] = self.try_ask(analysis, ask, pick=False)
                    choice = self._choice(analysis, ask, on_node, scope, in_order)
                    if choice is not None:
                        choices.append(choice)
                if not choices:
                    return None
                slots.append(choices)
        if not in_order and not _enough_devices(slots):
            return None
        outcome = search(slots, (), self.taker)
        if outcome.gave_up is not None:
            if not in_order:
                return None  # off the allocator's path: no combination found, which is all this search says
            choice, constraint = outcome.gave_up
            failed = tried[id(choice.handle[1])]
            failed.stage = Stage.TOO_FEW
            failed.conflict = Conflict(constraint, gave_up=True)
            return [failed]
        if outcome.picks is None:
            return None
        placed = []
        for choice, devices in outcome.picks:
            on_node = tried[id(choice.handle[1])]
            on_node.picked = devices
            placed.append(on_node)
        return placed

    def _choice(
        self, analysis: RequestAnalysis, ask: DeviceAsk, on_node: AskOnNode, scope: int, in_order: bool
    ) -> Choice | None:
        handle, constraints = (analysis, ask), analysis.constraints
        if ask.mode != "All":
            if on_node.stage < Stage.FITS:
                return None
            usable = sorted(on_node.usable, key=_search_order) if in_order else on_node.usable
            return Choice(ask.name, on_node.needed, usable, handle, scope, constraints)
        if on_node.stage == Stage.FITS:
            every = sorted(on_node.usable, key=_search_order) if in_order else on_node.usable
            return Choice(ask.name, len(every), every, handle, scope, constraints, every=True)
        if not in_order or on_node.stage < Stage.TOO_FEW or on_node.refused_pools or not analysis.matches(ask):
            return None
        # Not every device is free, but the allocator only finds out at the first that is not, in its order, and
        # may meet one that breaks a constraint before.
        every = sorted(self._all_of(analysis, ask, on_node), key=_search_order)
        if not every:
            return None
        blocked = frozenset(on_node.held) | frozenset(on_node.short) | frozenset(on_node.tainted)
        return Choice(ask.name, len(every), every, handle, scope, constraints, every=True, blocked=blocked)

    def _all_of(self, analysis: RequestAnalysis, ask: DeviceAsk, on_node: AskOnNode) -> list[AdvertisedDevice]:
        """Every device an "All" ask wants on the node, with what keeps any of them from it (held, short, tainted)."""
        every = [d for d in analysis.reachable_matches(ask, self.node) if d.pool_refusal is None]
        if on_node.stage == Stage.TOO_FEW:  # the Pod's allocated claims took some: see why the others would fail
            probe = AskOnNode(ask, self.node.name, Stage.TOO_FEW, len(every), every)
            self._find_unavailable(analysis, ask, probe)
            on_node.held, on_node.short = probe.held, probe.short
            for device in every:
                taints = blocking_taints(device, ask.tolerations)
                if taints and device.id not in probe.held and device.id not in probe.short:
                    on_node.tainted[device.id] = taints
        return every


def _search_order(device: AdvertisedDevice) -> tuple[str, str, str, int]:
    return device.search_order


def _enough_devices(slots: Sequence[Sequence[Choice]]) -> bool:
    """Whether the requests that need devices of their own could get that many from all their candidates together.

    Cheap, and it spares the search the common hopeless case (more requests than devices); requests that may
    share a device (adminAccess, allowMultipleAllocations) are left to the search.
    """
    needed, candidates = 0, set[DeviceId]()
    for choices in slots:
        if any(c.handle[1].admin_access or any(d.shareable for d in c.candidates) for c in choices):
            continue
        needed += min(c.needed for c in choices)
        candidates.update(d.id for c in choices for d in c.candidates)
    return needed <= len(candidates)


def analyze_request(
    inventory: Inventory, cache: SelectorCache, claim: Object, request: ClaimRequest
) -> RequestAnalysis:
    classes: dict[str, Object | None] = {}
    checks: dict[str, list[DeviceCheck]] = {}
    for ask in request.alternatives:
        device_class = classes.setdefault(ask.class_name, find_class(inventory.state, ask.class_name))
        class_exprs = class_selectors(device_class)
        checks[ask.name] = cache.checks(inventory.devices, class_exprs, tuple(ask.selectors))
    return RequestAnalysis(uid_of(claim), ns_name(claim)[1], request, classes, checks, claim_constraints(claim))


def simulate(
    inventory: Inventory,
    claims: Sequence[Object],
    nodes: Iterable[str] | None = None,
    cache: SelectorCache | None = None,
    sibling_claims: Iterable[str] = (),
) -> Simulation:
    """Try to allocate every request of ``claims`` on one node, for each candidate node.

    All of one Pod's claims are simulated together: the devices must all be
    reachable from the node the Pod will run on, and one request's devices (and
    the shared counters and capacity they take) are not available to the next.
    ``nodes`` narrows the candidates (e.g. to the node an already allocated claim
    pins the Pod to); devices held by ``sibling_claims`` (the Pod's claims
    allocated already) count as taken by the Pod's other requests rather than as
    in use by strangers.
    """
    cache = cache or selector_cache(inventory)
    per_claim = [[analyze_request(inventory, cache, c, r) for r in claim_requests(c)] for c in claims]
    analyses = [a for group in per_claim for a in group]
    own = {uid_of(c) for c in claims} | set(sibling_claims)
    held_by_siblings = {
        d: uid_of(holder)
        for d, holder in inventory.holders.items()
        if uid_of(holder) in own and not _shared(inventory, d)
    }
    sharing = Sharing(ledger_of(inventory), {uid_of(c) for c in claims})
    allowed = set(nodes) if nodes is not None else None
    candidates = [n for n in inventory.nodes if allowed is None or n.name in allowed]
    if allowed is not None:
        known = {n.name for n in inventory.nodes}
        candidates += [NodeInfo(n) for n in sorted(allowed - known)]
    alls = [(a, ask) for a in analyses for ask in a.request.alternatives if ask.mode == "All"]
    # An "All" request under a constraint ends the allocator's search where it breaks the constraint, so then
    # only the allocator's own path through the Pod's requests says whether they fit.
    in_order = any(applying(a.constraints, ask.name) for a, ask in alls)
    fits = []
    for node in candidates:
        placement = _Placement(inventory, sharing, node, {d: {uid} for d, uid in held_by_siblings.items()}, own)
        asks = [on_node for group in per_claim if group for on_node in placement.place_claim(group)]
        refusing = _refusing_all(placement, analyses, asks) if alls else None
        if refusing is not None:
            asks = refusing
        elif in_order or (not placement.hopeless and any(a.stage < Stage.FITS for a in asks)):
            fresh = _Placement(inventory, sharing, node, {d: {uid} for d, uid in held_by_siblings.items()}, own)
            placed = fresh.place_together(per_claim, in_order)
            if placed is not None and placed[0].stage < Stage.FITS:
                asks = _in_place(asks, placed[0], analyses)  # the allocator gave up on the node there
            elif placed is not None:
                asks = placed
        fits.append(NodeFit(node.name, asks))
    pinned = sorted(allowed) if allowed is not None else None
    return Simulation(analyses, fits, [ns_name(c)[1] for c in claims], pinned)


def _refusing_all(
    placement: _Placement, analyses: list[RequestAnalysis], asks: list[AskOnNode]
) -> list[AskOnNode] | None:
    """The asks with an "All" one failed in its request's place, when the node reads a pool the allocator refuses.

    The allocator sizes every "All" request and subrequest of the Pod before its search, and fails the node
    there when a pool it reads is being updated or invalid, even for a subrequest it would not have come to.
    """
    if not placement.inventory.refused_pools(placement.node):
        return None
    for analysis in analyses:
        for ask in analysis.request.alternatives:
            if ask.mode == "All":
                return _in_place(asks, placement.try_ask(analysis, ask, pick=False), analyses)
    return None


def _in_place(asks: list[AskOnNode], failed: AskOnNode, analyses: list[RequestAnalysis]) -> list[AskOnNode]:
    """The asks with ``failed`` in place of its request's."""
    mine = next(a.request.alternatives for a in analyses if any(failed.ask is alt for alt in a.request.alternatives))
    return [failed if any(a.ask is alt for alt in mine) else a for a in asks]


def _shared(inventory: Inventory, device_id: DeviceId) -> bool:
    device = inventory.by_id.get(device_id)
    return device is not None and device.shareable


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
