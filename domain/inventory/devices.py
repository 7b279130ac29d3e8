"""Devices advertised as of a state, where they can be reached from, and who holds them.

The inventory boundary: a device exists for allocation only if a ResourceSlice of
its pool's newest generation lists it. Slices of older generations are what a
driver is replacing, so the scheduler ignores them and so do we.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from domain.cluster.asks import claim_requests, tolerates
from domain.cluster.state import ClusterState, Object, meta, ns_name, uid_of
from domain.cluster.timefmt import earliest, parse_time
from domain.inventory.pools import pool_problem

DeviceId = tuple[str, str, str]  # (driver, pool, device)

# Taint effects that keep the scheduler from allocating a device; "None" (and any effect
# Kubernetes does not know yet) only informs.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# The effect on which the device taint eviction controller evicts the Pods of claims holding the device.
EVICTING_EFFECT = "NoExecute"


def device_label(device_id: DeviceId) -> str:
    return "/".join(device_id)


# --- nodes -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def cluster_nodes(state: ClusterState) -> list[NodeInfo]:
    """Nodes of the state by name; without any Node objects, the nodes slices name.

    A dump without Nodes still lets node-local slices be reasoned about, which
    is better than calling every device unreachable.
    """
    nodes = {}
    for obj in state.of_kind("Node"):
        name = ns_name(obj)[1]
        labels = meta(obj).get("labels") or {}
        nodes[name] = NodeInfo(name, {str(k): str(v) for k, v in labels.items()})
    if not nodes:
        for slice_obj in state.of_kind("ResourceSlice"):
            slice_node = _spec(slice_obj).get("nodeName")
            if isinstance(slice_node, str) and slice_node:
                nodes[slice_node] = NodeInfo(slice_node, {"kubernetes.io/hostname": slice_node})
    return [nodes[n] for n in sorted(nodes)]


def _requirement_matches(req: Mapping[str, Any], value: str | None) -> bool:
    op = req.get("operator")
    values = [str(v) for v in req.get("values") or ()]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selector_matches(selector: Mapping[str, Any] | None, node: NodeInfo) -> bool:
    """A core/v1 NodeSelector: terms are ORed, requirements within a term ANDed."""
    terms = (selector or {}).get("nodeSelectorTerms") or []
    for term in terms:
        if not isinstance(term, dict):
            continue
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing, as in the scheduler
        ok = all(_requirement_matches(r, node.labels.get(str(r.get("key")))) for r in exprs) and all(
            _requirement_matches(r, node.name if r.get("key") == "metadata.name" else None) for r in fields
        )
        if ok:
            return True
    return False


# --- devices ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reach:
    """Where a device can be used from: one node, a node selector, or every node."""

    node_name: str | None = None
    node_selector: Mapping[str, Any] | None = None
    all_nodes: bool = False

    def includes(self, node: NodeInfo) -> bool:
        if self.all_nodes:
            return True
        if self.node_name is not None:
            return node.name == self.node_name
        if self.node_selector is not None:
            return node_selector_matches(self.node_selector, node)
        return False

    def describe(self) -> str:
        if self.all_nodes:
            return "all nodes"
        if self.node_name is not None:
            return self.node_name
        return "nodes matching a selector"


@dataclass(frozen=True)
class AdvertisedDevice:
    driver: str
    pool: str
    name: str
    entry: Mapping[str, Any]  # the device as its slice lists it (v1 shape)
    reach: Reach
    slice_name: str
    slice_uid: str
    slice_created: str | None
    generation: int
    pool_complete: bool
    extra_taints: tuple[Mapping[str, Any], ...] = ()  # from DeviceTaintRules, each naming its rule (RULE_KEY)
    pool_problem: str | None = None  # why the allocator refuses the device's whole pool (domain.inventory.pools)
    slice_index: int = 0  # its place in its slice's list

    @property
    def search_order(self) -> tuple[str, str, str, int]:
        """Where the allocator meets the device in its search: by pool, slice name, place in the slice."""
        return (self.driver, self.pool, self.slice_name, self.slice_index)

    # Cached: match-devices and every simulation ask each of 40,000 devices its id several times.
    # The cache lives in the instance's __dict__, not among the fields: equality, hashing and
    # dataclasses.replace see only the fields.
    @functools.cached_property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.name)

    @functools.cached_property
    def label(self) -> str:
        return device_label(self.id)

    @property
    def node_name(self) -> str | None:
        return self.reach.node_name

    @property
    def attributes(self) -> Mapping[str, Any]:
        return self.entry.get("attributes") or {}

    @property
    def capacity(self) -> Mapping[str, Any]:
        return self.entry.get("capacity") or {}

    @property
    def taints(self) -> list[Mapping[str, Any]]:
        own = [t for t in self.entry.get("taints") or () if isinstance(t, dict)]
        return own + list(self.extra_taints)

    @property
    def pool_refusal(self) -> str | None:
        """Why the allocator takes nothing from the device's pool, so not the device either; None when it does."""
        if self.pool_complete and self.pool_problem is None:
            return None
        return refusal(self.pool, self.pool_complete, self.pool_problem)

    @property
    def shareable(self) -> bool:
        """Devices with allowMultipleAllocations may be held by several claims at once."""
        return bool(self.entry.get("allowMultipleAllocations"))

    def attribute(self, name: str, domain: str | None = None) -> Any:
        """The plain value of an attribute (``uuid`` or ``resource.kubernetes.io/pciBusID``)."""
        domain = domain or self.driver
        typed = None
        if domain == self.driver:
            typed = self.attributes.get(name)
        if typed is None:
            typed = self.attributes.get(f"{domain}/{name}")
        return typed_value(typed)

    def capacity_value(self, name: str, domain: str | None = None) -> str | None:
        domain = domain or self.driver
        entry = self.capacity.get(name) if domain == self.driver else None
        if entry is None:
            entry = self.capacity.get(f"{domain}/{name}")
        if isinstance(entry, dict) and entry.get("value") is not None:
            return str(entry["value"])
        return None

    @property
    def uuid(self) -> str | None:
        value = self.attribute("uuid")
        return str(value) if value is not None else None

    def reachable_from(self, node: NodeInfo) -> bool:
        return self.reach.includes(node)


