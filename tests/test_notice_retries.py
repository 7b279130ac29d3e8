"""Notices through a receiver's outage: retried with backoff for hours, kept in the database across restarts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from celery import current_app
from django.utils import timezone

from collector.models import Cluster
from notify import delivery
from notify.models import Delivery, Notice
from tests import test_notices
from tests.test_faults import wait_for
from tests.test_notices import WebhookReceiver
from tests.test_outages import free_port
from tests.workers import celery_worker, worker_env

webhook = test_notices.webhook  # a webhook on 127.0.0.1 answering from a script of statuses


@pytest.fixture
def platform_webhook(settings: Any, webhook: WebhookReceiver) -> WebhookReceiver:
    settings.CLAIMLINE_NOTIFY_WEBHOOK_URL = webhook.url
    settings.CLAIMLINE_NOTIFY_WEBHOOK_FORMAT = "json"
    settings.CLAIMLINE_NOTIFY_EMAILS = []
    settings.CLAIMLINE_SCHEDULER = "in-process"
    return webhook


def one_delivery(at: datetime) -> Delivery:
    """A notice, dispatched at ``at`` to the platform webhook."""
    cluster, _ = Cluster.objects.get_or_create(name="demo")
    Notice.objects.create(
        cluster=cluster, kind="leak", subject=f"uid-{Notice.objects.count()}", reason="orphaned",
        namespace="team-a", name="team-a/train-0-gpu", message="claim team-a/train-0-gpu is orphaned", first_seen=at,
    )
    [pk] = delivery.dispatch(at)
    return Delivery.objects.get(pk=pk)


def retry_through_outage(pending: Delivery, start: datetime, until: timedelta) -> list[float]:
    """Run the in-process sender at each time the delivery says it is due next, until ``until`` after
    ``start`` or until it is no longer retried; the waits between attempts, in seconds."""
    at, waits = start, []
    while at - start < until:
        attempts = pending.attempts
        delivery.deliver_due(at)
        pending.refresh_from_db()
        assert pending.attempts == attempts + 1
        if pending.status != Delivery.Status.RETRYING:
            break
        assert pending.next_attempt is not None and "503" in pending.error
        # Not a moment before its time, whoever asks.
        delivery.deliver_due(pending.next_attempt - timedelta(seconds=1))
        assert Delivery.objects.get(pk=pending.pk).attempts == attempts + 1
        waits.append((pending.next_attempt - at).total_seconds())
        at = pending.next_attempt
    return waits


@pytest.mark.django_db
def test_a_webhook_down_for_hours_is_retried_with_backoff_until_it_is_back(platform_webhook: WebhookReceiver) -> None:
    platform_webhook.statuses = [503] * 1000
    start = timezone.now()
    pending = one_delivery(start)
    waits = retry_through_outage(pending, start, timedelta(hours=10))
    assert pending.status == "retrying" and len(waits) == pending.attempts  # still trying ten hours on
    # 30 s doubling up to an hour, each less up to a quarter at random.
    full = [min(30 * 2**n, 3600) for n in range(len(waits))]
    assert all(0.75 * f <= w <= f for w, f in zip(waits, full, strict=True)), list(zip(waits, full, strict=True))
    assert len({round(w / f, 3) for w, f in zip(waits, full, strict=True)}) > 1  # jittered, not in lockstep
    assert 14 <= len(waits) <= 20 and sum(waits) >= 10 * 3600 - 3600

    platform_webhook.statuses = []  # back
    delivery.deliver_due(pending.next_attempt)
    pending.refresh_from_db()
    assert (pending.status, pending.attempts, pending.error) == ("sent", len(waits) + 1, "")
    assert len(platform_webhook.bodies) == len(waits) + 1


@pytest.mark.django_db
def test_a_delivery_is_given_up_a_day_after_it_was_queued(platform_webhook: WebhookReceiver, settings: Any) -> None:
    platform_webhook.statuses = [503] * 1000
    start = timezone.now()
    pending = one_delivery(start)
    retry_through_outage(pending, start, timedelta(days=2))
    assert pending.status == "failed" and "503" in pending.error
    assert pending.last_attempt is not None
    assert timedelta(hours=24) <= pending.last_attempt - pending.created < timedelta(hours=25)
    assert pending.attempts > 25


@pytest.mark.django_db
def test_a_closed_port_is_retried_too(platform_webhook: WebhookReceiver, settings: Any) -> None:
    settings.CLAIMLINE_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{free_port()}/hook"
    start = timezone.now()
    pending = one_delivery(start)
    delivery.deliver_due(start)
    pending.refresh_from_db()
    assert pending.status == "retrying" and "Connection refused" in pending.error
    assert pending.next_attempt is not None and pending.next_attempt - start <= timedelta(seconds=30)


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_retry_left_in_the_database_is_sent_by_the_sweep_of_a_fresh_worker(
    platform_webhook: WebhookReceiver, settings: Any
) -> None:
    """A worker tried, failed, queued its retry and was restarted (the queued retry lost with it)."""
    earlier = timezone.now() - timedelta(minutes=5)
    pending = one_delivery(earlier)
    platform_webhook.statuses = [503]
    delivery.deliver_due(earlier)
    pending.refresh_from_db()
    assert pending.status == "retrying" and pending.next_attempt is not None
    assert pending.next_attempt < timezone.now()  # due
    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # nothing queued survived

    env = worker_env(CLAIMLINE_SCHEDULER="celery", CLAIMLINE_NOTIFY_WEBHOOK_URL=platform_webhook.url)
    with celery_worker(env, "--without-gossip", "--without-mingle", "--without-heartbeat") as worker:
        current_app.send_task("notify.tasks.dispatch_notices")  # what beat sends every minute
        wait_for(lambda: Delivery.objects.get(pk=pending.pk).status == "sent", "the retry", timeout=60)
        assert worker.poll() is None
    pending.refresh_from_db()
    assert (pending.status, pending.attempts, len(platform_webhook.bodies)) == ("sent", 2, 2)
