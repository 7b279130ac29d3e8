"""The cluster-wide reports read from the derived layer: the leak report from the stored leak
candidates, the audit from its stored warnings, the Pods' counts /metrics needs; each computed on
read when the layer does not cover the asked snapshot. Pages, the API and the /metrics rendering
share them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from django.db import connection
from django.db.models import F, Q
from django.db.models.functions import Collate

from collector.history_reader import StoredHistory, live_containing
from derived.leak_flags import NO_INVENTORY, entry_at
from derived.models import AuditReport, ClusterWideRow, LeakCandidates, LeakFlag, PodExplanation
from derived.writer import BATCH, covered, held_in_part_of
from domain.cluster.state import Object, uid_of
from domain.cluster.timefmt import rfc3339
from domain.reports.audit import audit
from domain.reports.leaks import Thresholds, find_leaks
from domain.reports.metrics import Known, PodCounts


def valid_rows(history: StoredHistory, model: Any) -> Any:
    """The rows of ``model`` valid at the history's snapshot."""
    as_of = history.as_of
    return model.objects.filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=as_of), cluster=history.cluster, valid_from__lte=as_of
    )


def by_code_point(field: str) -> Any:
    """``field`` ordered and compared by code point, as Python sorts strings: PostgreSQL orders text by
    the database's collation (en_US ignores hyphens), SQLite by code point already."""
    return Collate(F(field), "C") if connection.vendor == "postgresql" else F(field)


def after_key(rows: Any, fields: Sequence[str], key: Sequence[str]) -> Any:
    """``rows`` whose key (``fields``, compared by code point) comes after ``key``: where a keyset page
    starts, whatever page it is."""
    named = {f"key_{field}": by_code_point(field) for field in fields}
    names = list(named)
    later = Q()
    for i, name in enumerate(names):
        later |= Q(**{names[j]: key[j] for j in range(i)}, **{f"{name}__gt": key[i]})
    return rows.alias(**named).filter(later)


def covers(history: StoredHistory) -> bool:
    """Whether this code derived the history's snapshot. Once it has, that stands for the loaded snapshot
    (asked again until then: a derivation queued behind the collection may land meanwhile)."""
    known: dict[str, bool] = history.derived("covered", dict)
    if not known.get("covered"):
        known["covered"] = covered(history.snapshot_pk)
    return known["covered"]


def cluster_wide(history: StoredHistory, model: type[ClusterWideRow], field: str) -> Any:
    """``field`` of the cluster-wide row valid at the history's snapshot; None when there is none."""
    return valid_rows(history, model).order_by("-valid_from").values_list(field, flat=True).first()


def leaks_read(history: StoredHistory, thresholds: Thresholds) -> dict[str, Any]:
    """The unscoped leak report of the snapshot, once per loaded snapshot: only the stored leak
    candidates' histories are read when the layer covers it, every claim's otherwise."""

    def compute() -> dict[str, Any]:
        stored = _leak_candidates(history) if covers(history) else None
        if stored is None:
            history.preload("ResourceClaim", "Pod")  # every claim and its consumers: one query each
            return find_leaks(history, thresholds)
        uids, whole = stored
        # Without a partitioned or shared device every allocation counts whole: no inventory to build.
        return find_leaks(history, thresholds, candidates=uids, inventory=NO_INVENTORY if whole else None)

    return history.derived(("leaks", thresholds), compute)


def leak_flags_read(history: StoredHistory, thresholds: Thresholds, claim_uids: Iterable[str]) -> list[dict[str, Any]]:
    """The leak report's entries of ``claim_uids`` (those flagged), without their message: when the layer
    covers the snapshot, its stored flags of those claims (one query, whatever the report holds), their
    hours counted as of the snapshot; else the report's entries."""
    wanted = sorted(set(claim_uids))
    if not wanted:
        return []
    if covers(history):
        rows = valid_rows(history, LeakFlag).filter(claim_uid__in=wanted).order_by("claim_uid")
        return [entry_at(orjson.loads(entry), history.as_of) for entry in rows.values_list("entry", flat=True)]
    return [e for e in leaks_read(history, thresholds)["claims"] if e["uid"] in wanted]


def _leak_candidates(history: StoredHistory) -> tuple[list[str], bool] | None:
    row = cluster_wide(history, LeakCandidates, "claim_uids")
    if row is None:
        return None
    return row.split(), not held_in_part_of(history.snapshot_pk)


def audit_read(history: StoredHistory) -> dict[str, Any]:
    """The audit document: the stored warnings valid at the snapshot, else the audit run now."""
    if covers(history):
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
    if not covers(history):
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
