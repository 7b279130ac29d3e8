"""Sending stored notices: who receives which, one attempt at a time, every attempt recorded.

The alert loop (``dispatch``) reads notices not yet dispatched, writes one
Delivery per receiver channel that wants each, and hands the deliveries to a
sender: Celery's ``notify.tasks.deliver`` or, in the embedded in-process scheduler,
``deliver_due`` on the next loop. A delivery that fails on the network is retried with backoff
for up to a day; when it is due again is kept in the database (``next_attempt``), where both
senders look (``due``: Celery's beat sweep, ``dispatch_notices``, every minute), so no retry
depends on the process that scheduled it.
"""

from __future__ import annotations

import json
import logging
import random
import smtplib
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q

from access.models import NamespaceGrant
from collector.history_reader import namespaces_ever_known
from domain.reports.redaction import Redactor, Scope, referenced_namespaces
from notify.detection import absolute
from notify.models import Delivery, Notice, Receiver

log = logging.getLogger("claimline.notify")

# Network errors worth another attempt: unreachable, timed out, refused, a 5xx/429 answer
# (HTTPError is a URLError), an SMTP server that failed mid-conversation.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    urllib.error.URLError,
    TimeoutError,
    ConnectionError,
    smtplib.SMTPException,
)
DISPATCH_BATCH = 500
# Retries wait their backoff less up to this fraction of it, at random.
JITTER = 0.25
_jitter = random.Random()
WEBHOOK = "webhook"
EMAIL = "email"


class PermanentDeliveryError(Exception):
    """The receiver refused the notice (a 4xx answer, refused recipients): retrying would not help."""


@dataclass(frozen=True)
class Target:
    """One channel of one receiver, and which notices it wants."""

    key: str
    label: str
    channel: str
    receiver_id: int | None = None
    url: str = ""
    format: str = "json"
    emails: tuple[str, ...] = ()
    # (cluster pk or None for every cluster, namespace); None: every notice (a platform receiver).
    namespaces: frozenset[tuple[int | None, str]] | None = None

    def wants(self, notice: Notice) -> bool:
        if self.namespaces is None:
            return True
        if not notice.namespace:
            return False  # nodes and collections are the platform's
        return bool({(None, notice.namespace), (notice.cluster_id, notice.namespace)} & self.namespaces)


def _host(url: str) -> str:
    # Webhook URLs often carry a secret token in their path: show the host only.
    return urlsplit(url).hostname or "?"


def _env_targets() -> list[Target]:
    out = []
    if settings.CLAIMLINE_NOTIFY_WEBHOOK_URL:
        url = settings.CLAIMLINE_NOTIFY_WEBHOOK_URL
        out.append(
            Target("env/webhook", f"platform webhook ({_host(url)})", WEBHOOK, url=url,
                   format=settings.CLAIMLINE_NOTIFY_WEBHOOK_FORMAT)
        )
    if settings.CLAIMLINE_NOTIFY_EMAILS:
        emails = tuple(settings.CLAIMLINE_NOTIFY_EMAILS)
        out.append(Target("env/email", f"platform e-mail ({', '.join(emails)})", EMAIL, emails=emails))
    return out


def _receiver_targets(receiver: Receiver, grants: Iterable[NamespaceGrant]) -> list[Target]:
    namespaces = None if receiver.group_id is None else frozenset((g.cluster_id, g.namespace) for g in grants)
    out = []
    if receiver.webhook_url:
        out.append(
            Target(f"receiver-{receiver.pk}/webhook", f"{receiver.name} webhook ({_host(receiver.webhook_url)})",
                   WEBHOOK, receiver.pk, url=receiver.webhook_url, format=receiver.webhook_format,
                   namespaces=namespaces)
        )
    emails = tuple(receiver.email_list())
    if emails:
        out.append(
            Target(f"receiver-{receiver.pk}/email", f"{receiver.name} e-mail ({', '.join(emails)})", EMAIL,
                   receiver.pk, emails=emails, namespaces=namespaces)
        )
    return out


def targets() -> list[Target]:
    """Every configured receiver channel: the environment's, then the admin's receivers."""
    receivers = list(Receiver.objects.filter(enabled=True).order_by("name"))
    grants: dict[int, list[NamespaceGrant]] = {}
    for grant in NamespaceGrant.objects.filter(group_id__in={r.group_id for r in receivers if r.group_id}):
        grants.setdefault(grant.group_id, []).append(grant)
    out = _env_targets()
    for receiver in receivers:
        out += _receiver_targets(receiver, grants.get(receiver.group_id or 0, ()))
    return out


def _target_of(delivery: Delivery) -> Target | None:
    """The delivery's receiver channel as configured now (an address edited since is used)."""
    receiver = delivery.receiver
    if receiver is not None:
        grants = NamespaceGrant.objects.filter(group_id=receiver.group_id) if receiver.group_id else []
        channels = _receiver_targets(receiver, grants) if receiver.enabled else []
    else:
        channels = _env_targets()
    return next((t for t in channels if t.key == delivery.target), None)


# --- the alert loop ---------------------------------------------------------------------------------