def restored_device(
    driver: str,
    pool: str,
    name: str,
    entry: Mapping[str, Any],
    reach: Reach,
    slice_name: str,
    slice_uid: str,
    slice_created: str | None,
    generation: int,
    pool_complete: bool,
    extra_taints: tuple[Mapping[str, Any], ...],
    pool_problem: str | None,
    slice_index: int,
) -> AdvertisedDevice:
    """``AdvertisedDevice(...)`` of every field, as a stored device is read back: its fields set at once,
    not one ``object.__setattr__`` each as a frozen dataclass's ``__init__`` does (a process's first
    read of 40,000 devices spent 185 ms there), and its id cached already."""
    device = object.__new__(AdvertisedDevice)
    device.__dict__.update(
        driver=driver,
        pool=pool,
        name=name,
        entry=entry,
        reach=reach,
        slice_name=slice_name,
        slice_uid=slice_uid,
        slice_created=slice_created,
        generation=generation,
        pool_complete=pool_complete,
        extra_taints=extra_taints,
        pool_problem=pool_problem,
        slice_index=slice_index,
        id=(driver, pool, name),
    )
    return device


@functools.lru_cache(maxsize=65_536)
def node_reach(node_name: str | None, all_nodes: bool) -> Reach:
    """The one ``Reach`` of a node (or of every node): shared by the devices read back, eight or more
    a node, rather than one object each."""
    return Reach(node_name, None, all_nodes)


