"""Platform warnings about inventory and access, as of a time (DESIGN.md's audit JSON).

Kinds: ``stale-inventory``, ``double-allocator``, ``admin-access-namespace``,
``admin-access-claim``, ``template-drift``, ``device-taint-rule`` (a DeviceTaintRule tainting devices,
with its ``EvictionInProgress`` condition) and ``force-deleted-claim`` (kubelet still holds a claim a
force-deleted Pod left prepared). ``subject`` is a node, a namespace or ``namespace/claim`` (a pool name
for a pool no single node owns, a rule's name for devices no node owns).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from domain.boundaries.judgement import PREPARE_FAILURE_REASONS, event_count, event_last, quote
from domain.boundaries.preparation import FORCE_DELETED
from domain.cluster.asks import taint_label
from domain.cluster.diff import diff
from domain.cluster.extended_resources import resource_classes
from domain.cluster.state import ClusterState, HistoryView, Object, meta, ns_name
from domain.cluster.state import spec_of as _spec
from domain.cluster.state import status_of as _status
from domain.cluster.timefmt import parse_time, rfc3339
from domain.inventory.devices import (
    DeviceId,
    Inventory,
    allocated_devices,
    allocation,
    current_slices,
    device_holders,
    pool_generations,
    rule_condition,
    rule_selects,
    taint_rules,
)

STALE_INVENTORY = "stale-inventory"
DOUBLE_ALLOCATOR = "double-allocator"
ADMIN_ACCESS_NAMESPACE = "admin-access-namespace"
ADMIN_ACCESS_CLAIM = "admin-access-claim"
TEMPLATE_DRIFT = "template-drift"
DEVICE_TAINT_RULE = "device-taint-rule"
FORCE_DELETED_CLAIM = "force-deleted-claim"
FORCE_DELETED_TEXT = "previous pod force-deleted"  # in kubelet's FailedPrepareDynamicResources message
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"

Warning = dict[str, str]


def _warning(kind: str, subject: str, message: str) -> Warning:
    return {"kind": kind, "subject": subject, "message": message}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _pool(slice_obj: Object) -> tuple[str, str]:
    spec = _spec(slice_obj)
    return str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or "")


def _generation(slice_obj: Object) -> int:
    try:
        return int((_spec(slice_obj).get("pool") or {}).get("generation") or 0)
    except (TypeError, ValueError):
        return 0


def _pool_subject(slices: list[Object], pool: str) -> str:
    """The node a pool lives on when all its slices name the same one, else the pool's name."""
    nodes = {_spec(s).get("nodeName") for s in slices}
    if len(nodes) == 1 and (node := nodes.pop()):
        return str(node)
    return pool


class _PoolHolders:
    """The claims holding devices of each pool, indexed over every claim on first use.

    Only a warning's note needs them, and most audits warn about few pools (or
    none): a scan of every claim per pool made the audit quadratic in the cluster.
    """

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._by_pool: dict[tuple[str, str], set[str]] | None = None

    def of(self, driver: str, pool: str) -> list[str]:
        if self._by_pool is None:
            self._by_pool = {}
            for claim in self._state.of_kind("ResourceClaim"):
                for r in allocated_devices(claim):
                    if not r.admin_access:
                        self._by_pool.setdefault((r.driver, r.pool), set()).add("/".join(ns_name(claim)))
        return sorted(self._by_pool.get((driver, pool), ()))

    def note(self, driver: str, pool: str) -> str:
        holders = self.of(driver, pool)
        if not holders:
            return ""
        shown = ", ".join(holders[:3]) + (" …" if len(holders) > 3 else "")
        verb = "holds" if len(holders) == 1 else "hold"
        return f"; {_plural(len(holders), 'claim')} still {verb} devices from it ({shown})"


# --- stale-inventory -----------------------------------------------------------------------------


