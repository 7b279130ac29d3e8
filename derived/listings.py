"""Writing claim listings: what the claims list shows of each claim version, as rows.

A listing depends on one claim version alone, so a snapshot writes the listings of the claim
versions it stored (and ends those of the claims it deleted); a full derivation lists every live
claim afresh. Written like the other versioned rows: the open row of a claim ends where its next
version begins.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import orjson

from collector.history_reader import readable
from collector.models import Snapshot
from derived.models import ClaimListing
from derived.pending import PendingChanges, pending_for
from domain.cluster.claim_summaries import ClaimSummary, summarize_claim
from domain.cluster.state import ClusterState, Object

BATCH = 2000


def write_claim_listings(
    snapshot: Snapshot, full: bool, state: ClusterState, changes: PendingChanges | None = None
) -> int:
    """The listings of the claims the derivation of ``snapshot`` covers changes of (``changes``: its own
    without; every live claim when ``full``); rows written."""
    at, cluster_id = snapshot.at, snapshot.cluster_id
    rows = ClaimListing.objects.filter(cluster_id=cluster_id)
    if full:
        rows.filter(valid_from=at).delete()  # written for this snapshot by other code
        rows.filter(valid_to__isnull=True).update(valid_to=at)
        claims: Iterable[Object] = state.objects.get("ResourceClaim", {}).values()
    else:
        changes = changes or pending_for(snapshot)
        if not changes.changed:
            return 0
        # Oldest first: a claim changed by several batches is listed as the newest left it.
        changed = changes.versions(kind="ResourceClaim").order_by("valid_from", "pk")
        newest: dict[str, Object | None] = {}
        for uid, deleted, content, checked in changed.values_list("uid", "deleted", "content", "shapes_checked"):
            claim = None if deleted else readable("ResourceClaim", uid, at, content, checked)
            # An unreadable version is read as if never stored: the claim's row before it stands.
            if deleted or claim is not None:
                newest[uid] = claim
        if not newest:
            return 0
        versions = list(newest.items())
        uids = [uid for uid, _claim in versions]
        for start in range(0, len(uids), BATCH):
            mine = rows.filter(claim_uid__in=uids[start : start + BATCH])
            mine.filter(valid_from=at).delete()
            mine.filter(valid_to__isnull=True).update(valid_to=at)
        claims = (claim for _uid, claim in versions if claim is not None)
    new = [_row(cluster_id, summarize_claim(claim), snapshot) for claim in claims]
    ClaimListing.objects.bulk_create(new, batch_size=BATCH)
    return len(new)


def _row(cluster_id: int, summary: ClaimSummary, snapshot: Snapshot) -> ClaimListing:
    return ClaimListing(
        cluster_id=cluster_id,
        claim_uid=summary.uid,
        namespace=summary.namespace,
        name=summary.name,
        state=summary.state,
        devices=orjson.dumps(summary.devices).decode(),
        node=summary.node,
        created=summary.created,
        consumers=orjson.dumps(summary.consumers).decode(),
        # As JsonResponse encodes it (json.dumps' separators, ASCII): /api/claims joins these as they are.
        entry=json.dumps(summary.entry()),
        valid_from=snapshot.at,
    )


def summary_of(row: ClaimListing) -> ClaimSummary:
    """The row as ``claims.summarize_claim`` made it."""
    return ClaimSummary(
        uid=row.claim_uid,
        namespace=row.namespace,
        name=row.name,
        state=row.state,
        devices=tuple(orjson.loads(row.devices)),
        node=row.node,
        created=row.created,
        consumers=tuple(orjson.loads(row.consumers)),
    )