def typed_value(typed: Any) -> Any:
    """The value of a DeviceAttribute (``{"string": …}``, ``{"int": …}``, ``{"version": …}``…)."""
    if not isinstance(typed, dict):
        return None
    for key in ("string", "int", "bool", "version"):
        if key in typed:
            return typed[key]
    return None


def _spec(obj: Object) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _device_body(entry: Mapping[str, Any]) -> dict[str, Any]:
    """v1 lists device fields flat; v1beta1 nests them under ``basic``."""
    body = dict(entry)
    basic = body.pop("basic", None)
    if isinstance(basic, dict):
        body.update(basic)
    return body


def _reach(spec: Mapping[str, Any], device: Mapping[str, Any]) -> Reach:
    # With perDeviceNodeSelection each device says where it is reachable from.
    source = device if spec.get("perDeviceNodeSelection") else spec
    if source.get("nodeName"):
        return Reach(node_name=str(source["nodeName"]))
    if source.get("allNodes"):
        return Reach(all_nodes=True)
    if isinstance(source.get("nodeSelector"), dict):
        return Reach(node_selector=source["nodeSelector"])
    return Reach()


def slice_pool(slice_obj: Object) -> tuple[str, str]:
    spec = _spec(slice_obj)
    pool = spec.get("pool") or {}
    return (str(spec.get("driver") or ""), str(pool.get("name") or ""))


def _generation(slice_obj: Object) -> int:
    try:
        return int((_spec(slice_obj).get("pool") or {}).get("generation") or 0)
    except (TypeError, ValueError):
        return 0


def current_slices(state: ClusterState) -> dict[tuple[str, str], list[Object]]:
    """Slices of each (driver, pool) at the pool's highest generation."""
    by_pool: dict[tuple[str, str], list[Object]] = {}
    for slice_obj in state.of_kind("ResourceSlice"):
        by_pool.setdefault(slice_pool(slice_obj), []).append(slice_obj)
    current = {}
    for key, slices in by_pool.items():
        newest = max(_generation(s) for s in slices)
        current[key] = sorted((s for s in slices if _generation(s) == newest), key=lambda s: ns_name(s)[1])
    return current


def pool_generations(state: ClusterState) -> dict[tuple[str, str], list[int]]:
    """Every generation each pool's slices carry, for audits of pools mid-update."""
    out: dict[tuple[str, str], set[int]] = {}
    for slice_obj in state.of_kind("ResourceSlice"):
        out.setdefault(slice_pool(slice_obj), set()).add(_generation(slice_obj))
    return {k: sorted(v) for k, v in out.items()}


# The key a DeviceTaintRule's taint carries, as it reaches a device, to name the rule it came from.
RULE_KEY = "rule"


def taint_rules(state: ClusterState) -> list[Object]:
    """The DeviceTaintRules that taint anything: a taint, and a ``deviceSelector`` (without one a rule
    selects no device, as the scheduler's ResourceSlice tracker reads it), by name."""
    rules = [
        r
        for r in state.of_kind("DeviceTaintRule")
        if isinstance(_spec(r).get("taint"), dict) and isinstance(_spec(r).get("deviceSelector"), dict)
    ]
    return sorted(rules, key=lambda r: ns_name(r)[1])


def rule_selects(rule: Object, device_id: DeviceId) -> bool:
    """resource.k8s.io/v1 ``deviceSelector``: driver, pool and device, each matching where set (an empty
    selector matches every device). Its class and CEL selectors were tombstoned in 1.35."""
    sel = _spec(rule).get("deviceSelector")
    if not isinstance(sel, dict):
        return False
    wanted = (sel.get("driver"), sel.get("pool"), sel.get("device"))
    return all(w is None or w == have for w, have in zip(wanted, device_id, strict=True))


def _rule_taints(rules: list[Object], device_id: DeviceId) -> tuple[Mapping[str, Any], ...]:
    return tuple(
        {**_spec(rule)["taint"], RULE_KEY: ns_name(rule)[1]} for rule in rules if rule_selects(rule, device_id)
    )


