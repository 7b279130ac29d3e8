"""The overview: what a platform owner checks first about a cluster, as of one snapshot.

Every number comes from the domain's own reports (inventory, the verdicts, the
leak report, the audit, the capacity series); this module only counts and
groups them. What a team member sees is cut by the caller's ``Redactor``:
inventory numbers stay cluster-wide (devices are everyone's concern), Pods,
flagged claims and namespaced warnings only those of the member's namespaces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from domain.boundaries.judgement import BOUNDARIES, is_terminal
from domain.cluster.pod_claims import pods_with_claims
from domain.cluster.state import HistoryView, ns_name, uid_of
from domain.cluster.timefmt import rfc3339
from domain.inventory.devices import Inventory
from domain.inventory.equivalents import equivalents_by_model, number
from domain.reports.audit import audit
from domain.reports.capacity import AdvertisedSource, Allocations, StepsSource, allocation_series
from domain.reports.leaks import REASONS, Thresholds, find_leaks
from domain.reports.redaction import Redactor
from domain.verdicts.explain import verdict_reader

# How far back the allocation chart reaches.
CHART_SPAN = timedelta(hours=24)
# Flagged claims named on the overview; the retained page lists them all.
TOP_FLAGGED = 5
COUNTS = ("advertised", "allocated", "free")


def devices_by_model(inventory: Inventory) -> dict[str, Any]:
    """Physical devices by driver and model, with how many GPU-equivalents allocations hold.

    A partitioned GPU counts once however many partitions it advertises, and what its
    partitions (or a shared device's shares) hold counts as the fraction they hold.
    """
    models = [
        {
            "driver": row.driver,
            "model": row.model,
            "advertised": row.advertised,
            "allocated": number(row.allocated),
            "free": number(row.advertised - row.allocated),
            "gpu_equivalents": row.shared,
        }
        for row in equivalents_by_model(inventory)
    ]
    return _with_totals(models)


def _with_totals(models: list[dict[str, Any]]) -> dict[str, Any]:
    totals = {k: number(sum(m[k] for m in models)) for k in COUNTS}
    return {"models": models, **totals, "equivalents": [m["model"] for m in models if m.get("gpu_equivalents")]}


# A Pod that waits as the overview lists it: namespace, name, Pod UID, and its verdict.
WaitingPod = tuple[str, str, str, Mapping[str, Any]]


def waiting_pods(
    history: HistoryView, redactor: Redactor, stored: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """Live, unfinished DRA Pods whose verdict is not ``ok``, grouped by the verdict's reason
    (``stored``: see ``verdicts.verdict_reader``)."""
    verdict_of = verdict_reader(history, stored)
    entries: list[WaitingPod] = []
    for pod in pods_with_claims(history.state):
        namespace, name = ns_name(pod)
        if is_terminal(pod) or not redactor.scope.sees(namespace):
            continue  # not judged at all: on read, a verdict is the expensive part
        entries.append((namespace, name, uid_of(pod), verdict_of(pod)))
    return group_waiting(entries, redactor)


def group_waiting(entries: Iterable[WaitingPod], redactor: Redactor) -> dict[str, Any]:
    """``waiting_pods`` of Pods already judged (in namespace and name order): those ``redactor``'s
    user may see whose verdict is not ``ok``, grouped by boundary and reason."""
    groups: dict[tuple[str | None, str], list[dict[str, Any]]] = {}
    for namespace, name, uid, verdict in entries:
        if verdict["boundary"] is None or not redactor.scope.sees(namespace):  # ok, or not theirs
            continue
        groups.setdefault((verdict["boundary"], verdict["reason"]), []).append(
            {"namespace": namespace, "name": name, "uid": uid, "message": redactor.text(verdict["message"])}
        )
    order = {b: i for i, b in enumerate(BOUNDARIES)}
    by_reason = [
        {"boundary": boundary, "reason": reason, "count": len(pods), "pods": pods}
        for (boundary, reason), pods in sorted(groups.items(), key=lambda g: (order.get(g[0][0] or "", 9), g[0][1]))
    ]
    return {"total": sum(g["count"] for g in by_reason), "by_reason": by_reason}


def flagged_summary(leaks: dict[str, Any]) -> dict[str, Any]:
    """Flagged claims (an already scoped leaks document) by reason: held and leaked device-hours."""
    claims = leaks["claims"]
    by_reason = []
    for reason in REASONS:
        mine = [c for c in claims if c["reason"] == reason]
        if mine:
            by_reason.append(
                {
                    "reason": reason,
                    "claims": len(mine),
                    "devices": sum(len(c["devices"]) for c in mine),
                    "device_hours": _total(c["device_hours"] for c in mine),
                    "leaked_device_hours": _total(c["leaked_device_hours"] for c in mine),
                }
            )
    return {
        "claims": len(claims),
        "devices": sum(len(c["devices"]) for c in claims),
        "device_hours": _total(c["device_hours"] for c in claims),
        "leaked_device_hours": _total(c["leaked_device_hours"] for c in claims),
        "by_reason": by_reason,
        "top": claims[:TOP_FLAGGED],
    }


def warnings_by_kind(audit_doc: dict[str, Any]) -> dict[str, Any]:
    return warning_counts(Counter(str(w["kind"]) for w in audit_doc["warnings"]))


def warning_counts(kinds: Counter[str]) -> dict[str, Any]:
    """The overview's warnings: how many of each kind (already scoped), and in all."""
    return {"total": sum(kinds.values()), "by_kind": [{"kind": k, "count": n} for k, n in sorted(kinds.items()) if n]}


def _total(values: Iterable[float]) -> float:
    return round(sum(values), 2)


def overview(
    history: HistoryView,
    redactor: Redactor,
    thresholds: Thresholds | None = None,
    *,
    leaks: dict[str, Any] | None = None,
    audit_doc: dict[str, Any] | None = None,
    waiting_verdicts: Mapping[str, Mapping[str, Any]] | None = None,
    allocations: Allocations | None = None,
    devices: dict[str, Any] | None = None,
    waiting: Iterable[WaitingPod] | None = None,
    advertised: AdvertisedSource | None = None,
    steps: StepsSource | None = None,
) -> dict[str, Any]:
    """The overview of one cluster as of ``history.as_of``, as ``redactor``'s user may see it.

    ``leaks`` and ``audit_doc`` are the cluster's unscoped reports when the caller has them already;
    ``devices`` its ``devices_by_model``; ``waiting`` its waiting Pods already judged (see
    ``group_waiting``), else ``waiting_verdicts`` their stored verdicts (see ``waiting_pods``);
    ``allocations`` where the chart's allocations come from (``capacity.Allocations``; from
    history by default), or ``steps`` the devices they held over time (``capacity.StepsSource``; counted
    from those allocations by default); ``advertised`` the devices advertised over time
    (``capacity.AdvertisedSource``; counted from the slices by default). Given all of them, no Pod,
    claim or slice of the state is read here.
    """
    leaks = leaks if leaks is not None else find_leaks(history, thresholds)
    audit_doc = audit_doc if audit_doc is not None else audit(history)
    return {
        "as_of": rfc3339(history.as_of),
        "inventory": devices if devices is not None else devices_by_model(Inventory.of(history.state)),
        "pods": (
            group_waiting(waiting, redactor)
            if waiting is not None
            else waiting_pods(history, redactor, waiting_verdicts)
        ),
        "flagged": flagged_summary(redactor.leaks(leaks)),
        "warnings": warnings_by_kind(redactor.audit(audit_doc)),
        "series": allocation_series(history, history.as_of - CHART_SPAN, allocations, advertised, steps),
        "series_since": rfc3339(history.as_of - CHART_SPAN),
    }


def across_clusters(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Several clusters' overviews added up: devices by driver and model, Pods, flagged claims, warnings."""
    docs = list(docs)
    by_model: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in docs:
        for m in doc["inventory"]["models"]:
            row = by_model.setdefault(
                (m["driver"], m["model"]),
                {"driver": m["driver"], "model": m["model"], **dict.fromkeys(COUNTS, 0), "gpu_equivalents": False},
            )
            for k in COUNTS:
                row[k] = number(row[k] + m[k])
            row["gpu_equivalents"] = row["gpu_equivalents"] or m.get("gpu_equivalents", False)
    return {
        "inventory": _with_totals([by_model[k] for k in sorted(by_model)]),
        "pods": sum(d["pods"]["total"] for d in docs),
        "flagged": sum(d["flagged"]["claims"] for d in docs),
        "device_hours": _total(d["flagged"]["device_hours"] for d in docs),
        "leaked_device_hours": _total(d["flagged"]["leaked_device_hours"] for d in docs),
        "warnings": sum(d["warnings"]["total"] for d in docs),
    }