def dispatch(now: datetime) -> list[int]:
    """Queue a delivery per wanting receiver for every notice not yet dispatched; the deliveries' ids."""
    with transaction.atomic():
        # Two loops at once each take different notices (SKIP LOCKED); SQLite has one writer anyway.
        notices = list(
            Notice.objects.filter(dispatched__isnull=True)
            .select_for_update(skip_locked=True)
            .order_by("created")[:DISPATCH_BATCH]
        )
        if not notices:
            return []
        channels = targets()
        Delivery.objects.bulk_create(
            [
                Delivery(notice=n, receiver_id=t.receiver_id, target=t.key, channel=t.channel, next_attempt=now)
                for n in notices
                for t in channels
                if t.wants(n)
            ],
            ignore_conflicts=True,
        )
        Notice.objects.filter(pk__in=[n.pk for n in notices]).update(dispatched=now)
    return list(
        Delivery.objects.filter(notice__in=notices, status=Delivery.Status.PENDING)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


# --- sending ----------------------------------------------------------------------------------------


def link_of(notice: Notice) -> str:
    """The notice's link as delivered: a page's path (stored before CLAIMLINE_BASE_URL was set) gets
    the base URL too, so every link leaving Claimline is absolute once it is set."""
    return absolute(notice.link) if notice.link.startswith("/") else notice.link


def notice_document(notice: Notice, message: str | None = None) -> dict[str, Any]:
    return {
        "cluster": notice.cluster.name,
        "kind": notice.kind,
        "subject": notice.subject,
        "reason": notice.reason,
        "namespace": notice.namespace,
        "name": notice.name,
        "message": notice.message if message is None else message,
        "link": link_of(notice),
        "first_seen": notice.first_seen.isoformat(),
    }


def headline(notice: Notice) -> str:
    return f"[Claimline] {notice.cluster.name}: {notice.reason} {notice.name or notice.subject}"


def webhook_body(notice: Notice, fmt: str, message: str) -> dict[str, Any]:
    if fmt == "slack":
        url = link_of(notice)
        link = f" <{url}|details>" if url.startswith(("http://", "https://")) else ""
        return {"text": f"*{headline(notice)}*\n{message}{link}"}
    return notice_document(notice, message)


def known_namespaces(cluster_id: int, messages: Iterable[str]) -> set[str]:
    """The namespaces the history ever knew among those the messages may name (what a redactor
    looks up): one probe per name, not a pass over every claim version kept."""
    return namespaces_ever_known(cluster_id, referenced_namespaces(list(messages)))


def message_for(target: Target, notice: Notice) -> str:
    """The notice as the receiver may read it: for a team, other teams' claims are hidden, as on the pages."""
    if target.namespaces is None:
        return notice.message
    visible = frozenset(ns for cluster_id, ns in target.namespaces if cluster_id in (None, notice.cluster_id))
    known = known_namespaces(notice.cluster_id, [notice.message])
    return Redactor(Scope(admin=False, namespaces=visible), known).text(notice.message)


def post_json(url: str, body: dict[str, Any], timeout: float) -> None:
    if urlsplit(url).scheme not in ("http", "https"):
        raise PermanentDeliveryError("a webhook URL must be http:// or https://")
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "claimline-notify"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - checked above
            response.read(4096)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code >= 500 or exc.code == 429:
            raise
        raise PermanentDeliveryError(f"HTTP {exc.code} {exc.reason}") from None


def send(target: Target, notice: Notice) -> None:
    message = message_for(target, notice)
    if target.channel == WEBHOOK:
        post_json(target.url, webhook_body(notice, target.format, message), settings.CLAIMLINE_NOTIFY_TIMEOUT)
        return
    body = f"{message}\n\n{link_of(notice)}\n" if notice.link else f"{message}\n"
    try:
        EmailMessage(headline(notice), body, settings.DEFAULT_FROM_EMAIL, list(target.emails)).send()
    except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as exc:
        raise PermanentDeliveryError(str(exc)) from None


def backoff(attempts: int) -> timedelta:
    """How long to wait after the ``attempts``-th failed attempt: CLAIMLINE_NOTIFY_RETRY_FIRST seconds,
    doubling up to CLAIMLINE_NOTIFY_RETRY_MAX, less up to a quarter at random (receivers coming back
    after an outage are not all retried in the same second)."""
    first, cap = settings.CLAIMLINE_NOTIFY_RETRY_FIRST, settings.CLAIMLINE_NOTIFY_RETRY_MAX
    base = min(first * 2 ** min(max(attempts - 1, 0), 40), cap)
    return timedelta(seconds=base * (1 - JITTER * _jitter.random()))


def gives_up(delivery: Delivery, now: datetime) -> bool:
    """Whether a delivery that just failed again is failed for good: CLAIMLINE_NOTIFY_GIVE_UP_AFTER
    after it was queued (or after CLAIMLINE_NOTIFY_MAX_ATTEMPTS attempts, when set)."""
    limit = settings.CLAIMLINE_NOTIFY_MAX_ATTEMPTS
    if limit and delivery.attempts >= limit:
        return True
    return now - delivery.created >= timedelta(seconds=settings.CLAIMLINE_NOTIFY_GIVE_UP_AFTER)


def _claim(delivery_id: int, now: datetime) -> bool:
    """Take a due delivery for one attempt, so a second sender (the sweep's task, a retry queued before a
    restart, the other loop) finds it not due: one attempt at a time, never the same one twice."""
    in_flight = now + timedelta(seconds=max(60.0, 3 * settings.CLAIMLINE_NOTIFY_TIMEOUT))
    return bool(
        Delivery.objects.filter(pk=delivery_id, status__in=[Delivery.Status.PENDING, Delivery.Status.RETRYING])
        .filter(Q(next_attempt__isnull=True) | Q(next_attempt__lte=now))
        .update(next_attempt=in_flight)
    )


def attempt(delivery_id: int, now: datetime) -> Delivery | None:
    """One attempt at a delivery that is due, recorded; a transient error is re-raised after recording
    (retrying, with its next attempt after ``backoff``, or failed once ``gives_up``).

    A delivery sent, failed, or not due (another sender has it, or its retry is later) is returned as it is.
    """
    if not _claim(delivery_id, now):
        return Delivery.objects.filter(pk=delivery_id).first()
    delivery = Delivery.objects.select_related("notice__cluster", "receiver").filter(pk=delivery_id).first()
    if delivery is None:
        return None  # a receiver deleted meanwhile
    delivery.attempts += 1
    delivery.last_attempt = now
    target = _target_of(delivery)
    try:
        if target is None:
            raise PermanentDeliveryError("the receiver is no longer configured")
        send(target, delivery.notice)
    except PermanentDeliveryError as exc:
        _record(delivery, Delivery.Status.FAILED, str(exc), None)
    except TRANSIENT_ERRORS as exc:
        final = gives_up(delivery, now)
        status = Delivery.Status.FAILED if final else Delivery.Status.RETRYING
        later = None if final else now + backoff(delivery.attempts)
        _record(delivery, status, f"{type(exc).__name__}: {exc}", later)
        then = f"next at {later.isoformat()}" if later is not None else "giving up"
        log.warning(
            "delivery %s to %s failed (attempt %s, %s): %s", delivery.pk, delivery.target, delivery.attempts, then, exc
        )
        raise
    else:
        _record(delivery, Delivery.Status.SENT, "", None)
    return delivery


def _record(delivery: Delivery, status: str, error: str, next_attempt: datetime | None) -> None:
    delivery.status, delivery.error, delivery.next_attempt = status, error[:2000], next_attempt
    delivery.save(update_fields=["status", "error", "attempts", "last_attempt", "next_attempt"])


def due(now: datetime) -> list[tuple[int, str]]:
    """Deliveries to attempt now (id, target), soonest first: new ones, and retries whose time has come.

    Read from the database by every sender, so a retry outlives the process that scheduled it."""
    return list(
        Delivery.objects.filter(status__in=[Delivery.Status.PENDING, Delivery.Status.RETRYING])
        .filter(Q(next_attempt__isnull=True) | Q(next_attempt__lte=now))
        .order_by("next_attempt")
        .values_list("pk", "target")[:DISPATCH_BATCH]
    )


def deliver_due(now: datetime) -> int:
    """The in-process sender: one attempt at each delivery that is due; failures wait for a later loop."""
    due_now = due(now)
    sent = 0
    unreachable: set[str] = set()
    for pk, target in due_now:
        if target in unreachable:
            continue  # one timeout per receiver and loop is enough: the loop also collects
        try:
            done = attempt(pk, now)
        except TRANSIENT_ERRORS:
            unreachable.add(target)
            continue
        sent += done is not None and done.status == Delivery.Status.SENT
    return sent


# --- for pages ----------------------------------------------------------------------------------------


def labels() -> dict[str, str]:
    return {t.key: t.label for t in targets()}


def failing_receivers() -> list[dict[str, Any]]:
    """Receiver channels whose latest attempt failed, with the error and how many failed since the last success.

    For the overview page: a receiver that silently drops every notice is as bad as none.
    """
    names = labels()
    out = []
    for key in Delivery.objects.order_by().values_list("target", flat=True).distinct():
        attempted = Delivery.objects.filter(target=key, last_attempt__isnull=False).order_by("-last_attempt")
        latest = attempted.first()
        if latest is None or latest.status not in (Delivery.Status.RETRYING, Delivery.Status.FAILED):
            continue
        last_ok = attempted.filter(status=Delivery.Status.SENT).values_list("last_attempt", flat=True).first()
        failing = attempted.exclude(status=Delivery.Status.SENT)
        if last_ok is not None:
            failing = failing.filter(last_attempt__gt=last_ok)
        out.append(
            {
                "target": key,
                "label": names.get(key, key),
                "channel": latest.channel,
                "status": latest.status,
                "error": latest.error,
                "last_attempt": latest.last_attempt,
                "last_success": last_ok,
                "failing_deliveries": failing.count(),
            }
        )
    return sorted(out, key=lambda r: r["label"])
