"""Deriving a stored snapshot's Pod explanations into ``PodExplanation`` rows, and the allocation
spans of the claims it changed into ``AllocationSpan`` rows (``derived.spans``; with them the device
pages' lookups, ``derived.device_rows``).

The domain stays the one definition of a verdict: every document is what
``verdicts.explain_incarnation`` returns, over the same ``StoredHistory`` a page would
open, with one inventory shared by every Pod judged as of the snapshot.

Only what a change can affect is re-derived (the rest of the rows stay valid):

- a Pod that changed or disappeared;
- the Pods whose documents name a claim that changed, and the Pods a changed claim
  names (its owner, its ``reservedFor`` consumers);
- the Pods a changed Event is about (by UID or by Pod name), or whose claims it is about;
- any change to claims, templates or the inventory (slices, taint rules, classes, nodes, namespaces):
  every Pod still waiting (live, unfinished, not ``ok``), since devices were freed or
  taken; inventory changes also re-derive every counted Pod (its devices' slice, node or
  class may be what changed), except that slice and node changes alone re-derive only the counted
  Pods holding a device in a changed slice's pool, and none for a node that kept its labels
  (``derived.inventory_scope``, which says why that suffices);
- a change to a PodGroup or to a Pod of one: every live member of that group (a member's verdict
  and its document's ``group`` read its siblings), and every Pod still waiting.

A snapshot without changes derives nothing but the Pods whose verdicts move with time alone
(``verdicts.depends_on_time``: a binding wait nearing its timeout). "The changes" are those of every usable
snapshot stored since the newest one this code derived (``derived.pending``): a watcher's batches that
arrived during a derivation are covered by the next one, and those between are left underived (read from
history on request). A cluster's first derivation derives every live Pod.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db import transaction
from django.db.models import Min

from collector.history_reader import STORED, StoredHistory, group_member_versions, live_containing, readable
from collector.models import Cluster, ObjectVersion, Snapshot
from derived.advertised import write_advertised_slices
from derived.claim_rows import end_claim_rows_of, write_claim_rows
from derived.derivation_lock import lock_derivations_of
from derived.device_rows import AdminAccessRows, forget_device_rows_from
from derived.documents import Packer
from derived.event_lookups import forget_event_subjects_from, write_event_subjects
from derived.holds import SpanHolds
from derived.inventory_rows import ROW_KINDS, inventory_usage, write_inventory_devices
from derived.inventory_scope import SCOPED_KINDS, counted_pods_touched
from derived.leak_flags import write_leak_flags
from derived.listings import write_claim_listings
from derived.models import (
    DOMAIN_VERSION,
    VERSIONED,
    AuditReport,
    ClassMatches,
    DerivedSnapshot,
    DeviceCounts,
    InventoryUsage,
    LeakCandidates,
    MetricsText,
    OverviewDocument,
    PodExplanation,
    ReviewDocument,
)
from derived.pending import PendingChanges, pending_for, pending_since
from derived.snapshot_history import SnapshotHistory
from derived.spans import forget_spans_from, inventory_held_in_part, write_spans
from domain.allocator.matching import class_matches
from domain.boundaries.judgement import is_terminal
from domain.cluster.claim_summaries import consumers
from domain.cluster.events import involved_of
from domain.cluster.gangs import GroupKey, group_key, is_group_consumer
from domain.cluster.state import ns_name, uid_of
from domain.inventory.devices import Inventory
from domain.reports.audit import FORCE_DELETED_CLAIM, FORCE_DELETED_TEXT, audit
from domain.reports.leaks import leak_candidates, leak_candidates_between
from domain.reports.metrics import pod_counts
from domain.reports.overview import devices_by_model
from domain.verdicts.explain import depends_on_time, explain_incarnation

log = logging.getLogger("claimline.derived")

# Kinds whose change can only concern the Pods that name them; any other kind is inventory.
_POD_SCOPED = frozenset({"Pod", "Event", "ResourceClaim", "ResourceClaimTemplate", "PodGroup", "Workload"})
BATCH = 2000


class DerivationOrderError(ValueError):
    """A snapshot older than one already derived: the layer, like history, only moves forward."""


@dataclass(frozen=True)
class Derivation:
    snapshot_id: int
    full: bool
    pods_derived: int
    rows_written: int
    coalesced: int = 0  # stored snapshots before it that this derivation covered (left underived)

    def describe(self) -> str:
        how = "every live Pod" if self.full else f"{self.pods_derived} Pods"
        also = f" (and the changes of {self.coalesced} snapshots before it)" if self.coalesced else ""
        return f"snapshot {self.snapshot_id}{also}: derived {how}, {self.rows_written} rows written"


def derive_snapshot(snapshot: Snapshot) -> Derivation | None:
    """Derive ``snapshot`` (a no-op if it is derived already); None for a snapshot that stored nothing."""
    if not snapshot.usable:
        return None
    with transaction.atomic():
        lock_derivations_of(snapshot.cluster_id)  # one at a time, beside the history writes (derivation_lock)
        done = DerivedSnapshot.objects.filter(snapshot=snapshot).first()
        if done is not None and done.version == DOMAIN_VERSION:
            return Derivation(snapshot.pk, done.full, done.pods_derived, 0)
        if done is not None:
            done.delete()  # derived by other domain code: derived again below
        if DerivedSnapshot.objects.filter(cluster_id=snapshot.cluster_id, at__gt=snapshot.at).exists():
            raise DerivationOrderError(
                f"a snapshot after {snapshot.at.isoformat()} is derived already; rebuild-derived --since "
                "recomputes from an earlier time"
            )
        # Derived against the newest derived snapshot: every batch stored since is covered (``derived.pending``).
        # Rows another version of the domain wrote are not this code's verdicts: every live Pod is derived then.
        newest = (
            DerivedSnapshot.objects.filter(cluster_id=snapshot.cluster_id, at__lt=snapshot.at)
            .order_by("-at")
            .values_list("snapshot_id", "at", "version")
            .first()
        )
        base = newest[:2] if newest is not None and newest[2] == DOMAIN_VERSION else None
        full = base is None
        changes = pending_since(snapshot, None if base is None else base[1])
        changed_kinds = set(changes.versions().values_list("kind", flat=True).distinct())
        changed_inventory = bool(changed_kinds - _POD_SCOPED)
        history = SnapshotHistory(StoredHistory(snapshot.cluster, snapshot.at), changed_inventory)
        try:
            # Before judging: the lookup then holds every Event version up to the snapshot.
            if full:
                write_event_subjects(snapshot, history.all_versions("Event"))
                pods = set(history.state.objects.get("Pod", {}))
                # Rows of Pods gone meanwhile may be stale (or judged by other code): they end here,
                # and those Pods are read the old way from now on.
                _open(snapshot.cluster_id).exclude(pod_uid__in=pods).update(valid_to=snapshot.at)
                end_claim_rows_of(snapshot.cluster_id, snapshot.at, keep=pods)
            else:
                involved = write_event_subjects(snapshot, changes=changes)
                pods = affected_pods(snapshot, involved, changes) if changes.changed else set()
                pods.update(_open(snapshot.cluster_id).filter(timed=True).values_list("pod_uid", flat=True))
            # Spans first: a waiting Pod's estimate reads the holds that ended by this snapshot from them.
            admin_access = AdminAccessRows()
            write_spans(snapshot, full, admin_access.observe, changes)
            admin_access.write(snapshot.cluster_id, full)
            written = _write(changes, history, pods, full)
            if full or changed_kinds - {"Event"} or _events_move_audit(changes):
                written += _write_audit(snapshot, history)
            if full or changed_kinds - {"Event", "Pod", "ResourceClaimTemplate"}:
                written += _write_device_counts(snapshot, history)
                written += _write_inventory_usage(snapshot, history)
            if full or "ResourceSlice" in changed_kinds:
                written += write_advertised_slices(snapshot)
            if full or changed_kinds & ROW_KINDS:
                after = None if base is None else base[0]
                written += write_inventory_devices(snapshot, Inventory.of(history.state), after)
            if full or changed_inventory:
                written += _write_class_matches(snapshot, history)
            written += _write_leak_candidates(changes, history, full)
            held_in_part = _held_in_part(history, None if base is None else base[0], changed_inventory)
            written += _write_leak_flags(snapshot, history, held_in_part)
            written += write_claim_listings(snapshot, full, history.state, changes)
            DerivedSnapshot.objects.create(
                held_in_part=held_in_part,
                snapshot=snapshot,
                version=DOMAIN_VERSION,
                cluster_id=snapshot.cluster_id,
                at=snapshot.at,
                full=full,
                pods_derived=len(pods),
                rows_written=written,
                coalesced=changes.coalesced,
            )
        finally:
            history.release()  # its objects refer to each other: freed now, not at a full collection
    result = Derivation(snapshot.pk, full, len(pods), written, changes.coalesced)
    log.info("%s", result.describe())
    return result


def _held_in_part(history: SnapshotHistory, previous: int | None, changed_inventory: bool) -> bool:
    """The inventory's ``held_in_part``: the previous snapshot's unless this one changed the inventory."""
    if previous is not None and not changed_inventory:
        known = held_in_part_of(previous)
        if known is not None:
            return known
    return inventory_held_in_part(history.state)


def _open(cluster_id: int) -> Any:
    return PodExplanation.objects.filter(cluster_id=cluster_id, valid_to__isnull=True)


def affected_pods(
    snapshot: Snapshot,
    involved: Mapping[str, Mapping[str, Any]] | None = None,
    changes: PendingChanges | None = None,
) -> set[str]:
    """The Pod UIDs whose documents the changes the derivation of ``snapshot`` covers (``changes``: its
    own without) can alter (see the module docstring).

    ``involved``: what the snapshot's Event versions are about, by Event UID, as the lookup's writer
    decoded them (``write_event_subjects``); the other changed Events (all without it, the deleted ones
    with it) are read here, a deleted one from its last content."""
    involved = involved or {}
    changes = changes or pending_for(snapshot)
    cluster_id = snapshot.cluster_id
    pods: set[str] = set()
    claims: dict[str, set[str]] = {}  # namespace → claim UIDs
    events: list[tuple[str, str, bool]] = []
    waiting = inventory = False
    scoped: dict[str, set[str]] = {}  # changed slices and nodes by kind: what they touch is bounded
    groups: set[GroupKey] = set()
    stored = changes.versions().values_list("kind", "uid", "namespace", "name", "content", "shapes_checked")
    for kind, uid, namespace, name, content, checked in stored.iterator(BATCH):
        if kind == "Pod":
            pods.add(uid)
            groups.update(_group_of_pod(cluster_id, uid, content))
        elif kind == "PodGroup":
            waiting = True
            groups.add((namespace, name))
        elif kind == "Workload":
            continue  # no verdict reads it
        elif kind == "Event":
            if uid not in involved:
                events.append((uid, namespace, not content))
        elif kind == "ResourceClaim":
            waiting = True
            claims.setdefault(namespace, set()).add(uid)
            claim = readable(kind, uid, snapshot.at, content, checked) if content else None
            if claim is not None:
                pods.update(_pods_named_by_claim(claim))
        elif kind == "ResourceClaimTemplate":
            waiting = True
        elif kind in SCOPED_KINDS:
            waiting = True
            scoped.setdefault(kind, set()).add(uid)
        else:
            waiting = inventory = True
    for about in itertools.chain(involved.values(), _involved(cluster_id, events)):
        uid = str(about.get("uid") or "")
        namespace = str(about.get("namespace") or "")
        if uid:
            pods.add(uid)  # a UID that is no Pod derives nothing
            claims.setdefault(namespace, set()).add(uid)
        elif about.get("kind") == "Pod":
            pods.update(
                ObjectVersion.objects.filter(
                    cluster_id=cluster_id, kind="Pod", namespace=namespace, name=str(about.get("name") or "")
                ).values_list("uid", flat=True)
            )
    if groups:
        waiting = True
        pods.update(_group_members(cluster_id, groups))
    open_rows = _open(cluster_id)
    if waiting:
        pods.update(open_rows.filter(waiting=True).values_list("pod_uid", flat=True))
    if scoped and not inventory:
        touched = counted_pods_touched(cluster_id, scoped, changes.since, snapshot.at)
        inventory = touched is None
        pods.update(touched or ())
    if inventory:
        pods.update(open_rows.filter(counted=True).values_list("pod_uid", flat=True))
    # Live incarnations only: one deleted before the changes is not judged again (below), and one deleted
    # by them is a changed Pod already.
    for namespace, uids in claims.items():
        live_in_namespace = open_rows.filter(namespace=namespace, live=True).exclude(claim_uids="")
        for pod_uid, named in live_in_namespace.values_list("pod_uid", "claim_uids"):
            if uids.intersection(named.split()):
                pods.add(pod_uid)
    return pods - _deleted_before(cluster_id, changes.since, pods)


def _group_of_pod(cluster_id: int, uid: str, content: str) -> Iterable[GroupKey]:
    """The group a changed Pod belongs to (a deleted one's, from its last stored content)."""
    if not content:
        content = (
            ObjectVersion.objects.filter(cluster_id=cluster_id, kind="Pod", uid=uid)
            .exclude(content="")
            .order_by("-valid_from")
            .values_list("content", flat=True)
            .first()
            or ""
        )
    if '"schedulingGroup"' not in content:
        return ()
    key = group_key(orjson.loads(content))
    return (key,) if key is not None else ()


def _group_members(cluster_id: int, groups: set[GroupKey]) -> set[str]:
    """The live Pods of these groups, found by the group name in their stored content."""
    found: set[str] = set()
    for namespace, name in sorted(groups):
        found.update(group_member_versions(cluster_id, namespace, name).values_list("uid", flat=True))
    return found


def _deleted_before(cluster_id: int, since: datetime | None, pods: set[str]) -> set[str]:
    """Of ``pods``, the incarnations deleted by ``since`` (the snapshot derived before: a deletion after it,
    even before the derived snapshot's time, is judged once more): each is judged as it last was, which no later
    change alters, and judging one again reads the whole cluster as of its deletion. Events by Pod name
    and the open rows naming a claim reach every past incarnation, so without this a churned
    snapshot's cost would grow with the history kept."""
    gone: set[str] = set()
    if since is None:
        return gone
    uids = sorted(pods)
    deletions = ObjectVersion.objects.filter(cluster_id=cluster_id, kind="Pod", deleted=True, valid_from__lte=since)
    for start in range(0, len(uids), BATCH):
        gone.update(deletions.filter(uid__in=uids[start : start + BATCH]).values_list("uid", flat=True))
    return gone


def _pods_named_by_claim(claim: dict[str, Any]) -> Iterable[str]:
    for owner in (claim.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(owner, dict) and owner.get("kind") == "Pod" and owner.get("uid"):
            yield str(owner["uid"])
    for consumer in (claim.get("status") or {}).get("reservedFor") or ():
        if isinstance(consumer, dict) and consumer.get("uid"):
            yield str(consumer["uid"])


def _involved(cluster_id: int, events: list[tuple[str, str, bool]]) -> Iterable[dict[str, Any]]:
    """What each changed Event is about; a deleted one is read from its last stored content."""
    uids = [uid for uid, _ns, _gone in events]
    for start in range(0, len(uids), BATCH):
        rows = (
            ObjectVersion.objects.filter(cluster_id=cluster_id, kind="Event", uid__in=uids[start : start + BATCH])
            .exclude(content="")
            .order_by("uid", "-valid_from")
            .values_list(*STORED)
        )
        seen: set[str] = set()
        for uid, at, content, checked in rows:
            event = readable("Event", uid, at, content, checked)
            if uid in seen or event is None:
                continue  # the newest readable content of each event is what it is about
            seen.add(uid)
            involved = involved_of(event)
            if involved is not None:
                yield involved


def _write(changes: PendingChanges, history: SnapshotHistory, pods: set[str], full: bool) -> int:
    snapshot = changes.snapshot
    at = snapshot.at
    heads: dict[str, tuple[int, str, tuple[str, ...]]] = {}
    claims: set[str] = set()
    names: set[tuple[str, str]] = set()
    uids = sorted(pods)
    for start in range(0, len(uids), BATCH):
        batch = _open(snapshot.cluster_id).filter(pod_uid__in=uids[start : start + BATCH])
        read = batch.values_list("pk", "pod_uid", "content_hash", "claim_uids", "namespace", "name", *_LISTED)
        for pk, pod_uid, digest, claim_uids, namespace, name, *listed in read:
            heads[pod_uid] = (pk, digest, tuple(listed))
            claims.update(claim_uids.split())
            names.add((namespace, name))
    if pods and not full:  # nothing judged (an unchanged snapshot): nothing to read ahead
        _judging(changes, history, pods, claims, names)
    superseded: list[int] = []
    written: list[tuple[dict[str, Any], bytes, PodExplanation]] = []
    finished = SpanHolds(snapshot.cluster_id)
    for pod_uid in uids:
        doc = explain_incarnation(history, pod_uid, inventory_of=history.inventory_of, finished=finished)
        if doc is None:
            continue
        content = orjson.dumps(doc)
        digest = hashlib.blake2b(content, digest_size=16).hexdigest()
        head = heads.get(pod_uid)
        row = _row(snapshot, pod_uid, doc, digest, history)
        # The same document, and the Pods page's columns as written (a row of an older version may lack them).
        if head is not None and head[1] == digest and head[2] == tuple(getattr(row, f) for f in _LISTED):
            continue
        if head is not None:
            superseded.append(head[0])
        written.append((doc, content, row))
    if written:
        packer = Packer(snapshot.cluster_id, at, [(doc, content) for doc, content, _row_ in written])
        for _doc, content, row in written:
            row.content, row.dictionary_id = packer.pack(content), packer.dictionary_id
    for start in range(0, len(superseded), BATCH):
        PodExplanation.objects.filter(pk__in=superseded[start : start + BATCH]).update(valid_to=at)
    rows = [row for _doc, _content, row in written]
    PodExplanation.objects.bulk_create(rows, batch_size=BATCH)
    changed = {row.pod_uid: doc for doc, _content, row in written}
    return len(rows) + write_claim_rows(snapshot.cluster_id, at, changed)


def _judging(
    changes: PendingChanges, history: SnapshotHistory, pods: set[str], claims: set[str], names: set[tuple[str, str]]
) -> None:
    """Tell the history what judging ``pods`` reads, so it costs queries in proportion to them: the
    claims their documents named (``claims``), the ones the snapshot changed and the live ones naming
    them; their names (``names``, with the live Pods'), for the Events naming a Pod without a UID."""
    claims = claims | set(changes.versions(kind="ResourceClaim").values_list("uid", flat=True))
    for claim in history.state.of_kind("ResourceClaim"):
        if not pods.isdisjoint(_pods_named_by_claim(claim)):
            claims.add(uid_of(claim))
    for uid in pods:
        pod = history.state.get("Pod", uid)
        if pod is not None:
            names.add(ns_name(pod))
    history.judging(pods, claims, names)


# The cluster-wide documents kept one row per span of snapshots: the head is open (valid_to NULL).
_DocumentRow = type[AuditReport] | type[DeviceCounts] | type[ClassMatches] | type[InventoryUsage]
_ClusterRow = _DocumentRow | type[LeakCandidates]


def _head(model: _ClusterRow, snapshot: Snapshot) -> Any:
    """The open row before ``snapshot``; one this snapshot wrote before (by other code) is dropped,
    the row before it having been closed at this snapshot."""
    rows = model.objects.filter(cluster_id=snapshot.cluster_id)
    rows.filter(valid_from=snapshot.at).delete()
    return rows.filter(valid_to__isnull=True).first()


def _follow(model: _ClusterRow, snapshot: Snapshot, **fields: Any) -> int:
    """Close the open row at ``snapshot`` and open one with ``fields`` from it; 1 row written."""
    model.objects.filter(cluster_id=snapshot.cluster_id, valid_to__isnull=True).update(valid_to=snapshot.at)
    model.objects.create(cluster_id=snapshot.cluster_id, valid_from=snapshot.at, **fields)
    return 1


def _events_move_audit(changes: PendingChanges) -> bool:
    """Whether the snapshot's Events can change the audit: its force-deleted-claim warnings read kubelet's
    "previous pod force-deleted" failures, which appear as Events and go when those expire."""
    events = changes.versions(kind="Event")
    if events.filter(content__contains=FORCE_DELETED_TEXT).exists():
        return True
    if not events.filter(deleted=True).exists():
        return False
    head = AuditReport.objects.filter(cluster_id=changes.snapshot.cluster_id, valid_to__isnull=True).first()
    return head is not None and FORCE_DELETED_CLAIM in head.warnings


def _write_audit(snapshot: Snapshot, history: SnapshotHistory) -> int:
    """The audit as of the snapshot, when it differs from the one before; how many rows were written."""
    # Only the Events that can be kubelet's "previous pod force-deleted" failures are decoded.
    events = live_containing(snapshot.cluster, snapshot.at, "Event", FORCE_DELETED_TEXT)
    return _write_document(AuditReport, snapshot, "warnings", audit(history, events)["warnings"])


def _write_device_counts(snapshot: Snapshot, history: SnapshotHistory) -> int:
    """The overview's device counts as of the snapshot, when they differ from before; rows written."""
    return _write_document(DeviceCounts, snapshot, "document", devices_by_model(Inventory.of(history.state)))


def _write_inventory_usage(snapshot: Snapshot, history: SnapshotHistory) -> int:
    """The counter sets in use and the devices they block as of the snapshot, when they differ; rows written."""
    return _write_document(InventoryUsage, snapshot, "document", inventory_usage(Inventory.of(history.state)))


def _write_class_matches(snapshot: Snapshot, history: SnapshotHistory) -> int:
    """Each DeviceClass's matching devices as of the snapshot, when they differ from before; rows written."""
    return _write_document(ClassMatches, snapshot, "document", class_matches(history.state))


def _write_document(model: _DocumentRow, snapshot: Snapshot, field: str, doc: Any) -> int:
    """A cluster-wide JSON document as of ``snapshot`` in ``model``'s ``field``, in a new row only when
    its content differs from the open row's (compared by hash); rows written."""
    content = orjson.dumps(doc)
    digest = hashlib.blake2b(content, digest_size=16).hexdigest()
    head = _head(model, snapshot)
    if head is not None and head.content_hash == digest:
        return 0
    return _follow(model, snapshot, **{field: content.decode(), "content_hash": digest})


def _write_leak_candidates(changes: PendingChanges, history: SnapshotHistory, full: bool) -> int:
    """The claims that can be flagged as of the snapshot, when they differ from before; rows written.

    With them, the claims the covered batches changed (or whose consumers they changed) that were
    under a leak condition at one of those changes only (``leaks.leak_candidates_between``): the
    weekly review classifies the claims of its rows alone (``derived.review.leak_suspects``), and
    a condition that came and went between two derived snapshots can still be flagged there. Such a
    claim is judged again at the next change, as every candidate is, and then drops out.
    """
    snapshot = changes.snapshot
    head = _head(LeakCandidates, snapshot)
    before = set(head.claim_uids.split()) if head is not None and not full else None
    if before is not None and not changes.changed:
        return 0  # time alone adds no candidate; one it ends is judged unflagged until the next change
    changed = changes.versions(kind__in=("ResourceClaim", "Pod", "PodGroup"))
    first_change = changed.aggregate(first=Min("valid_from"))["first"]
    # Changes stored before the snapshot's time: batches it covers, or versions dated by arrival.
    between = first_change is not None and first_change < snapshot.at
    claims = _changed_claims(changed, history) if before is not None or between else set()
    if before is None:
        now = leak_candidates(history)
    else:
        recheck = before | claims
        history.prefetch("ResourceClaim", recheck)
        history.prefetch("Pod", _consumers_of(history, recheck))
        now = (before - recheck) | leak_candidates(history, recheck)
    if between:
        now |= leak_candidates_between(history, claims - now, first_change, snapshot.at)
    if head is not None and set(head.claim_uids.split()) == now:
        return 0
    return _follow(LeakCandidates, snapshot, claim_uids=" ".join(sorted(now)))


def _changed_claims(changed: Any, history: SnapshotHistory) -> set[str]:
    """The claims among ``changed`` versions, and the live claims whose consumers are among them."""
    claims = set(changed.filter(kind="ResourceClaim").values_list("uid", flat=True))
    pods = set(changed.filter(kind="Pod").values_list("uid", flat=True))
    if pods or changed.filter(kind="PodGroup").exists():
        # A claim's conditions read the Pods its reservedFor names, and a PodGroup's members.
        claims.update(
            uid_of(claim)
            for claim in history.state.of_kind("ResourceClaim")
            if any(str(c.get("uid")) in pods or is_group_consumer(c) for c in consumers(claim))
        )
    return claims


def _write_leak_flags(snapshot: Snapshot, history: SnapshotHistory, held_in_part: bool) -> int:
    """The leak report's flagged claims as of the snapshot, judged among its leak candidates (time alone
    flags a candidate, so at every snapshot); rows written."""
    row = LeakCandidates.objects.filter(cluster_id=snapshot.cluster_id, valid_to__isnull=True).first()
    candidates = set(row.claim_uids.split()) if row is not None else set()
    if candidates:
        history.prefetch("ResourceClaim", candidates)
        history.prefetch("Pod", _consumers_of(history, candidates))
    return write_leak_flags(snapshot, history, candidates, held_in_part)


def _consumers_of(history: SnapshotHistory, claim_uids: set[str]) -> set[str]:
    """The Pods the live claims of ``claim_uids`` name as consumers: what their leak conditions read."""
    return {
        str(c.get("uid"))
        for uid in claim_uids
        if (claim := history.state.get("ResourceClaim", uid)) is not None
        for c in consumers(claim)
        if c.get("uid")
    }


# The columns of a row read without its document (``PodExplanation``): the Pods page's, the overview's.
_LISTED = ("reason", "boundary", "node", "phase", "created", "message")


def _row(
    snapshot: Snapshot, pod_uid: str, doc: dict[str, Any], digest: str, history: SnapshotHistory
) -> PodExplanation:
    """The row of a document, its content packed by the caller (one dictionary for the write)."""
    summary = doc["pod"]
    live_pod = history.state.get("Pod", pod_uid)
    counted = live_pod is not None and not is_terminal(live_pod)
    verdict = doc["verdict"] if live_pod is not None and not is_terminal(live_pod) else {}
    return PodExplanation(
        cluster_id=snapshot.cluster_id,
        pod_uid=pod_uid,
        namespace=summary["namespace"],
        name=summary["name"],
        content_hash=digest,
        claim_uids=" ".join(c["uid"] for c in doc["claims"] if c.get("uid")),
        states=orjson.dumps(pod_counts(doc["verdict"], doc["claims"])).decode() if counted else "",
        waiting=live_pod is not None and not is_terminal(live_pod) and doc["verdict"]["reason"] != "ok",
        counted=counted,
        timed=live_pod is not None and not is_terminal(live_pod) and depends_on_time(doc),
        live=live_pod is not None,
        reason=str(verdict.get("reason") or ""),
        boundary=str(verdict.get("boundary") or ""),
        message=str(verdict.get("message") or ""),
        node=str(summary.get("node") or ""),
        phase=str(summary.get("phase") or ""),
        created=str(summary.get("created") or ""),
        valid_from=snapshot.at,
    )


def forget_from(cluster: Cluster, at: datetime) -> None:
    """Drop what was derived from snapshots at or after ``at`` (rebuild-derived recomputes it)."""
    with transaction.atomic():
        lock_derivations_of(cluster.pk)
        for model in VERSIONED:
            model.objects.filter(cluster=cluster, valid_from__gte=at).delete()
            model.objects.filter(cluster=cluster, valid_to__gte=at).update(valid_to=None)
        forget_spans_from(cluster.pk, at)
        forget_device_rows_from(cluster.pk, at)
        forget_event_subjects_from(cluster.pk, at)
        DerivedSnapshot.objects.filter(cluster=cluster, at__gte=at).delete()
        MetricsText.objects.filter(cluster=cluster, snapshot__at__gte=at).delete()
        OverviewDocument.objects.filter(cluster=cluster, snapshot__at__gte=at).delete()
        ReviewDocument.objects.filter(cluster=cluster, snapshot__at__gte=at).delete()


def covered(snapshot_pk: int) -> bool:
    """Derived, by this code: rows another version of the domain wrote are not its verdicts."""
    return DerivedSnapshot.objects.filter(snapshot_id=snapshot_pk, version=DOMAIN_VERSION).exists()


def held_in_part_of(snapshot_pk: int) -> bool | None:
    """Whether the snapshot's inventory has a device a claim may hold part of; None when this code
    did not derive it. Without one every allocation counts whole and no inventory is needed."""
    derived = DerivedSnapshot.objects.filter(snapshot_id=snapshot_pk, version=DOMAIN_VERSION)
    return derived.values_list("held_in_part", flat=True).first()