def taint_source(device: AdvertisedDevice, taint: Mapping[str, Any]) -> str:
    """Where a device's taint comes from: "DeviceTaintRule <name>", or "slice <name>"."""
    rule = taint.get(RULE_KEY)
    return f"DeviceTaintRule {rule}" if rule else f"slice {device.slice_name}"


def taint_evidence(device: AdvertisedDevice, taint: Mapping[str, Any]) -> dict[str, Any]:
    """A device's taint as evidence: key, value, effect, when it was added, and the rule it came from."""
    out: dict[str, Any] = {"key": taint.get("key"), "value": taint.get("value") or "", "effect": taint.get("effect")}
    if taint.get("timeAdded"):
        out["timeAdded"] = taint["timeAdded"]
    out["source"] = taint_source(device, taint)
    return out


@dataclass(frozen=True)
class PoolState:
    """A pool as the allocator judges it before taking anything from it: whole, valid, and where it is read."""

    driver: str
    name: str
    complete: bool  # every slice its current generation declares is published
    problem: str | None  # why it is invalid (domain.inventory.pools)
    reaches: tuple[Reach, ...]  # of its slices, or of each device where the slice selects nodes per device

    @property
    def refused(self) -> bool:
        return not self.complete or self.problem is not None

    def targets(self, node: NodeInfo) -> bool:
        return any(r.includes(node) for r in self.reaches)

    def why(self, with_driver: bool = False) -> str:
        """Why the allocator refuses the pool; ``with_driver`` names its driver too (for a request of another)."""
        name = f"{self.name} of driver {self.driver}" if with_driver else self.name
        return refusal(name, self.complete, self.problem) or ""


def refusal(pool: str, complete: bool, problem: str | None) -> str | None:
    """Why the allocator takes nothing from a pool, as a verdict says it; None when it does."""
    if problem is not None:
        return f"pool {pool} is invalid ({problem})"
    if not complete:
        return f"pool {pool} is being updated (not all of its slices are published)"
    return None


def advertised_devices(state: ClusterState) -> list[AdvertisedDevice]:
    """Every device the newest generation of each pool advertises, sorted by (driver, pool, name)."""
    return _advertised(state)[0]


def _advertised(state: ClusterState) -> tuple[list[AdvertisedDevice], dict[tuple[str, str], PoolState]]:
    rules = taint_rules(state)
    devices: dict[DeviceId, AdvertisedDevice] = {}
    pools: dict[tuple[str, str], PoolState] = {}
    for (driver, pool), slices in current_slices(state).items():
        declared = max(int((_spec(s).get("pool") or {}).get("resourceSliceCount") or 1) for s in slices)
        complete = len(slices) >= declared
        problem = pool_problem(slices)
        reaches: list[Reach] = []
        for slice_obj in slices:
            spec = _spec(slice_obj)
            if not spec.get("perDeviceNodeSelection"):
                reaches.append(_reach(spec, {}))
            for index, raw in enumerate(spec.get("devices") or ()):
                if not isinstance(raw, dict) or not raw.get("name"):
                    continue
                body = _device_body(raw)
                device_id = (driver, pool, str(body["name"]))
                if spec.get("perDeviceNodeSelection"):
                    reaches.append(_reach(spec, body))
                if device_id in devices:
                    continue  # a pool listing a name twice is invalid (pool_problem says so); the first copy stays
                devices[device_id] = AdvertisedDevice(
                    driver=driver,
                    pool=pool,
                    name=device_id[2],
                    entry=body,
                    reach=_reach(spec, body),
                    slice_name=ns_name(slice_obj)[1],
                    slice_uid=uid_of(slice_obj),
                    slice_created=meta(slice_obj).get("creationTimestamp"),
                    generation=_generation(slice_obj),
                    pool_complete=complete,
                    extra_taints=_rule_taints(rules, device_id),
                    pool_problem=problem,
                    slice_index=index,
                )
        distinct = {(r.node_name, r.all_nodes, repr(r.node_selector)): r for r in reaches}  # a selector is a dict
        pools[(driver, pool)] = PoolState(driver, pool, complete, problem, tuple(distinct.values()))
    return [devices[k] for k in sorted(devices)], pools


