"""Celery tasks: thin shells over notify.detection, notify.delivery and notify.review_mail."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from collector import broker
from collector.models import Snapshot
from notify import delivery, detection, review_mail
from notify.models import Delivery

log = logging.getLogger("claimline.notify")

# Retries due within this many seconds are also queued with a countdown (so a short backoff is kept
# to the second); later ones wait for the sweep. Well under Redis's visibility timeout (an hour).
RETRY_IN_QUEUE = 300.0


def enqueue_scan(snapshot: Snapshot) -> None:
    """Chained after a collection: queue the notice scan. A broker that is down or silent never fails
    the collection (nor holds it for long: collector/broker.py); the scan then runs in this process."""
    why = broker.queue("notify.tasks.scan_snapshot", snapshot.pk)
    if not why:
        return
    log.warning("cannot queue the notice scan of %s: %s; scanning in this process instead", snapshot, why)
    try:
        # Stored notices wait for the sweep (dispatch_notices) to be sent, once the broker is back.
        detection.scan_after(snapshot, timezone.now())
    except Exception:
        log.exception("the notice scan of %s failed", snapshot)


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
    """The alert loop, also on beat every minute: queues the deliveries of new notices, and every
    delivery that is due (retries included) as the database says, so neither a notice whose dispatch
    was never queued nor a retry scheduled by a worker that restarted is lost."""
    now = timezone.now()
    delivery.dispatch(now)
    due = delivery.due(now)
    for pk, _target in due:
        deliver.delay(pk)
    return len(due)


@shared_task(name="notify.tasks.deliver", bind=True, ignore_result=True)
def deliver(self, delivery_id: int) -> str:  # type: ignore[no-untyped-def]
    """One attempt. A failed one is recorded with when to try again (backoff, notify/delivery.py); a
    retry due within RETRY_IN_QUEUE is also queued with that countdown, any is taken by the sweep."""
    try:
        done = delivery.attempt(delivery_id, timezone.now())
    except delivery.TRANSIENT_ERRORS:
        done = Delivery.objects.filter(pk=delivery_id).first()
        if done is not None and done.status == Delivery.Status.RETRYING and done.next_attempt is not None:
            wait = (done.next_attempt - timezone.now()).total_seconds()
            if wait <= RETRY_IN_QUEUE and not self.request.is_eager:
                # A countdown longer than the broker's visibility timeout would be delivered twice;
                # one not queued costs nothing: the sweep finds the retry due in the database.
                broker.queue("notify.tasks.deliver", delivery_id, countdown=max(wait, 0.0))
    return done.status if done is not None else "gone"


@shared_task(name="notify.tasks.send_weekly_review", ignore_result=True)
def send_weekly_review() -> list[str]:
    return [r.describe() for r in review_mail.send_reviews()]