def _generation_warnings(state: ClusterState) -> Iterator[Warning]:
    by_pool: dict[tuple[str, str], list[Object]] = {}
    for slice_obj in state.of_kind("ResourceSlice"):
        by_pool.setdefault(_pool(slice_obj), []).append(slice_obj)
    generations = pool_generations(state)
    current = current_slices(state)
    for (driver, pool), slices in sorted(by_pool.items()):
        subject = _pool_subject(slices, pool)
        gens = generations.get((driver, pool), [])
        newest = current.get((driver, pool), [])
        if len(gens) > 1:
            old = sorted(ns_name(s)[1] for s in slices if _generation(s) < gens[-1])
            verb = "is" if len(old) == 1 else "are"
            yield _warning(
                STALE_INVENTORY,
                subject,
                f"Pool {pool} of {driver} has slices at generations {', '.join(map(str, gens))}: "
                f"{_plural(len(old), 'slice')} at an older generation ({', '.join(old)}) "
                f"{verb} ignored by the scheduler until the driver finishes republishing.",
            )
        declared = max((int((_spec(s).get("pool") or {}).get("resourceSliceCount") or 1) for s in newest), default=1)
        if newest and len(newest) < declared:
            yield _warning(
                STALE_INVENTORY,
                subject,
                f"Pool {pool} of {driver} declares {declared} slices at generation {gens[-1]} "
                f"but only {len(newest)} {'exists' if len(newest) == 1 else 'exist'}; "
                "the devices of the missing ones cannot be allocated.",
            )


def _node_ready(node: Object) -> tuple[bool | None, datetime | None]:
    for cond in _status(node).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True", parse_time(cond.get("lastTransitionTime"))
    return None, None


def _node_warnings(state: ClusterState, holders: _PoolHolders) -> Iterator[Warning]:
    nodes = {ns_name(n)[1]: n for n in state.of_kind("Node")}
    if not nodes:
        return  # a dump without Nodes says nothing about them
    # Devices each node advertises per pool, counted in one pass (first slice by name first).
    devices: dict[tuple[str, str, str], int] = {}
    for slice_obj in sorted(state.of_kind("ResourceSlice"), key=lambda s: ns_name(s)[1]):
        node_name = _spec(slice_obj).get("nodeName")
        if node_name:
            key = (str(node_name), *_pool(slice_obj))
            devices[key] = devices.get(key, 0) + len(_spec(slice_obj).get("devices") or ())
    for (node_name, driver, pool), count in devices.items():
        node = nodes.get(node_name)
        if node is None:
            yield _warning(
                STALE_INVENTORY,
                node_name,
                f"{driver} still advertises {_plural(count, 'device')} in pool {pool} "
                f"on node {node_name}, which no longer exists{holders.note(driver, pool)}.",
            )
            continue
        ready, since = _node_ready(node)
        if ready is False:
            when = f" since {rfc3339(since)}" if since else ""
            yield _warning(
                STALE_INVENTORY,
                node_name,
                f"Node {node_name} is NotReady{when}, but {driver} still advertises "
                f"{_plural(count, 'device')} in pool {pool} from it{holders.note(driver, pool)}.",
            )


def _vanished_warnings(history: HistoryView, holders: _PoolHolders) -> Iterator[Warning]:
    """Drivers that published slices for a node (or pool) that still exists, and no longer do."""
    state = history.state
    live_nodes = {ns_name(n)[1] for n in state.of_kind("Node")}
    live: set[tuple[str, str]] = set()
    for slice_obj in state.of_kind("ResourceSlice"):
        driver, pool = _pool(slice_obj)
        live.add((driver, str(_spec(slice_obj).get("nodeName") or f"pool:{pool}")))
    gone: dict[tuple[str, str], tuple[datetime, int, str]] = {}
    # Only the slices deleted meanwhile are read: every live slice's history would be most of it.
    for deleted_at, last in history.deleted("ResourceSlice").values():
        driver, pool = _pool(last)
        node_name = _spec(last).get("nodeName")
        where = str(node_name or f"pool:{pool}")
        if (driver, where) in live or (node_name and node_name not in live_nodes):
            continue  # replaced by a newer slice, or its node went away with it
        at, count, _ = gone.get((driver, where), (deleted_at, 0, pool))
        gone[(driver, where)] = (max(at, deleted_at), count + len(_spec(last).get("devices") or ()), pool)
    for (driver, where), (at, count, pool) in sorted(gone.items()):
        subject = where.removeprefix("pool:")
        place = f"node {subject}" if not where.startswith("pool:") else f"pool {pool}"
        yield _warning(
            STALE_INVENTORY,
            subject,
            f"{driver}'s slices for {place} ({_plural(count, 'device')}) vanished at {rfc3339(at)}; "
            f"is the driver still running there?{holders.note(driver, pool)}",
        )


