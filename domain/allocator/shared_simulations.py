"""One simulation per distinct ask, shared by every pending Pod that asks it, over one inventory.

A pending Pod's simulation walks every candidate node, and at thousands of nodes that is
the cost of its verdict. Pending Pods mostly come in crowds of one shape (a Job's or a
sweep's replicas, each with a claim from the same template), and while their claims hold
nothing, what the allocator would do for one is what it would do for the others: the
result depends only on the claims' specs, the nodes the Pod is pinned to and the
inventory. So the first such Pod's simulation is kept with the inventory (one per state,
as the selector cache and the counter ledger are) and the others get it relabelled with
their own claims' names; the derivation of a churned snapshot judges hundreds of waiting
Pods over one inventory, and the overview and the notice scan judge every waiting Pod.

A claim that holds devices already (a Pod's sibling claims, a partly allocated claim) makes
its Pod's simulation its own, and is simulated as before.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import replace

import orjson

from domain.allocator.device_checks import SelectorCache
from domain.allocator.matching import Simulation, simulate
from domain.cluster.state import Object, ns_name, uid_of
from domain.inventory.devices import Inventory
from domain.inventory.sharing import ledger_of

_Key = tuple[tuple[bytes, ...], tuple[str, ...] | None]
# A simulation keeps every candidate node's fit (~1 KB a node): 32 distinct asks over 5,000 nodes
# are ~160 MB, held while the inventory lives. Past that the oldest goes, and is simulated again if asked.
_KEPT = 32

# The first Pod's simulation and its claims' UIDs, per distinct ask.
_SHARED: weakref.WeakKeyDictionary[Inventory, dict[_Key, tuple[Simulation, list[str]]]] = weakref.WeakKeyDictionary()
_HOLDERS: weakref.WeakKeyDictionary[Inventory, frozenset[str]] = weakref.WeakKeyDictionary()


def simulate_pod(
    inventory: Inventory,
    claims: Sequence[Object],
    nodes: Iterable[str] | None = None,
    cache: SelectorCache | None = None,
    sibling_claims: Iterable[str] = (),
) -> Simulation:
    """``matching.simulate``, shared between Pods whose claims ask the same and hold nothing."""
    siblings = list(sibling_claims)
    pinned = tuple(sorted(nodes)) if nodes is not None else None
    own = [uid_of(c) for c in claims]
    names = [ns_name(c)[1] for c in claims]
    if len(set(names)) != len(names) or _holding(inventory, [*own, *siblings]):
        return simulate(inventory, claims, pinned, cache, siblings)
    specs = tuple(orjson.dumps((c.get("spec") or {}).get("devices"), option=orjson.OPT_SORT_KEYS) for c in claims)
    key = (specs, pinned)
    shared = _SHARED.get(inventory)
    if shared is None:
        shared = _SHARED[inventory] = {}
    first = shared.get(key)
    if first is None:
        if len(shared) >= _KEPT:
            del shared[next(iter(shared))]
        first = shared[key] = (simulate(inventory, claims, pinned, cache, siblings), own)
    sim, uids = first
    return sim if uids == own else _relabelled(sim, own, names)


def _holding(inventory: Inventory, claim_uids: list[str]) -> bool:
    """Whether any of the claims holds a device, a counter or capacity in the inventory."""
    holders = _HOLDERS.get(inventory)
    if holders is None:
        holders = _HOLDERS[inventory] = frozenset(uid_of(h) for h in inventory.holders.values())
    wanted = set(claim_uids)
    return bool(wanted & holders) or bool(wanted & ledger_of(inventory).holder_uids)


def _relabelled(sim: Simulation, uids: list[str], names: list[str]) -> Simulation:
    """The simulation told of other claims: only their UIDs and names differ (the specs are equal).

    The node fits are shared as they are: they name no claim (each ask is its claim's own object).
    """
    renamed = dict(zip(sim.claim_names, names, strict=True))
    by_name = dict(zip(names, uids, strict=True))
    requests = [
        replace(a, claim_name=renamed[a.claim_name], claim_uid=by_name[renamed[a.claim_name]]) for a in sim.requests
    ]
    relabelled = Simulation(requests, sim.fits, list(names), sim.pinned)
    relabelled.best = sim.best  # the same fits: no need to rank the nodes again
    return relabelled
