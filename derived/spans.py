"""Writing allocation spans: each claim's runs of held devices (``capacity.allocation_runs``) as rows.

A run depends only on the claim's versions up to the version that showed it, and its end on
the version that dropped it, so a snapshot only needs the claims it changed: their runs are
computed again from all their versions and the rows brought in line (a run's row is keyed by
``seen`` and the device's position). Recomputing instead of appending makes deriving a
snapshot twice, or after a rebuild reopened spans, write the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from django.db import connections

from collector.history_reader import readable
from collector.models import ObjectVersion, Snapshot
from derived.models import AllocationSpan
from derived.pending import PendingChanges, pending_for
from domain.cluster.state import ClusterState, Object, Version, ns_name
from domain.inventory.devices import advertised_devices
from domain.inventory.equivalents import held_in_part
from domain.reports.capacity import allocation_runs, claim_namespace
from domain.verdicts.estimates import claim_kin, owner_pod_uid

BATCH = 2000
# The end of a run still held: stored as NULL, read as the asked time.
_OPEN = datetime.max.replace(tzinfo=UTC)


def claim_versions(cluster_id: int, uids: Iterable[str] | None, until: datetime) -> Iterable[tuple[str, list[Version]]]:
    """Every version up to ``until`` of the claims ``uids`` (every claim when None), one claim at a time."""
    rows = ObjectVersion.objects.filter(cluster_id=cluster_id, kind="ResourceClaim", valid_from__lte=until)
    batches: list[list[str] | None] = [None]
    if uids is not None:
        ordered = sorted(uids)
        batches = [ordered[i : i + BATCH] for i in range(0, len(ordered), BATCH)]
    for batch in batches:
        chosen = rows if batch is None else rows.filter(uid__in=batch)
        current: tuple[str, list[Version]] | None = None
        for uid, at, deleted, content, checked in (
            chosen.order_by("uid", "valid_from")
            .values_list("uid", "valid_from", "deleted", "content", "shapes_checked")
            .iterator(BATCH)
        ):
            if current is None or current[0] != uid:
                if current is not None:
                    yield current
                current = (uid, [])
            obj = None if deleted else readable("ResourceClaim", uid, at, content, checked)
            if deleted or obj is not None:  # an unreadable version is left out
                current[1].append(Version(at, obj))
        if current is not None:
            yield current


def write_spans(
    snapshot: Snapshot,
    full: bool,
    observe: Callable[[str, list[Version]], None] | None = None,
    changes: PendingChanges | None = None,
) -> int:
    """Bring the spans of the claims the derivation of ``snapshot`` covers changes of (``changes``: its own
    without; every claim when ``full``) in line; rows changed. A run that began and ended between two
    derivations is found all the same: every version of the claim is read.

    ``observe(uid, versions)`` sees each claim read: what else is derived from a claim's versions
    (``derived.device_rows.AdminAccessRows``) reads them once with the spans."""
    cluster_id = snapshot.cluster_id
    uids: set[str] | None = None
    changes = changes or pending_for(snapshot)
    if not full and not changes.changed:
        return 0  # most snapshots: nothing changed, no query
    if not full:
        uids = set(changes.versions(kind="ResourceClaim").values_list("uid", flat=True))
        if not uids:
            return 0
    stored: dict[str, dict[tuple[datetime, int], tuple[int, datetime | None, str, str]]] = {}
    spans = AllocationSpan.objects.filter(cluster_id=cluster_id)
    if uids is not None:
        spans = spans.filter(claim_uid__in=sorted(uids))
    read = spans.values_list("pk", "claim_uid", "seen", "position", "end", "workload", "template")
    for pk, uid, seen, position, end, workload, template in read.iterator(BATCH):
        stored.setdefault(uid, {})[(seen, position)] = (pk, end, workload, template)
    new: list[AllocationSpan] = []
    ends: dict[datetime | None, list[int]] = {}
    kept: list[tuple[int, str, str, str]] = []  # (row, claim, workload, template) of rows kept
    holding: dict[str, Object] = {}  # claims with runs: their newest object, for their kin
    gone: list[int] = []
    for uid, versions in claim_versions(cluster_id, uids, snapshot.at):
        if observe is not None:
            observe(uid, versions)
        mine = stored.pop(uid, {})
        namespace = claim_namespace(versions)
        last = next((v.obj for v in reversed(versions) if v.obj is not None), None)
        name = ns_name(last)[1] if last is not None else ""
        for start, end, devices, seen in allocation_runs(versions, _OPEN):
            stored_end = None if end == _OPEN else end
            if last is not None:
                holding[uid] = last
            for position, (driver, pool, device) in enumerate(devices):
                row = mine.pop((seen, position), None)
                if row is None:
                    new.append(
                        AllocationSpan(
                            cluster_id=cluster_id,
                            claim_uid=uid,
                            namespace=namespace,
                            name=name,
                            driver=driver,
                            pool=pool,
                            device=device,
                            position=position,
                            start=start,
                            end=stored_end,
                            seen=seen,
                        )
                    )
                    continue
                if row[1] != stored_end:
                    ends.setdefault(stored_end, []).append(row[0])
                kept.append((row[0], uid, row[2], row[3]))
        gone.extend(pk for pk, *_rest in mine.values())  # runs the versions no longer show
    for leftover in stored.values():
        gone.extend(pk for pk, *_rest in leftover.values())  # claims with no version up to the snapshot
    kins = claim_kins(cluster_id, holding, snapshot.at)
    for span in new:
        span.workload, span.template = kins.get(span.claim_uid, ("", ""))
    # A claim's kin changes only if its Pod was stored after it: the rows kept are brought in line.
    rekin: dict[tuple[str, str], list[int]] = {}
    for pk, uid, workload, template in kept:
        kin = kins.get(uid, ("", ""))
        if kin != (workload, template):
            rekin.setdefault(kin, []).append(pk)
    for (workload, template), pks in rekin.items():
        for i in range(0, len(pks), BATCH):
            AllocationSpan.objects.filter(pk__in=pks[i : i + BATCH]).update(workload=workload, template=template)
    for end, pks in ends.items():
        for i in range(0, len(pks), BATCH):
            AllocationSpan.objects.filter(pk__in=pks[i : i + BATCH]).update(end=end)
    for i in range(0, len(gone), BATCH):
        AllocationSpan.objects.filter(pk__in=gone[i : i + BATCH]).delete()
    AllocationSpan.objects.bulk_create(new, batch_size=BATCH)
    return len(new) + sum(len(pks) for pks in ends.values()) + len(gone) + sum(len(pks) for pks in rekin.values())


def claim_kins(cluster_id: int, claims: Mapping[str, Object], at: datetime) -> dict[str, tuple[str, str]]:
    """``(workload, template)`` of each claim (``estimates.claim_kin``), its Pod read as last stored by
    ``at``: one query for the Pods of every claim, not a read of each."""
    wanted = {pod_uid for claim in claims.values() if (pod_uid := owner_pod_uid(claim))}
    pods: dict[str, Object] = {}
    ordered = sorted(wanted)
    for i in range(0, len(ordered), BATCH):
        rows = ObjectVersion.objects.filter(
            cluster_id=cluster_id, kind="Pod", uid__in=ordered[i : i + BATCH], valid_from__lte=at, deleted=False
        ).order_by("uid", "-valid_from")
        if connections[rows.db].vendor == "postgresql":
            rows = rows.distinct("uid")  # each Pod's newest version alone (DISTINCT ON: PostgreSQL's)
        newest = set()
        for uid, valid_from, content, checked in rows.values_list("uid", "valid_from", "content", "shapes_checked"):
            if uid in newest:
                continue  # an older version (SQLite, the embedded default, reads them all)
            newest.add(uid)
            pod = readable("Pod", uid, valid_from, content, checked)
            if pod is not None:
                pods[uid] = pod
    out = {}
    for uid, claim in claims.items():
        kin = claim_kin(claim, pods)
        out[uid] = (kin.workload or "", kin.template or "")
    return out


def inventory_held_in_part(state: ClusterState) -> bool:
    return any(held_in_part(d) for d in advertised_devices(state))


def forget_spans_from(cluster_id: int, at: datetime) -> None:
    """Spans as they were before ``at``: later runs dropped, runs ended since then open again."""
    AllocationSpan.objects.filter(cluster_id=cluster_id, seen__gte=at).delete()
    AllocationSpan.objects.filter(cluster_id=cluster_id, end__gte=at).update(end=None)