# --- double-allocator ------------------------------------------------------------------------------


def _extended_gpus(node: Object) -> dict[str, str]:
    """Device-plugin extended resources (``vendor/resource``) with a non-zero quantity."""
    out: dict[str, str] = {}
    for field in ("capacity", "allocatable"):
        for key, value in (_status(node).get(field) or {}).items():
            if "/" in str(key) and str(value) not in ("0", "") and not str(key).startswith("kubernetes.io/"):
                out.setdefault(str(key), str(value))
    return out


def _same_vendor(resource: str, driver: str) -> bool:
    vendor = resource.split("/", 1)[0]
    return driver == vendor or driver.endswith("." + vendor)


def _double_allocator_warnings(state: ClusterState) -> Iterator[Warning]:
    slices_by_node: dict[str, list[Object]] = {}
    for slice_obj in state.of_kind("ResourceSlice"):
        if name := _spec(slice_obj).get("nodeName"):
            slices_by_node.setdefault(str(name), []).append(slice_obj)
    classes = resource_classes(state)
    for node in sorted(state.of_kind("Node"), key=lambda n: ns_name(n)[1]):
        name = ns_name(node)[1]
        for resource, quantity in sorted(_extended_gpus(node).items()):
            drivers: dict[str, int] = {}
            for slice_obj in slices_by_node.get(name, ()):
                driver, _ = _pool(slice_obj)
                if _same_vendor(resource, driver):
                    drivers[driver] = drivers.get(driver, 0) + len(_spec(slice_obj).get("devices") or ())
            mapped = ""
            if resource in classes:
                # Both paths answer the same Pod request: the scheduler prefers the device plugin where
                # the node advertises it, so the class's DRA devices on this node are handed out too.
                mapped = (
                    f" DeviceClass {classes[resource]} also serves {resource} through DRA "
                    f"(extendedResourceName): Pods asking for {resource} get device-plugin GPUs on {name} "
                    f"while claims allocate its ResourceSlice devices."
                )
            for driver, count in sorted(drivers.items()):
                yield _warning(
                    DOUBLE_ALLOCATOR,
                    name,
                    f"Node {name} advertises {resource}: {quantity} through a device plugin and "
                    f"{_plural(count, 'device')} through {driver} ResourceSlices; the same GPUs can be "
                    f"handed out twice.{mapped}",
                )


# --- admin access ----------------------------------------------------------------------------------


def _admin_namespaces(state: ClusterState) -> set[str]:
    return {
        ns_name(n)[1]
        for n in state.of_kind("Namespace")
        if (meta(n).get("labels") or {}).get(ADMIN_ACCESS_LABEL) == "true"
    }


def _admin_namespace_warnings(state: ClusterState) -> Iterator[Warning]:
    for namespace in sorted(_admin_namespaces(state)):
        yield _warning(
            ADMIN_ACCESS_NAMESPACE,
            namespace,
            f"Namespace {namespace} is labelled {ADMIN_ACCESS_LABEL}=true: its claims may ask for "
            f"adminAccess and reach devices that are allocated to other workloads.",
        )


