"""A Pod of a gang is judged with its group: the scheduler places ``minCount`` members together, or none.

``gang-incomplete`` when fewer than ``minCount`` members exist, or can be scheduled at all (gated, a claim
missing). When they all can, the group is placed as the scheduler would try it: its unbound members one
after the other (by name), each member's devices taken before the next is tried, members bound already
counting as placed. When fewer than ``minCount`` fit together, the device reason of the first member that
does not fit (``devices-in-use`` naming the holders, …) stops the group, and every waiting member says so.

Not modelled: the scheduler's order of members and its search over their placements (a member that does
not fit after its siblings took their devices might fit in another order), node resources, topology
constraints (``schedulingConstraints``) and composite groups.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from domain.allocator.matching import SelectorCache, Simulation, simulate
from domain.boundaries.judgement import (
    FAILED,
    OK,
    Boundary,
    ClaimLifecycle,
    PodContext,
    condition_evidence,
    event_evidence,
    pod_condition,
    quote,
)
from domain.cluster.gangs import (
    INITIALLY_SCHEDULED,
    GroupKey,
    group_claims,
    group_condition,
    group_key,
    member_state,
    members_of,
    min_count,
    workload_of,
)
from domain.cluster.pod_claims import PodClaim, resolve_pod_claims
from domain.cluster.state import ClusterState, HistoryView, Object, meta, ns_name, spec_of, status_of, uid_of
from domain.inventory.devices import Inventory, allocation_node, is_allocated

GANG_INCOMPLETE = "gang-incomplete"
# A Pod's own problems come before its group's: they are what keeps it (and so its group) waiting.
_OWN_REASONS = frozenset(
    {"claim-missing", "template-missing", "device-class-missing", "no-inventory", "scheduler-bypassed"}
)
PLACED_STATES = ("running", "bound")


@dataclass
class Member:
    """One Pod of the group and where it stands: running, bound, pending, gated, blocked, terminal, deleting."""

    pod: Object
    state: str
    detail: str = ""
    claims: list[PodClaim] = field(default_factory=list)

    @property
    def name(self) -> str:
        return ns_name(self.pod)[1]

    @property
    def active(self) -> bool:
        return self.state not in ("terminal", "deleting")

    def to_dict(self, fits: bool | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "uid": uid_of(self.pod),
            "phase": status_of(self.pod).get("phase"),
            "node": spec_of(self.pod).get("nodeName"),
            "state": self.state,
            "detail": self.detail,
        }
        if fits is not None:
            out["fits"] = fits
        return out


@dataclass
class Placement:
    """The group's unbound members tried one after the other: who is placed (bound or fitting), who is not."""

    placed: list[str]
    fits: dict[str, bool]
    failing: Member | None = None
    simulation: Simulation | None = None