# --- claims and what they hold ---------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of a claim, with the node the allocation pins it to."""

    claim_uid: str
    request: str
    driver: str
    pool: str
    device: str
    node: str | None
    admin_access: bool = False

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.device)

    def as_evidence(self) -> dict[str, Any]:
        return {
            "kind": "AllocationResult",
            "claim": self.claim_uid,
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
            "node": self.node,
        }


def allocation(claim: Object) -> dict[str, Any] | None:
    status = claim.get("status")
    alloc = status.get("allocation") if isinstance(status, dict) else None
    return alloc if isinstance(alloc, dict) else None


def allocation_time(claim: Object) -> datetime | None:
    alloc = allocation(claim)
    return parse_time(alloc.get("allocationTimestamp")) if alloc is not None else None


def is_allocated(claim: Object) -> bool:
    return allocation(claim) is not None


def allocation_node(claim: Object, nodes: Iterable[NodeInfo] = ()) -> str | None:
    """The node an allocation is pinned to: named in its nodeSelector, or the only node it matches."""
    alloc = allocation(claim) or {}
    selector = alloc.get("nodeSelector")
    if not isinstance(selector, dict):
        return None
    for term in selector.get("nodeSelectorTerms") or ():
        for req in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            values = req.get("values") or []
            if (
                req.get("key") in ("metadata.name", "kubernetes.io/hostname")
                and req.get("operator") == "In"
                and len(values) == 1
            ):
                return str(values[0])
    matching = [n.name for n in nodes if node_selector_matches(selector, n)]
    return matching[0] if len(matching) == 1 else None


def allocation_nodes(claim: Object, nodes: Iterable[NodeInfo]) -> set[str] | None:
    """The nodes a Pod using the claim can still go to (the scheduler's Filter): the one its allocation's
    nodeSelector names, else those of ``nodes`` it matches (maybe none); None when it has no selector (any node)."""
    selector = (allocation(claim) or {}).get("nodeSelector")
    if not isinstance(selector, dict):
        return None
    named = allocation_node(claim)
    if named is not None:
        return {named}
    return {n.name for n in nodes if node_selector_matches(selector, n)}


def allocations_nodes(claims: Iterable[Object], nodes: Iterable[NodeInfo]) -> set[str] | None:
    """The nodes every one of the allocated claims can be used from (``allocation_nodes``); None: any node."""
    known = list(nodes)
    found: set[str] | None = None
    for claim in claims:
        allowed = allocation_nodes(claim, known)
        if allowed is not None:
            found = allowed if found is None else found & allowed
    return found


def allocated_devices(claim: Object, nodes: Iterable[NodeInfo] = ()) -> list[AllocatedDevice]:
    alloc = allocation(claim) or {}
    results = (alloc.get("devices") or {}).get("results") or ()
    node = allocation_node(claim, nodes)
    return [
        AllocatedDevice(
            claim_uid=uid_of(claim),
            request=str(r.get("request") or ""),
            driver=str(r.get("driver") or ""),
            pool=str(r.get("pool") or ""),
            device=str(r.get("device") or ""),
            node=node,
            admin_access=bool(r.get("adminAccess")),
        )
        for r in results
        if isinstance(r, dict)
    ]


def _results(claim: Object) -> list[dict[str, Any]]:
    """The allocation results ``allocated_devices`` reads, in its order."""
    results = ((allocation(claim) or {}).get("devices") or {}).get("results") or ()
    return [r for r in results if isinstance(r, dict)]