def _admin_requests(claim: Object) -> list[str]:
    requests = (_spec(claim).get("devices") or {}).get("requests") or ()
    wanted = [
        str(r.get("name"))
        for r in requests
        if isinstance(r, dict) and ((r.get("exactly") or {}).get("adminAccess") or r.get("adminAccess"))
    ]
    # Read from the results themselves: every claim is asked, few have adminAccess, and
    # allocated_devices would place each claim's allocation on a node first.
    results = ((allocation(claim) or {}).get("devices") or {}).get("results") or ()
    granted = [str(r.get("request") or "") for r in results if isinstance(r, dict) and r.get("adminAccess")]
    return sorted(set(wanted) | set(granted))


def _admin_claim_warnings(state: ClusterState) -> Iterator[Warning]:
    labelled = _admin_namespaces(state)
    holders: dict[DeviceId, Object] | None = None  # read on the first claim with adminAccess
    for claim in sorted(state.of_kind("ResourceClaim"), key=ns_name):
        requests = _admin_requests(claim)
        if not requests:
            continue
        holders = device_holders(state) if holders is None else holders
        namespace, name = ns_name(claim)
        shared = sorted(
            f"{r.device} (held by {'/'.join(ns_name(holders[r.id]))})"
            for r in allocated_devices(claim)
            if r.admin_access and r.id in holders
        )
        note = f"; it reaches {', '.join(shared)}" if shared else ""
        if namespace not in labelled:
            note += f"; namespace {namespace} lacks the {ADMIN_ACCESS_LABEL} label"
        yield _warning(
            ADMIN_ACCESS_CLAIM,
            f"{namespace}/{name}",
            f"Claim {namespace}/{name} uses adminAccess (request {', '.join(requests)}){note}.",
        )


# --- template-drift --------------------------------------------------------------------------------


def _generated_claims(state: ClusterState) -> Iterator[tuple[Object, Object, str]]:
    """``(pod, claim, template name)`` for every claim a Pod's template entry generated."""
    for pod in state.of_kind("Pod"):
        namespace, _ = ns_name(pod)
        templates = {
            str(e.get("name")): str(e["resourceClaimTemplateName"])
            for e in _spec(pod).get("resourceClaims") or ()
            if isinstance(e, dict) and e.get("resourceClaimTemplateName")
        }
        for entry in _status(pod).get("resourceClaimStatuses") or ():
            template = templates.get(str(entry.get("name")))
            claim_name = entry.get("resourceClaimName")
            if not template or not claim_name:
                continue
            claim = state.find("ResourceClaim", namespace, str(claim_name))
            if claim is not None:
                yield pod, claim, template


def _shown(value: Any) -> str:
    return "(absent)" if value == "" else repr(value)


def _drift_warnings(state: ClusterState) -> Iterator[Warning]:
    for pod, claim, template_name in _generated_claims(state):
        namespace, claim_name = ns_name(claim)
        template = state.find("ResourceClaimTemplate", namespace, template_name)
        if template is None:
            continue  # a missing template is explain's template-missing, not drift
        wanted = _spec(template).get("spec") or {}
        changes = diff(_spec(claim), wanted)
        if not changes:
            continue
        shown = "; ".join(
            f"{path}: claim has {_shown(old)}, template now {_shown(new)}" for path, old, new in changes[:3]
        )
        more = f" (and {len(changes) - 3} more)" if len(changes) > 3 else ""
        yield _warning(
            TEMPLATE_DRIFT,
            f"{namespace}/{claim_name}",
            f"Claim {namespace}/{claim_name} of pod {ns_name(pod)[1]} differs from template "
            f"{template_name} as it is now: {shown}{more}.",
        )


# --- device taint rules ----------------------------------------------------------------------------


