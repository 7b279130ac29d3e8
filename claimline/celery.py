"""The Celery app: beat runs one collection per configured cluster every interval, and a daily prune."""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claimline.settings")

app = Celery("claimline")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Every installed app's tasks module (claimline.tasks holds the pipeline's), as Celery's Django guide does.
app.autodiscover_tasks()


def beat_schedule(clusters: list, interval: int, prune: bool = False, notify: bool = False) -> dict[str, dict]:
    """One entry per cluster; each expires before the next is due, so a backlog never piles up.

    ``prune`` adds the daily retention run. It is a crontab rather than a 24-hour
    interval: beat counts an interval from when it first saw the entry, and its
    schedule file lives in /tmp (docker-compose.yml), so a beat redeployed more
    often than daily would never prune.

    ``notify`` adds the alert loop's sweep (notices whose dispatch was never queued)
    and the weekly review e-mail (Monday morning, about the week that just ended).
    """
    schedule: dict[str, dict] = {
        f"collect-{source.name}": {
            "task": "collector.tasks.collect_cluster",
            "schedule": float(interval),
            "args": (source.name,),
            "options": {"expires": max(interval * 0.9, 1.0)},
        }
        for source in clusters
    }
    if prune:
        schedule["prune-history"] = {
            "task": "collector.tasks.prune_history",
            "schedule": crontab(hour=3, minute=17),
            # A prune delayed by hours is pointless: tomorrow's does the same work.
            "options": {"expires": 6 * 3600.0},
        }
    if notify:
        schedule["dispatch-notices"] = {
            "task": "notify.tasks.dispatch_notices",
            "schedule": 60.0,
            "options": {"expires": 55.0},
        }
        schedule["weekly-review"] = {
            "task": "notify.tasks.send_weekly_review",
            "schedule": crontab(day_of_week=1, hour=7, minute=0),
            # Monday's review arriving on Tuesday is news nobody needs twice; next week's replaces it.
            "options": {"expires": 12 * 3600.0},
        }
    return schedule


@app.on_after_configure.connect
def _schedule_collections(sender: Celery, **_kwargs: object) -> None:
    from django.conf import settings

    sender.conf.beat_schedule = beat_schedule(
        settings.CLAIMLINE_CLUSTERS, settings.CLAIMLINE_COLLECT_INTERVAL, prune=True, notify=True
    )
