"""The weekly review read from allocation spans when the layer covers the asked snapshot, and the
current week's review rendered after a derivation (``ReviewDocument``), which readers load whole.

``capacity.weekly_review`` stays the one definition; what changes is where its claims come from.
On read it decodes every claim version of the eight weeks the review spans; here the pieces are
the stored spans overlapping them, and only the claims those spans name are read (their versions,
and their consumers' and owners' Pods' versions, two queries in all), which is what leaks'
``flagged_intervals`` classifies. Leak intervals stay computed on read: evidence stored later
(a Pod's ``finishedAt``) can move where an earlier stretch counts as flagged, and they depend on
the configured thresholds. Advertised device-hours stay on read too (``InventoryTimeline``
reads the slices' versions of the two weeks; bench/README.md has its cost). That is why the
current week's review (what the page opens on, and what a new snapshot makes every reader
compute) is rendered after a derivation, as /metrics is, at most every CLAIMLINE_REVIEW_REFRESH.

GPU-equivalent fractions are read against the inventory as of the asked snapshot, as on read;
the derivation records whether that inventory advertises any device held in part, and when it
does not, every fraction is 1 and no inventory is built.

A past week's review is stored too (``derived.past_reviews`` renders it): once more, as of the
first derived snapshot on or after the week's end (a *final* document), and that one stands for
every later snapshot when it was rendered with the asked thresholds by this DOMAIN_VERSION. Why
it may: every allocation span overlapping the week began before its end and is read as of the
rendered snapshot, and nothing stored later reopens the week, so a later snapshot would compute
the same figures but for ``as_of``, which says which snapshot the document describes. (Evidence
only stored later, such as a Pod's ``finishedAt`` seen in a later snapshot, would move a leak
interval on read; the document keeps the week as it was known one snapshot after it ended, as
the current week's keeps it for up to a refresh interval.) A stored row of a week that has ended
as of the asked snapshot stands only when it is final; other code or thresholds compute on read.
The current week keeps its own rule (``stored_review``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from collector.history_reader import StoredHistory, readable
from collector.models import ObjectVersion, Snapshot
from derived.models import DOMAIN_VERSION, AllocationSpan, DerivedSnapshot, LeakCandidates, ReviewDocument
from derived.rendered import latest_derived
from derived.thresholds import leak_thresholds
from derived.writer import covered, held_in_part_of
from domain.cluster.state import Object, Version, meta
from domain.inventory.devices import Inventory
from domain.reports.capacity import (
    WEEK,
    Allocations,
    Piece,
    claim_device_fractions,
    versions_since,
    week_containing,
    weekly_review,
)
from domain.reports.leaks import CachedHistory, Thresholds, consumers

BATCH = 2000


def review_read(history: StoredHistory, week_start: datetime, thresholds: Thresholds, **options: Any) -> dict[str, Any]:
    """``weekly_review``: the stored rendering when one stands for the snapshot, else computed with its
    claims read from the layer when it covers the snapshot (else on read)."""
    if not options:
        stored = stored_review(history, week_start, thresholds)
        if stored is not None:
            return stored
    source = stored_source(history)
    if source is None:
        return weekly_review(history, week_start, thresholds, **options)
    return weekly_review(history, week_start, thresholds, allocations=source, **options)


def stored_review(history: StoredHistory, week_start: datetime, thresholds: Thresholds) -> dict[str, Any] | None:
    """The rendered review of ``week_start`` when it may stand for the snapshot ``history`` is as of,
    and was rendered with these thresholds.

    A week that has ended as of the snapshot: its final rendering (as of a snapshot on or after
    the week's end, not after the asked one) by this DOMAIN_VERSION (the module docstring says why).
    The current week: rendered for that snapshot or one less than CLAIMLINE_REVIEW_REFRESH before
    it, and this code derived the snapshot. Changes since do not matter: a week's figures move
    little in minutes, and at thousands of nodes rendering one costs seconds of a worker, so it is
    rendered at most that often (its ``as_of`` says which snapshot it describes)."""
    row = (
        ReviewDocument.objects.filter(cluster_id=history.cluster.pk, week_start=week_start)
        .select_related("snapshot")
        .first()
    )
    if row is None or orjson.loads(row.thresholds) != thresholds.as_dict():
        return None
    if week_start + WEEK <= history.as_of:
        if not is_final(row) or row.version != DOMAIN_VERSION or row.snapshot.at > history.as_of:
            return None
    else:
        age = (history.as_of - row.snapshot.at).total_seconds()
        if not 0 <= age < settings.CLAIMLINE_REVIEW_REFRESH:
            return None
        if not covered(history.snapshot_pk):
            return None
    document: dict[str, Any] = orjson.loads(row.document)
    return document


def is_final(row: ReviewDocument) -> bool:
    """Whether the row was rendered as of a snapshot on or after its week's end."""
    return row.snapshot.at >= row.week_start + WEEK


def render_latest_review(snapshot: Snapshot, force: bool = False) -> bool:
    """Store the review of the week ``snapshot`` falls in, as of it, with the configured thresholds.

    False, rendering nothing, when a newer snapshot exists, the snapshot is not derived, or (unless
    ``force``) the stored review still stands for it (``stored_review``). The cluster's rows of
    other weeks that are not final are dropped: they describe a week before it ended, which no
    reader of a later snapshot is served (``derived.past_reviews`` renders the final ones first).
    """
    if not latest_derived(snapshot):
        return False
    thresholds = leak_thresholds()
    history = StoredHistory(snapshot.cluster, snapshot.at)
    week = week_containing(snapshot.at)
    if not force and stored_review(history, week, thresholds) is not None:
        return False
    source = stored_source(history)
    if source is None:
        return False
    try:
        store_review(snapshot, week, thresholds, weekly_review(history, week, thresholds, allocations=source))
    finally:
        history.release()
    return True


def store_review(snapshot: Snapshot, week: datetime, thresholds: Thresholds, document: dict[str, Any]) -> None:
    """Write the cluster's row of ``week`` (rendered as of ``snapshot``), dropping the non-final rows of
    the other weeks that ended before the snapshot's."""
    with transaction.atomic():
        ended = ReviewDocument.objects.filter(
            cluster_id=snapshot.cluster_id, week_start__lt=week_containing(snapshot.at)
        )
        ended.exclude(week_start=week).filter(snapshot__at__lt=F("week_start") + WEEK).delete()
        ReviewDocument.objects.update_or_create(
            cluster_id=snapshot.cluster_id,
            week_start=week,
            defaults={
                "snapshot": snapshot,
                "thresholds": orjson.dumps(thresholds.as_dict()).decode(),
                "document": orjson.dumps(document).decode(),
                "version": DOMAIN_VERSION,
            },
        )


def stored_source(history: StoredHistory, claims: bool = True) -> Allocations | None:
    """``capacity.Allocations`` read from the layer's spans, or None when it does not cover the snapshot.

    ``claims=False`` for a chart, which needs only the pieces: the claims' versions are read
    then only when the inventory holds devices in part (their fractions need them).
    """
    held_in_part = held_in_part_of(history.snapshot_pk)
    if held_in_part is None:
        return None
    return partial(stored_allocations, history.cluster.pk, held_in_part, with_claims=claims)


def stored_allocations(
    cluster_id: int,
    held_in_part: bool,
    history: CachedHistory,
    since: datetime,
    until: datetime,
    with_claims: bool = True,
) -> tuple[Mapping[str, Sequence[Version]], list[Piece]]:
    """``capacity.Allocations`` from the spans overlapping ``[since, until)`` as of ``history.as_of``
    (``with_claims=False``: the pieces alone, the claims' versions read only for their fractions)."""
    as_of = history.as_of
    rows = (
        AllocationSpan.objects.filter(cluster_id=cluster_id, seen__lte=as_of, start__lt=until)
        .filter(Q(end__isnull=True) | Q(end__gt=since))
        .order_by("claim_uid", "seen", "position")
        .values_list("claim_uid", "namespace", "driver", "pool", "device", "start", "end")
    )
    spans: list[tuple[str, str, tuple[str, str, str], datetime, datetime]] = []
    for uid, namespace, driver, pool, device, start, end in rows:
        # A span that ends after the asked time was still held then.
        end = as_of if end is None or end > as_of else end
        if end > start:
            spans.append((uid, namespace, (driver, pool, device), start, end))
    uids = list(dict.fromkeys(s[0] for s in spans))
    # Only the claims a leak condition held for can be flagged: only they are classified.
    suspects = leak_suspects(cluster_id, since, as_of) if with_claims else None
    classified = uids if suspects is None else [uid for uid in uids if uid in suspects]
    claims: dict[str, list[Version]] = {}
    if held_in_part:
        claims = _read_claims(cluster_id, history, uids, since, consumers_of=set(classified))
    elif with_claims:
        claims = _read_claims(cluster_id, history, classified, since)
    fractions: dict[str, dict[tuple[str, str, str], float]] = {}
    if held_in_part:
        inventory = Inventory.of(history.state)
        fractions = {uid: claim_device_fractions(versions, inventory) for uid, versions in claims.items()}
        if with_claims and suspects is not None:
            claims = {uid: claims[uid] for uid in classified if uid in claims}
    pieces = [
        Piece(uid, namespace, device, start, end, fraction=fractions.get(uid, {}).get(device, 1.0))
        for uid, namespace, device, start, end in spans
    ]
    return claims, pieces


def _read_claims(
    cluster_id: int, history: CachedHistory, uids: list[str], since: datetime, consumers_of: set[str] | None = None
) -> dict[str, list[Version]]:
    """The claims' versions (all of them given to ``history``; those after ``since`` returned), and the
    consumer and owner Pods' versions of those among ``consumers_of`` (default: all) given to
    ``history``: what classifying their leaks reads."""
    claims: dict[str, list[Version]] = {}
    pods: set[str] = set()
    for uid, rows in _versions(cluster_id, history.as_of, "ResourceClaim", uids).items():
        full = [version for version, _ in rows]
        history.remember("ResourceClaim", uid, full)
        claims[uid] = versions_since(rows, since)
        if consumers_of is None or uid in consumers_of:
            for version in full:
                pods.update(_pods_named(version.obj))
    found = _versions(cluster_id, history.as_of, "Pod", sorted(pods))
    for pod in pods:
        history.remember("Pod", pod, [version for version, _ in found.get(pod, [])])
    return claims


def leak_suspects(cluster_id: int, since: datetime, as_of: datetime) -> set[str] | None:
    """Every claim a leak condition held for at some change within ``[since, as_of]``, from the layer's
    leak candidates; None when the layer cannot tell.

    ``leaks.flagged_intervals`` judges a claim at its changes (and its consumers') and at ``since``
    alone, and flags no stretch where no condition holds, so the review classifies these claims
    alone: the others have no flagged interval. A row's claims were under a condition as of its
    derived snapshot or at a change of the batches that derivation covered
    (``derived.writer._write_leak_candidates``), and a condition holding at a change stays a
    candidate until the next change re-judges it. That covers the window when this code's latest
    full derivation up to ``as_of`` came at or before ``since``, or was the cluster's first snapshot
    (which judged every change stored before its time); before a full derivation, other code wrote
    the rows, or none was written.
    """
    full = (
        DerivedSnapshot.objects.filter(cluster_id=cluster_id, version=DOMAIN_VERSION, full=True, at__lte=as_of)
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )
    if full is None:
        return None
    if full > since and Snapshot.objects.usable().filter(cluster_id=cluster_id, at__lt=full).exists():
        return None
    rows = LeakCandidates.objects.filter(cluster_id=cluster_id, valid_from__lte=as_of).filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=since)
    )
    return {uid for uids in rows.values_list("claim_uids", flat=True) for uid in uids.split()}


