"""Which counted Pods a change to ResourceSlices or Nodes can re-judge, so that such a change does not
re-derive every counted Pod of the cluster.

A counted Pod that is not waiting has the verdict ``ok``: its claims are allocated, and its document
reads from the inventory only

- its allocated devices, adminAccess ones too (``Inventory.by_id``: the device's entry and taints, its
  slice, its pool's newest generation, completeness and problem): facts of the device's own pool;
- the cluster's nodes by name and labels (``cluster_nodes``), through ``allocation_node`` when an
  allocation's nodeSelector names no node (it selects by labels, say a rack): which node matches it can
  change with any node's labels. An allocation pinned to its node by name (what kube-scheduler writes
  for a node-local device) or without a nodeSelector reads no node. So a Node that appeared, went or
  changed its name or labels re-judges the counted Pods of label-selected allocations only, and a status
  or heartbeat update none. Without any Node object the nodes are read from every slice's ``nodeName``:
  neither slice nor Node changes are bounded then, nor while the first node appears or the last goes.

Waiting Pods are re-derived on any inventory change anyway (``writer.affected_pods``), and every other
inventory kind (DeviceTaintRule, DeviceClass, Namespace, ...) still re-derives every counted Pod there.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import orjson
from django.db.models import Q

from collector.models import ObjectVersion
from derived.models import AdminAccessResult, AllocationSpan, PodExplanation
from domain.inventory.devices import allocation, allocation_node, slice_pool

Pool = tuple[str, str]  # (driver, pool)
SCOPED_KINDS = frozenset({"ResourceSlice", "Node"})
_BATCH = 500


def counted_pods_touched(
    cluster_id: int, changed: dict[str, set[str]], since: datetime | None, at: datetime
) -> set[str] | None:
    """The counted Pods whose documents the changes to ``changed`` (kind → UIDs, of ``SCOPED_KINDS``)
    since ``since`` can alter; None when they cannot be bounded (every counted Pod, then)."""
    if since is None:
        return None
    claims: set[str] = set()
    if changed.get("Node") and not _node_labels_kept(cluster_id, changed["Node"], since):
        if not (_has_nodes(cluster_id, since) and _has_nodes(cluster_id, at)):
            return None  # the nodes were, or are, read from the slices
        claims |= _label_selected_claims(cluster_id, at)
    slices = changed.get("ResourceSlice")
    if slices:
        if not _has_nodes(cluster_id, at):
            return None
        pools = changed_pools(cluster_id, slices, since)
        if pools is None:
            return None
        claims |= _claims_holding(cluster_id, pools)
    if not claims:
        return set()
    counted = PodExplanation.objects.filter(cluster_id=cluster_id, valid_to__isnull=True, counted=True)
    return {
        pod_uid
        for pod_uid, named in counted.exclude(claim_uids="").values_list("pod_uid", "claim_uids").iterator(2000)
        if claims.intersection(named.split())
    }


def _contents_since(cluster_id: int, kind: str, uids: set[str], since: datetime) -> Iterable[tuple[str, datetime, str]]:
    """(uid, valid_from, content) of every version of ``uids`` in effect at ``since`` or stored after it
    (content empty for a deletion)."""
    versions = ObjectVersion.objects.filter(cluster_id=cluster_id, kind=kind).filter(
        Q(valid_to__isnull=True) | Q(valid_to__gte=since)
    )
    ordered = sorted(uids)
    for start in range(0, len(ordered), _BATCH):
        chunk = versions.filter(uid__in=ordered[start : start + _BATCH])
        yield from chunk.values_list("uid", "valid_from", "content").iterator(_BATCH)


def _decoded(content: str) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def changed_pools(cluster_id: int, slice_uids: set[str], since: datetime) -> set[Pool] | None:
    """The pools of every content the slices had from ``since`` on: the one in effect then (a deleted
    slice's last) and each stored after; None when one cannot be read (then no bound holds)."""
    pools: set[Pool] = set()
    for _uid, _at, content in _contents_since(cluster_id, "ResourceSlice", slice_uids, since):
        if not content:
            continue
        obj = _decoded(content)
        if obj is None or not isinstance(obj.get("spec") or {}, dict):
            return None
        pools.add(slice_pool(obj))
    return pools


def _node_labels_kept(cluster_id: int, node_uids: set[str], since: datetime) -> bool:
    """Whether each changed Node existed at ``since``, still does, and kept its name and labels throughout."""
    seen: dict[str, set[str]] = {}
    existed: set[str] = set()
    for uid, valid_from, content in _contents_since(cluster_id, "Node", node_uids, since):
        if not content:
            return False  # deleted
        obj = _decoded(content)
        metadata = obj.get("metadata") if obj is not None else None
        if not isinstance(metadata, dict):
            return False
        labels = metadata.get("labels") or {}
        seen.setdefault(uid, set()).add(
            orjson.dumps([metadata.get("name"), labels], option=orjson.OPT_SORT_KEYS).decode()
        )
        if valid_from <= since:
            existed.add(uid)
    return all(len(seen.get(uid, ())) == 1 and uid in existed for uid in node_uids)


def _has_nodes(cluster_id: int, at: datetime) -> bool:
    """Whether a Node object is live at ``at`` (without one, nodes are read from every slice)."""
    live = ObjectVersion.objects.filter(cluster_id=cluster_id, kind="Node", valid_from__lte=at).exclude(content="")
    return live.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=at)).exists()


def _label_selected_claims(cluster_id: int, at: datetime) -> set[str]:
    """The claims whose allocation in effect at ``at`` has a nodeSelector naming no node, so that where
    it is comes from matching every node's labels (``allocation_node``); an unreadable one is counted."""
    live = (
        ObjectVersion.objects.filter(cluster_id=cluster_id, kind="ResourceClaim", valid_from__lte=at)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=at))
        .exclude(content="")
        .filter(content__contains='"nodeSelector"')  # most claims hold nothing, or are pinned: decode few
    )
    found: set[str] = set()
    for uid, content in live.values_list("uid", "content").iterator(_BATCH):
        claim = _decoded(content)
        if claim is None:
            found.add(uid)
            continue
        selector = (allocation(claim) or {}).get("nodeSelector")
        if isinstance(selector, dict) and allocation_node(claim) is None:
            found.add(uid)
    return found


def _claims_holding(cluster_id: int, pools: Iterable[Pool]) -> set[str]:
    """The claims with an open allocation span on a device of ``pools``, or an adminAccess result on one
    (no span: it holds nothing, yet its Pod's document reads the device), as the last derivation left
    them (a claim changed since is re-judged with its Pods anyway)."""
    found: set[str] = set()
    ordered = sorted(pools)
    for start in range(0, len(ordered), _BATCH):
        match: Any = Q()
        for driver, pool in ordered[start : start + _BATCH]:
            match |= Q(driver=driver, pool=pool)
        spans = AllocationSpan.objects.filter(match, cluster_id=cluster_id, end__isnull=True)
        found.update(spans.values_list("claim_uid", flat=True).distinct())
        admin = AdminAccessResult.objects.filter(match, cluster_id=cluster_id)  # every one ever seen: a superset
        found.update(admin.values_list("claim_uid", flat=True).distinct())
    return found
