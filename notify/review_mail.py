"""The weekly capacity review as an e-mail: key numbers and charts in the body, the table as CSV.

One message per cluster with history, about the last complete week (Monday to
Monday, UTC) before the cluster's newest snapshot. Recipients are platform
people (CLAIMLINE_REVIEW_EMAILS), so the review is not redacted.
"""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.urls import reverse

from collector.history_reader import NoSnapshot, StoredHistory
from collector.models import Cluster
from derived.review import review_read
from derived.thresholds import leak_thresholds
from domain.reports.capacity import WEEK, percent, review_csv_rows, week_containing
from notify.detection import absolute
from notify.svg import bar_chart

log = logging.getLogger("claimline.notify")


def last_full_week(as_of: datetime) -> datetime:
    """Monday 00:00 UTC of the week before the one containing ``as_of``."""
    return week_containing(as_of) - WEEK


@dataclass
class ReviewMail:
    cluster: str
    week_start: datetime
    message: EmailMultiAlternatives
    sent: bool = False

    def describe(self) -> str:
        verb = "sent" if self.sent else "not sent (dry run)"
        to = ", ".join(self.message.to) or "no recipients (set CLAIMLINE_REVIEW_EMAILS or --to)"
        return f"{self.cluster}, week of {self.week_start.date()}: {verb} to {to}"

    @property
    def html(self) -> str:
        """The HTML body, as a mail client shows it (charts inline, links absolute with CLAIMLINE_BASE_URL)."""
        [(html, _)] = [(body, mime) for body, mime in self.message.alternatives if mime == "text/html"]
        return str(html)


def _charts(doc: dict[str, Any]) -> dict[str, str]:
    weekly = [
        (
            w["week_start"][:10] + (" (partial)" if w["partial"] else ""),
            [w["allocated_device_hours"], w["leaked_device_hours"]],
        )
        for w in doc["series"]["weekly"]
    ]
    namespaces = [
        (r["namespace"] or "(none)", [r["allocated_device_hours"], r["leaked_device_hours"]])
        for r in doc["by_namespace"][:12]
    ]
    series = ["allocated device-hours", "leaked device-hours"]
    return {
        "weekly_svg": bar_chart("Device-hours by week", series, weekly),
        "namespace_svg": bar_chart("This week by namespace", series, namespaces),
    }


def _csv(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


def review_message(cluster: Cluster, recipients: list[str], week_start: datetime | None = None) -> ReviewMail:
    history = StoredHistory(cluster)
    start = week_start or last_full_week(history.as_of)
    doc = review_read(history, start, leak_thresholds())
    totals = doc["totals"]
    week = start.date().isoformat()
    subject = (
        f"[Claimline] {cluster.name} weekly review, week of {week}: "
        f"{totals['allocated_device_hours']:.1f} device-hours allocated, "
        f"{totals['leaked_device_hours']:.1f} leaked by flagged claims"
    )
    link = absolute(reverse("review", kwargs={"cluster": cluster.name})) + f"?week={week}"
    context = {
        "cluster": cluster.name,
        "week": week,
        "doc": doc,
        "totals": totals,
        "utilization": percent(totals.get("utilization")),
        "previous_utilization": percent(totals.get("previous_utilization")),
        "leaked_share": percent(totals.get("leaked_share")),
        "link": link,
        # Every link absolute with CLAIMLINE_BASE_URL: a mail client has no page to resolve a path against.
        "offenders": [
            {**o, "link": absolute(reverse("claim", kwargs={"cluster": cluster.name, "uid": o["uid"]}))}
            for o in doc["top_offenders"]
        ],
        **_charts(doc),
    }
    text = render_to_string("notify/review_email.txt", context)
    html = render_to_string("notify/review_email.html", context)
    message = EmailMultiAlternatives(subject, text, settings.DEFAULT_FROM_EMAIL, recipients)
    message.attach_alternative(html, "text/html")
    message.attach(f"claimline-{cluster.name}-week-{week}.csv", _csv(review_csv_rows(doc)), "text/csv")
    return ReviewMail(cluster.name, start, message)


def send_reviews(
    recipients: list[str] | None = None,
    clusters: list[str] | None = None,
    week_start: datetime | None = None,
    dry_run: bool = False,
) -> list[ReviewMail]:
    """The review of every cluster with history (or of ``clusters``), sent unless ``dry_run``.

    Without recipients (none given, CLAIMLINE_REVIEW_EMAILS empty) nothing is sent, but a dry run
    still builds the messages, to look at them before anyone gets one."""
    to = recipients if recipients is not None else list(settings.CLAIMLINE_REVIEW_EMAILS)
    if not to and not dry_run:
        log.info("weekly review not sent: CLAIMLINE_REVIEW_EMAILS is empty")
        return []
    rows = Cluster.objects.order_by("name")
    if clusters:
        rows = rows.filter(name__in=clusters)
    mails = []
    for cluster in rows:
        try:
            mail = review_message(cluster, to, week_start)
        except NoSnapshot:
            continue
        if not dry_run:
            mail.message.send()
            mail.sent = True
        mails.append(mail)
    return mails
