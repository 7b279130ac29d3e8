"""Renderings stored after a derivation for the newest snapshot: /metrics, and when one stands for a later snapshot.

Both read the whole cluster (every device, every claim's leak state), so they are rendered once
per snapshot that changed something rather than by every reader of a new snapshot. After a
snapshot that changed nothing, the one rendered before may stand for it until it is a refresh
interval old: what moves with time alone (ages, held hours) moves slowly, and the rendering
says which snapshot it describes.
"""

from __future__ import annotations

from datetime import datetime

import orjson
from django.conf import settings
from django.db.models import Q

from collector.history_reader import StoredHistory
from collector.models import Snapshot
from derived.models import DerivedSnapshot, MetricsText
from derived.reports import known_for
from derived.thresholds import leak_thresholds
from derived.writer import covered
from domain.reports.metrics import render_stored


def latest_derived(snapshot: Snapshot) -> bool:
    """Whether ``snapshot`` is derived by this code and no usable snapshot follows it (a rendering
    for it would be replaced at once by the newer one's)."""
    newer = Snapshot.objects.usable().filter(cluster_id=snapshot.cluster_id, at__gt=snapshot.at)
    return not newer.exists() and covered(snapshot.pk)


def stands_for(cluster_id: int, rendered_at: datetime, at: datetime, refresh: float) -> bool:
    """Whether a rendering of the snapshot at ``rendered_at`` may stand for the one at ``at``: the same
    snapshot, or an earlier one less than ``refresh`` seconds before it with no change to objects or
    to derived rows since (every snapshot between derived, none writing a row)."""
    if rendered_at > at:
        return False
    if rendered_at == at:
        return True
    if (at - rendered_at).total_seconds() >= refresh:
        return False
    between = Snapshot.objects.usable().filter(cluster_id=cluster_id, at__gt=rendered_at, at__lte=at)
    if between.filter(Q(versions_written__gt=0) | Q(deletions__gt=0)).exists():
        return False
    derived = DerivedSnapshot.objects.filter(cluster_id=cluster_id, at__gt=rendered_at, at__lte=at)
    return not derived.filter(rows_written__gt=0).exists() and derived.count() == between.count()


def render_latest_metrics(snapshot: Snapshot, force: bool = False) -> bool:
    """Store the cluster's /metrics as of ``snapshot``, Pods' counts read from its derived rows;
    the snapshot's time and age and the run-health families are added when it is served
    (``domain.reports.metrics.Served``: a later snapshot it stands for, failed runs after it).

    False, rendering nothing, when a newer snapshot exists (its own rendering follows), the
    snapshot is not derived, or (unless ``force``) the stored text still stands for it: nothing
    changed since the snapshot it describes, which is younger than CLAIMLINE_METRICS_REFRESH.
    """
    if not latest_derived(snapshot):
        return False
    thresholds = leak_thresholds()
    if not force and metrics_text_stands(snapshot.cluster_id, snapshot.at, thresholds.as_dict()) is not None:
        return False
    history = StoredHistory(snapshot.cluster, snapshot.at)
    try:
        text = render_stored(history, thresholds, known_for(history, thresholds), settings.CLAIMLINE_METRICS_NAMESPACES)
    finally:
        history.release()
    MetricsText.objects.update_or_create(
        cluster_id=snapshot.cluster_id,
        defaults={"snapshot": snapshot, "thresholds": orjson.dumps(thresholds.as_dict()).decode(), "text": text},
    )
    return True


def metrics_text_stands(cluster_id: int, at: datetime, thresholds: dict[str, float]) -> MetricsText | None:
    """The stored /metrics text when it may stand for the snapshot at ``at`` (``stands_for``) and was
    rendered with these thresholds."""
    text = MetricsText.objects.filter(cluster_id=cluster_id).select_related("snapshot").first()
    if text is None or orjson.loads(text.thresholds) != thresholds:
        return None
    if not stands_for(cluster_id, text.snapshot.at, at, settings.CLAIMLINE_METRICS_REFRESH):
        return None
    return text