def result_tolerations(claim: Object, result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The tolerations an allocation result carries (the allocator copies its request's); an older
    allocation without them is read with its request's own."""
    if "tolerations" in result:
        return [t for t in result.get("tolerations") or () if isinstance(t, dict)]
    for request in claim_requests(claim):
        for ask in request.alternatives:
            if ask.name == result.get("request"):
                return list(ask.tolerations)
    return []


def evicting_taints(
    inventory: Inventory, claim: Object | None, devices: Iterable[AllocatedDevice] | None = None
) -> list[tuple[AdvertisedDevice, Mapping[str, Any], int | None]]:
    """The NoExecute taints on a claim's allocated devices that get its Pods evicted, as the device taint
    eviction controller reads them: ``(device, taint, seconds)``, ``seconds`` when a toleration only
    defers the eviction (``tolerationSeconds``), None when nothing tolerates the taint.

    Only a toleration with effect NoExecute keeps a Pod (the controller's rule); one tolerating the
    taint forever leaves it out. ``devices``: the claim's ``allocated_devices`` when known already.
    """
    if claim is None:
        return []
    results = _results(claim)
    held = list(devices) if devices is not None else allocated_devices(claim)
    out = []
    for device, result in zip(held, results, strict=False):
        advertised = inventory.by_id.get(device.id)
        if advertised is None:
            continue
        tolerations = [t for t in result_tolerations(claim, result) if t.get("effect") == EVICTING_EFFECT]
        for taint in advertised.taints:
            if taint.get("effect") != EVICTING_EFFECT:
                continue
            matching = [t for t in tolerations if tolerates(t, taint)]
            if any(t.get("tolerationSeconds") is None for t in matching):
                continue  # tolerated for good
            seconds = [int(t["tolerationSeconds"]) for t in matching if isinstance(t.get("tolerationSeconds"), int)]
            out.append((advertised, taint, max(min(seconds), 0) if seconds else None))
    return out


def rule_condition(rule: Object, type_: str = "EvictionInProgress") -> dict[str, Any] | None:
    """A DeviceTaintRule's condition (``EvictionInProgress`` by default), as the eviction controller wrote it."""
    status = rule.get("status")
    for cond in (status.get("conditions") if isinstance(status, dict) else None) or ():
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


def rule_evidence(rule: Object) -> dict[str, Any]:
    """A DeviceTaintRule as evidence: its selector, its taint and its EvictionInProgress condition."""
    spec = _spec(rule)
    out: dict[str, Any] = {
        "kind": "DeviceTaintRule",
        "name": ns_name(rule)[1],
        "deviceSelector": spec.get("deviceSelector"),
        "taint": spec.get("taint"),
    }
    cond = rule_condition(rule)
    if cond is not None:
        out["evictionInProgress"] = {k: cond.get(k) for k in ("status", "reason", "message", "lastTransitionTime")}
    return out


def taint_rows(device: AdvertisedDevice, state: ClusterState) -> list[dict[str, Any]]:
    """A device's taints for the inventory and device pages: each with its source, and for a rule's taint the
    rule's ``EvictionInProgress`` condition (how far the eviction controller got)."""
    out = []
    for taint in device.taints:
        row = taint_evidence(device, taint)
        rule = state.find("DeviceTaintRule", "", str(taint[RULE_KEY])) if taint.get(RULE_KEY) else None
        cond = rule_condition(rule) if rule is not None else None
        if cond is not None:
            row["evictionInProgress"] = {k: cond.get(k) for k in ("status", "reason", "message", "lastTransitionTime")}
        out.append(row)
    return out


def device_holders(state: ClusterState) -> dict[DeviceId, Object]:
    """The live claim holding each allocated device.

    Results with adminAccess do not hold a device (they observe it next to its
    real user), so they are left out.
    """
    holders: dict[DeviceId, Object] = {}
    for claim in sorted(state.of_kind("ResourceClaim"), key=ns_name):
        for result in allocated_devices(claim):
            if not result.admin_access:
                holders.setdefault(result.id, claim)
    return holders


@dataclass(eq=False)  # compared and hashed by identity: caches key on one inventory
class Inventory:
    """What matching needs from a state, computed once: devices, nodes, holders."""

    state: ClusterState
    devices: list[AdvertisedDevice]
    nodes: list[NodeInfo]
    holders: dict[DeviceId, Object]
    by_id: dict[DeviceId, AdvertisedDevice] = field(default_factory=dict)
    pools: dict[tuple[str, str], PoolState] = field(default_factory=dict)
    _presence: dict[frozenset[str], tuple[str | None, list[dict[str, Any]]]] = field(default_factory=dict, repr=False)
    _refused: list[PoolState] | None = field(default=None, repr=False)
    _drivers: frozenset[str] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, state: ClusterState) -> Inventory:
        """The state's inventory, built on the first ask and kept with the state.

        Every Pod page and simulation over a state needs it, and building it reads
        every slice, node and claim of the cluster.
        """
        cached = state.derived.get("inventory")
        if isinstance(cached, Inventory) and cached.state is state:
            return cached
        devices, pools = _advertised(state)
        inventory = cls(
            state=state,
            devices=devices,
            nodes=cluster_nodes(state),
            holders=device_holders(state),
            by_id={d.id: d for d in devices},
            pools=pools,
        )
        state.derived["inventory"] = inventory
        return inventory

    def with_claims_of(self, state: ClusterState) -> Inventory:
        """This inventory for ``state``, a state that differs from this one's only in claims and Pods
        (the cluster just before a snapshot that changed nothing else): the devices and nodes are
        this one's, only who holds which device is read again. Kept with ``state`` as ``of`` keeps it."""
        cached = state.derived.get("inventory")
        if isinstance(cached, Inventory) and cached.state is state:
            return cached
        inventory = Inventory(state, self.devices, self.nodes, device_holders(state), self.by_id, self.pools)
        state.derived["inventory"] = inventory
        return inventory

    def drivers(self) -> frozenset[str]:
        """The drivers any device is advertised by: asked once per waiting claim, so kept (40,000 devices)."""
        drivers = self._drivers
        if drivers is None:
            drivers = self._drivers = frozenset(d.driver for d in self.devices)
        return drivers

    @property
    def refuses_any(self) -> bool:
        """Whether the allocator refuses any pool of the inventory (mostly not: then no device needs a look)."""
        refused = self._refused
        if refused is None:
            refused = self._refused = [p for p in self.pools.values() if p.refused]
        return bool(refused)

    def refused_pools(self, node: NodeInfo) -> list[PoolState]:
        """Pools the node reads that the allocator refuses: incomplete or invalid."""
        return [p for p in self._refused or () if p.targets(node)] if self.refuses_any else []

    def presence(self, drivers: frozenset[str]) -> tuple[str | None, list[dict[str, Any]]]:
        """The oldest slice creation and per-driver device and pool counts of ``drivers``' devices
        (every device when empty): the inventory boundary of each pending claim, asked once per driver set."""
        known = self._presence.get(drivers)
        if known is None:
            devices = [d for d in self.devices if not drivers or d.driver in drivers]
            pools: dict[str, set[str]] = {}
            counts: dict[str, int] = {}
            for device in devices:
                pools.setdefault(device.driver, set()).add(device.pool)
                counts[device.driver] = counts.get(device.driver, 0) + 1
            evidence = [
                {"kind": "Inventory", "driver": driver, "devices": counts[driver], "pools": len(pools[driver])}
                for driver in sorted(counts)
            ]
            known = self._presence[drivers] = (earliest(d.slice_created for d in devices), evidence)
        return known

    def nodes_of(self, device: AdvertisedDevice) -> list[str]:
        return [n.name for n in self.nodes if device.reachable_from(n)]