def _pods_named(claim: Object | None) -> set[str]:
    if claim is None:
        return set()
    named = {str(ref["uid"]) for ref in consumers(claim) if ref.get("resource") == "pods" and ref.get("uid")}
    for owner in meta(claim).get("ownerReferences") or ():
        if isinstance(owner, dict) and owner.get("kind") == "Pod" and owner.get("uid"):
            named.add(str(owner["uid"]))
    return named


def _versions(
    cluster_id: int, as_of: datetime, kind: str, uids: list[str]
) -> dict[str, list[tuple[Version, datetime | None]]]:
    """Every version up to ``as_of`` of ``uids``, with when each stopped being valid."""
    out: dict[str, list[tuple[Version, datetime | None]]] = {}
    rows = ObjectVersion.objects.filter(cluster_id=cluster_id, kind=kind, valid_from__lte=as_of)
    for i in range(0, len(uids), BATCH):
        chosen = rows.filter(uid__in=uids[i : i + BATCH]).order_by("uid", "valid_from")
        # Fetched whole, without a server-side cursor's round trips: the claims of the review's weeks.
        for uid, at, valid_to, deleted, content, checked in chosen.values_list(
            "uid", "valid_from", "valid_to", "deleted", "content", "shapes_checked"
        ):
            versions = out.setdefault(uid, [])
            obj = None if deleted else readable(kind, uid, at, content, checked)
            if deleted or obj is not None:
                versions.append((Version(at, obj), valid_to))
            elif versions:
                # Unreadable: read as if never stored, the version before it lasts until the next one.
                versions[-1] = (versions[-1][0], valid_to)
    return out
