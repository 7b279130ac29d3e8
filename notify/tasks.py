"""Celery tasks: thin shells over notify.detection, notify.delivery and notify.review_mail."""

from __future__ import annotations

import logging

from celery import current_app, shared_task
from django.conf import settings
from django.utils import timezone
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from collector.models import Snapshot
from notify import delivery, detection, review_mail

log = logging.getLogger("claimline.notify")


def enqueue_scan(snapshot: Snapshot) -> None:
    """Chained after a collection: queue the notice scan; a broker that is down never fails the collection."""
    try:
        # The project's app, loaded with Django's settings (``claimline/__init__.py``), also in a management command.
        current_app.send_task("notify.tasks.scan_snapshot", args=(snapshot.pk,))
    except (OperationalError, RedisError) as exc:
        log.warning("cannot queue the notice scan of %s: %s", snapshot, exc)


@shared_task(name="notify.tasks.scan_snapshot", ignore_result=True)
def scan_snapshot(snapshot_id: int) -> str:
    snapshot = Snapshot.objects.select_related("cluster").filter(pk=snapshot_id).first()
    if snapshot is None:
        return "gone"
    result = detection.scan_after(snapshot, timezone.now())
    if result is None:
        return "skipped"
    if result.new:
        dispatch_notices.delay()
    return result.describe()


@shared_task(name="notify.tasks.dispatch_notices", ignore_result=True)
def dispatch_notices() -> int:
    """The alert loop: also on beat, so notices whose dispatch was never queued are sent late, not never."""
    ids = delivery.dispatch(timezone.now())
    for pk in ids:
        deliver.delay(pk)
    return len(ids)


@shared_task(
    name="notify.tasks.deliver",
    bind=True,
    ignore_result=True,
    autoretry_for=delivery.TRANSIENT_ERRORS,
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=settings.CLAIMLINE_NOTIFY_MAX_ATTEMPTS - 1,
)
def deliver(self, delivery_id: int) -> str:  # type: ignore[no-untyped-def]
    final = self.request.retries >= (self.max_retries or 0)
    done = delivery.attempt(delivery_id, timezone.now(), final=final)
    return done.status if done is not None else "gone"


@shared_task(name="notify.tasks.send_weekly_review", ignore_result=True)
def send_weekly_review() -> list[str]:
    return [r.describe() for r in review_mail.send_reviews()]
