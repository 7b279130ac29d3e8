"""The Celery app: beat runs one collection per configured cluster every interval."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("claimline")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["collector"])


def beat_schedule(clusters: list, interval: int) -> dict[str, dict]:
    """One entry per cluster; each expires before the next is due, so a backlog never piles up."""
    return {
        f"collect-{source.name}": {
            "task": "collector.tasks.collect_cluster",
            "schedule": float(interval),
            "args": (source.name,),
            "options": {"expires": max(interval * 0.9, 1.0)},
        }
        for source in clusters
    }


@app.on_after_configure.connect
def _schedule_collections(sender: Celery, **_kwargs: object) -> None:
    from django.conf import settings

    sender.conf.beat_schedule = beat_schedule(settings.CLAIMLINE_CLUSTERS, settings.CLAIMLINE_COLLECT_INTERVAL)
