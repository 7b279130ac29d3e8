"""The derived layer's judge: what it serves equals what the domain derives on read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson
from django.conf import settings

from collector.models import Cluster, ObjectVersion, Snapshot
from dashboard.domain.audit import audit
from dashboard.domain.metrics import render_metrics
from dashboard.domain.verdicts import explain
from dashboard.history import StoredHistory
from dashboard.reading import leak_thresholds
from derived.reading import audit_read, covers, metrics_read, stored_explain
from derived.writer import metrics_text_stands


def _json(doc: Any) -> Any:
    return orjson.loads(orjson.dumps(doc))


def assert_layer_matches_derivation(cluster_name: str, metrics: bool = True, since: datetime | None = None) -> int:
    """Every Pod incarnation at every snapshot (from ``since``): the stored explain document equals
    explain's; the audit and /metrics too. Returns how many documents were compared."""
    cluster = Cluster.objects.get(name=cluster_name)
    pods = sorted(
        set(ObjectVersion.objects.filter(cluster=cluster, kind="Pod").values_list("namespace", "name", "uid"))
    )
    compared = 0
    runs = Snapshot.objects.filter(cluster=cluster, status="ok").order_by("at")
    if since is not None:
        runs = runs.filter(at__gte=since)
    for at in runs.values_list("at", flat=True):
        history = StoredHistory(cluster, at)
        assert covers(history), f"snapshot at {at} is not derived"
        for namespace, name, uid in pods:
            if uid not in history.uids_named("Pod", namespace, name):
                continue
            stored = stored_explain(history, namespace, name, uid)
            assert stored is not None, (at, namespace, name, uid)
            derived = explain(StoredHistory(cluster, at), namespace, name, pod_uid=uid)
            assert _json(stored) == _json(derived), (at, namespace, name, uid)
            compared += 1
        assert audit_read(history) == audit(StoredHistory(cluster, at)), at
        if metrics:
            thresholds = leak_thresholds()
            # After an unchanged snapshot the text of an earlier one may stand (CLAIMLINE_METRICS_REFRESH).
            standing = metrics_text_stands(cluster.pk, at, thresholds.as_dict())
            described = standing.snapshot.at if standing is not None else at
            assert at - described < timedelta(seconds=settings.CLAIMLINE_METRICS_REFRESH) or described == at
            assert metrics_read(history, thresholds) == render_metrics(
                StoredHistory(cluster, described), thresholds
            ), at
    return compared
