"""The cluster-wide reports read from the derived layer: the leak report from the stored leak
candidates, the audit from its stored warnings, the Pods' counts /metrics needs; each computed on
read when the layer does not cover the asked snapshot. Pages, the API and the /metrics rendering
share them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from django.db.models import Q

from collector.history_reader import StoredHistory, live_containing
from derived.models import AuditReport, ClusterWideRow, LeakCandidates, PodExplanation
from derived.writer import BATCH, covered, held_in_part_of
from domain.cluster.state import ClusterState, Object, uid_of
from domain.cluster.timefmt import rfc3339
from domain.inventory.devices import Inventory
from domain.reports.audit import audit
from domain.reports.leaks import Thresholds, find_leaks
from domain.reports.metrics import Known, PodCounts


def valid_rows(history: StoredHistory, model: Any) -> Any:
    """The rows of ``model`` valid at the history's snapshot."""
    as_of = history.as_of
    return model.objects.filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=as_of), cluster=history.cluster, valid_from__lte=as_of
    )


def cluster_wide(history: StoredHistory, model: type[ClusterWideRow], field: str) -> Any:
    """``field`` of the cluster-wide row valid at the history's snapshot; None when there is none."""
    return valid_rows(history, model).order_by("-valid_from").values_list(field, flat=True).first()


def leaks_read(history: StoredHistory, thresholds: Thresholds) -> dict[str, Any]:
    """The unscoped leak report of the snapshot, once per loaded snapshot: only the stored leak
    candidates' histories are read when the layer covers it, every claim's otherwise."""

    def compute() -> dict[str, Any]:
        stored = _leak_candidates(history) if covered(history.snapshot_pk) else None
        if stored is None:
            history.preload("ResourceClaim", "Pod")  # every claim and its consumers: one query each
            return find_leaks(history, thresholds)
        uids, whole = stored
        # Without a partitioned or shared device every allocation counts whole: no inventory to build.
        return find_leaks(history, thresholds, candidates=uids, inventory=_EMPTY if whole else None)

    return history.derived(("leaks", thresholds), compute)


def _leak_candidates(history: StoredHistory) -> tuple[list[str], bool] | None:
    row = cluster_wide(history, LeakCandidates, "claim_uids")
    if row is None:
        return None
    return row.split(), not held_in_part_of(history.snapshot_pk)


_EMPTY = Inventory(ClusterState(datetime.min.replace(tzinfo=UTC), {}), [], [], {})


def audit_read(history: StoredHistory) -> dict[str, Any]:
    """The audit document: the stored warnings valid at the snapshot, else the audit run now."""
    if covered(history.snapshot_pk):
        row = cluster_wide(history, AuditReport, "warnings")
        if row is not None:
            return {"as_of": rfc3339(history.as_of), "warnings": orjson.loads(row)}
    return history.derived("audit", lambda: audit(history))


# Every reason /metrics counts as a preparation failure has it in its name (tests/test_metrics.py).
PREPARE_FAILURE_MARK = "FailedPrepare"


def known_for(history: StoredHistory, thresholds: Thresholds) -> Known:
    """What /metrics reads of a snapshot the layer covers instead of the whole state: the Pods'
    stored counts, the stored leak report and audit, and only the live Events that may be
    preparation failures. Nothing when it does not cover it (every family is computed then)."""
    if not covered(history.snapshot_pk):
        return Known()
    # What /metrics counts of every live, unfinished Pod, by Pod UID.
    rows = valid_rows(history, PodExplanation).filter(counted=True).values_list("pod_uid", "states")
    counts: dict[str, PodCounts] = {pod: orjson.loads(states) for pod, states in rows.iterator(BATCH)}

    def counts_of(pod: Object) -> PodCounts | None:
        return counts.get(uid_of(pod))

    return Known(
        counts_of=counts_of,
        leaks=leaks_read(history, thresholds),
        audit=audit_read(history),
        preparation_events=live_containing(history.cluster, history.as_of, "Event", PREPARE_FAILURE_MARK),
    )