def _taint_rule_warnings(state: ClusterState) -> Iterator[Warning]:
    """Each DeviceTaintRule, per node it taints devices on: the taint, and what its EvictionInProgress says."""
    rules = taint_rules(state)
    if not rules:
        return
    inventory = Inventory.of(state)
    holders = inventory.holders
    for rule in rules:
        name = ns_name(rule)[1]
        taint = _spec(rule)["taint"]
        by_node: dict[str, list[str]] = {}
        held: dict[str, int] = {}
        for device in inventory.devices:
            if rule_selects(rule, device.id):
                where = device.node_name or name
                by_node.setdefault(where, []).append(device.name)
                held[where] = held.get(where, 0) + (device.id in holders)
        cond = rule_condition(rule)
        said = ""
        if cond is not None:
            detail = f": {quote(cond.get('message'))}" if cond.get("message") else ""
            said = f"; EvictionInProgress={cond.get('status')} ({cond.get('reason')}){detail}"
        effect = str(taint.get("effect") or "")
        what = {
            "NoExecute": "new claims cannot get them and Pods of claims holding them are evicted",
            "NoSchedule": "new claims cannot get them; claims holding them keep them",
        }.get(effect, "informational only: nothing is kept off or evicted")
        for where, devices in sorted(by_node.items()):
            shown = ", ".join(devices[:4]) + (" …" if len(devices) > 4 else "")
            place = f" on node {where}" if where != name else ""
            holding = f", {held[where]} of them allocated" if held[where] else ""
            yield _warning(
                DEVICE_TAINT_RULE,
                where,
                f"DeviceTaintRule {name} taints {_plural(len(devices), 'device')}{place} ({shown}{holding}) with "
                f"{taint_label(taint)}: {what}{said}.",
            )


# --- force-deleted Pods ------------------------------------------------------------------------------


def _force_deleted_warnings(state: ClusterState, events: Sequence[Object] | None) -> Iterator[Warning]:
    """Nodes whose kubelet refuses a claim because it still holds one of the same name under an old UID.

    ``events``: the live Events that may say so (a superset), when the caller found them without decoding
    every Event of the state."""
    for event in sorted(state.of_kind("Event") if events is None else events, key=lambda e: ns_name(e)):
        if event.get("reason") not in PREPARE_FAILURE_REASONS:
            continue
        found = FORCE_DELETED.search(str(event.get("message") or ""))
        if found is None:
            continue
        involved = event.get("involvedObject") or {}
        namespace, pod_name = str(involved.get("namespace") or ""), str(involved.get("name") or "")
        pod = state.find("Pod", namespace, pod_name)
        node = str((event.get("source") or {}).get("host") or ((pod or {}).get("spec") or {}).get("nodeName") or "")
        if not node:
            continue
        yield _warning(
            FORCE_DELETED_CLAIM,
            node,
            f"kubelet on {node} still holds claim {namespace}/{found.group(1)} prepared under its old UID "
            f"{found.group(2).rstrip(',;')} (a previous Pod was force-deleted): Pod {namespace}/{pod_name} cannot "
            f"prepare the new claim ({event_count(event)}x {event.get('reason')}, last at {event_last(event)}).",
        )


# --- the report ------------------------------------------------------------------------------------


def audit(history: HistoryView, force_deleted_events: Sequence[Object] | None = None) -> dict[str, Any]:
    """Inventory and access warnings as of ``history.as_of``, sorted by kind and subject.

    ``force_deleted_events``: the live Events mentioning ``FORCE_DELETED_TEXT`` (at least), found by the
    caller; without them every live Event is read for the force-deleted-claim warnings."""
    state = history.state
    holders = _PoolHolders(state)
    found: list[Warning] = [
        *_generation_warnings(state),
        *_node_warnings(state, holders),
        *_vanished_warnings(history, holders),
        *_double_allocator_warnings(state),
        *_admin_namespace_warnings(state),
        *_admin_claim_warnings(state),
        *_drift_warnings(state),
        *_taint_rule_warnings(state),
        *_force_deleted_warnings(state, force_deleted_events),
    ]
    unique = {(w["kind"], w["subject"], w["message"]): w for w in found}
    return {"as_of": rfc3339(history.as_of), "warnings": [unique[k] for k in sorted(unique)]}
