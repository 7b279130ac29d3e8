"""Celery task: /metrics rendered after a collection, apart from it (it can take longer than one)."""

from __future__ import annotations

from celery import shared_task

from collector.models import Snapshot
from derived.writer import render_latest_metrics


@shared_task(name="derived.tasks.render_metrics", ignore_result=True)
def render_metrics(snapshot_id: int) -> str:
    snapshot = Snapshot.objects.filter(pk=snapshot_id).first()
    if snapshot is None:
        return "gone"
    return "rendered" if render_latest_metrics(snapshot) else "skipped"