@dataclass
class Gang:
    key: GroupKey
    group: Object | None
    members: list[Member]
    placement: Placement | None = None

    @property
    def min_count(self) -> int | None:
        return min_count(self.group) if self.group is not None else None

    @property
    def label(self) -> str:
        return "/".join(self.key)

    @property
    def active(self) -> list[Member]:
        return [m for m in self.members if m.active]

    @property
    def schedulable(self) -> list[Member]:
        return [m for m in self.active if m.state in (*PLACED_STATES, "pending")]

    def to_dict(self) -> dict[str, Any]:
        """The explain document's ``group``: the PodGroup, its policy, its members and their states."""
        group = self.group
        fits = self.placement.fits if self.placement is not None else {}
        out: dict[str, Any] = {
            "namespace": self.key[0],
            "name": self.key[1],
            "exists": group is not None,
            "uid": uid_of(group) if group is not None else None,
            "policy": "gang" if self.min_count is not None else ("basic" if group is not None else None),
            "minCount": self.min_count,
            "workload": workload_of(group) if group is not None else None,
            "members": [m.to_dict(fits.get(m.name)) for m in self.members],
            "claims": group_claims(group) if group is not None else [],
        }
        cond = group_condition(group) if group is not None else None
        if cond is not None:
            out["condition"] = {k: cond.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
        if self.placement is not None:
            out["placed"] = len(self.placement.placed)
        return out


# --- members ------------------------------------------------------------------------------------------


def _member(history: HistoryView, pod: Object) -> Member:
    state, detail = member_state(pod)
    if state != "pending":
        return Member(pod, state, detail)
    claims = resolve_pod_claims(history, pod)
    problem = next((pc for pc in claims if pc.problem), None)
    if problem is not None:
        return Member(pod, "blocked", problem.problem_message or str(problem.problem), claims)
    return Member(pod, "pending", "", claims)


def gang_of(history: HistoryView, pod: Object) -> Gang | None:
    """The Pod's group as of the history's state, members and all; None for a Pod of no group.

    Kept with the state: every member of the group judged over it reads the same."""
    key = group_key(pod)
    if key is None:
        return None
    state = history.state
    known: dict[GroupKey, Gang] = state.derived.setdefault("gangs", {})
    gang = known.get(key)
    if gang is None or not any(uid_of(m.pod) == uid_of(pod) for m in gang.members):
        pods = members_of(state, key)
        if not any(uid_of(p) == uid_of(pod) for p in pods):
            pods = sorted([*pods, pod], key=ns_name)  # judged as it last was, gone from the state now
        gang = Gang(key, state.find("PodGroup", *key), [_member(history, p) for p in pods])
        known[key] = gang
    return gang


# --- placing the group --------------------------------------------------------------------------------

_PLACEMENTS: weakref.WeakKeyDictionary[Inventory, dict[tuple[GroupKey, tuple[str, ...]], Placement]] = (
    weakref.WeakKeyDictionary()
)


def place(gang: Gang, inventory: Inventory, cache: SelectorCache) -> Placement:
    """Place the group's unbound members one after the other over ``inventory`` (kept with it)."""
    pending = [m for m in gang.active if m.state == "pending"]
    key = (gang.key, tuple(uid_of(m.pod) for m in gang.active))
    known = _PLACEMENTS.setdefault(inventory, {})
    if key in known:
        return known[key]
    placement = Placement([m.name for m in gang.active if m.state in PLACED_STATES], {})
    current = inventory
    decided: dict[str, str] = {}  # claim UID → the node an earlier member's placement put it on
    for member in pending:
        allocated = [pc.claim for pc in member.claims if pc.claim is not None and is_allocated(pc.claim)]
        todo = [
            pc.claim
            for pc in member.claims
            if pc.claim is not None and not is_allocated(pc.claim) and uid_of(pc.claim) not in decided
        ]
        nodes = _pinned(member, allocated, decided, inventory)
        if not todo:
            placement.fits[member.name] = nodes is None or bool(nodes)
        else:
            sim = simulate(current, todo, nodes, cache, [uid_of(c) for c in allocated])
            fit = sim.fitting_node
            placement.fits[member.name] = fit is not None
            if fit is not None:
                current = _with_picks(current, sim, todo, fit.node)
                decided.update((uid_of(c), fit.node) for c in todo if uid_of(c))
            elif placement.failing is None:
                placement.failing, placement.simulation = member, sim
        if placement.fits[member.name]:
            placement.placed.append(member.name)
    known[key] = placement
    return placement


def _pinned(
    member: Member, allocated: Sequence[Object], decided: dict[str, str], inventory: Inventory
) -> list[str] | None:
    """Nodes the member can go to: where its allocated claims, and the shared claims placed before it, are."""
    nodes: set[str] | None = None
    for claim in allocated:
        node = allocation_node(claim, inventory.nodes)
        if node is not None:
            nodes = {node} if nodes is None else nodes & {node}
    for pc in member.claims:
        node = decided.get(uid_of(pc.claim)) if pc.claim is not None else None
        if node is not None:
            nodes = {node} if nodes is None else nodes & {node}
    return sorted(nodes) if nodes is not None else None


def _with_picks(inventory: Inventory, sim: Simulation, claims: Sequence[Object], node: str) -> Inventory:
    """The inventory with ``claims`` allocated as the simulation picked on ``node``: what the next member finds."""
    results: dict[str, list[dict[str, Any]]] = {}
    fit = next(f for f in sim.fits if f.node == node)
    for on_node in fit.asks:
        owner = sim.analysis_for(on_node).claim_uid
        for device in on_node.picked:
            results.setdefault(owner, []).append(
                {"request": on_node.ask.name, "driver": device.driver, "pool": device.pool, "device": device.name}
            )
    state = inventory.state
    placed = dict(state.objects.get("ResourceClaim", {}))
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    for claim in claims:
        picked = results.get(uid_of(claim))
        if picked:
            allocation = {"devices": {"results": picked}, "nodeSelector": selector}
            key = uid_of(claim) or "/".join(("planned", *ns_name(claim)))
            placed[key] = {**claim, "status": {**status_of(claim), "allocation": allocation}}
    return inventory.with_claims_of(ClusterState(state.as_of, {**state.objects, "ResourceClaim": placed}))


# --- the verdict ----------------------------------------------------------------------------------------


def judge_gang(ctx: PodContext, lifecycles: list[ClaimLifecycle]) -> Gang | None:
    """The Pod's group (None for a Pod of none); a waiting member's claims get the group's verdict when the
    group, not the Pod alone, is what keeps it from being placed."""
    gang = gang_of(ctx.history, ctx.pod)
    if gang is None or ctx.settled or ctx.node_name or meta(ctx.pod).get("deletionTimestamp"):
        return gang
    if gang.group is not None and gang.min_count is None:
        return gang  # the basic policy: each member is placed on its own
    if any(lc.boundaries[b].reason in _OWN_REASONS for lc in lifecycles for b in ("inventory", "allocation")):
        return gang
    gang, found = _gang_verdict(ctx, gang)
    if found is None:
        return gang
    reason, message = found
    evidence = _gang_evidence(ctx, gang)
    since = _since(ctx, gang)
    waiting = [lc for lc in lifecycles if lc.boundaries["allocation"].state != OK] or lifecycles
    for lc in waiting:
        before = lc.boundaries["allocation"]
        lc.boundaries["allocation"] = Boundary(
            FAILED, since=since or before.since, evidence=evidence + before.evidence, reason=reason, message=message
        )
    return gang


def _gang_verdict(ctx: PodContext, gang: Gang) -> tuple[Gang, tuple[str, str] | None]:
    """(the group, with its placement when one was tried; the group's verdict for the Pod, or None).

    The group kept with the state is left alone: what one member's document shows must not depend on
    whether a sibling was judged before it."""
    namespace, name = gang.key
    if gang.group is None:
        return gang, (GANG_INCOMPLETE, (
            f"the Pod names PodGroup {namespace}/{name} in spec.schedulingGroup, which does not exist: the "
            "scheduler holds the Pod until its group appears"
        ))
    need = gang.min_count or 0
    said = _scheduler_said(gang)
    active, schedulable = gang.active, gang.schedulable
    head = f"gang {namespace}/{name} needs {need} members placed together (PodGroup minCount {need})"
    if len(active) < need:
        listed = f" ({', '.join(m.name for m in active)})" if active else ""
        verb = "exists" if len(active) == 1 else "exist"
        return gang, (GANG_INCOMPLETE, (
            f"{head}, but only {len(active)} {verb}{listed}: the scheduler places none of them until "
            f"{need - len(active)} more {'is' if need - len(active) == 1 else 'are'} created{said}"
        ))
    if len(schedulable) < need:
        blocked = [m for m in active if m not in schedulable]
        why = "; ".join(f"{m.name}: {m.detail}" for m in blocked[:3]) + ("; …" if len(blocked) > 3 else "")
        return gang, (GANG_INCOMPLETE, (
            f"{head}: {len(active)} exist, but only {len(schedulable)} can be scheduled ({why}){said}"
        ))
    placement = place(gang, ctx.inventory, ctx.cache)
    gang = replace(gang, placement=placement)
    if len(placement.placed) >= need or placement.failing is None or placement.simulation is None:
        return gang, None
    sim = placement.simulation
    return gang, (sim.reason or "insufficient-devices", (
        f"{head}, but only {len(placement.placed)} of its {len(active)} members fit together "
        f"({', '.join(placement.placed) or 'none'}); with their devices taken, member {placement.failing.name} "
        f"does not: {sim.message()}{said}"
    ))


def _scheduler_said(gang: Gang) -> str:
    cond = group_condition(gang.group) if gang.group is not None else None
    if cond is None or cond.get("status") != "False" or not cond.get("message"):
        return ""
    return f'; the scheduler reported on the group: "{quote(cond.get("message"))}"'


def _since(ctx: PodContext, gang: Gang) -> str | None:
    cond = group_condition(gang.group) if gang.group is not None else None
    if cond is not None and cond.get("status") == "False" and cond.get("lastTransitionTime"):
        return str(cond["lastTransitionTime"])
    scheduled = pod_condition(ctx.pod, "PodScheduled")
    if scheduled and scheduled.get("status") == "False" and scheduled.get("lastTransitionTime"):
        return str(scheduled["lastTransitionTime"])
    return meta(ctx.pod).get("creationTimestamp")


def _gang_evidence(ctx: PodContext, gang: Gang) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "kind": "PodGroup",
        "namespace": gang.key[0],
        "name": gang.key[1],
        "exists": gang.group is not None,
        "minCount": gang.min_count,
        "members": len(gang.active),
        "schedulable": len(gang.schedulable),
    }
    if gang.placement is not None:
        entry["placed"] = len(gang.placement.placed)
    out = [entry]
    cond = group_condition(gang.group) if gang.group is not None else None
    if cond is not None:
        out.append({**condition_evidence(cond), "type": INITIALLY_SCHEDULED})
    scheduled = pod_condition(ctx.pod, "PodScheduled")
    if scheduled:
        out.append(condition_evidence(scheduled))
    out += [event_evidence(e) for e in ctx.events_with(("FailedScheduling",))]
    return out
