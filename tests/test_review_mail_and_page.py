"""The weekly review's page and e-mail (issue 20, item 4): utilization on the page, leaked hours named
leaked, absolute links with CLAIMLINE_BASE_URL, a dry run without recipients that saves the HTML, and
a CSV whose rows say their week."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

pytestmark = pytest.mark.django_db

WEEK = "2026-11-16"


def _hrefs(html: str) -> list[str]:
    return re.findall(r'<a href="([^"]*)"', html)


def test_review_page_shows_utilization(demo_history: Any, admin_client: Client) -> None:
    page = admin_client.get("/c/demo/review/", {"week": WEEK}).content.decode()
    [total] = re.findall(r'data-testid="utilization"><strong>([^<]*)</strong>', page)
    assert re.fullmatch(r"\d+\.\d%", total), total
    per_model = re.findall(r'data-testid="model-utilization">([^<]*)<', page)
    assert per_model and all(re.fullmatch(r"\d+\.\d%|n/a", v) for v in per_model)
    assert "allocated ÷ advertised device-hours" in page


def test_review_csv_has_a_week_column(demo_history: Any, admin_client: Client) -> None:
    text = admin_client.get("/c/demo/review.csv", {"week": "2026-11-18"}).content.decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0][:3] == ["week", "scope", "name"]
    assert {r[0] for r in rows[1:]} == {WEEK}  # the Monday of the week asked for


def test_review_email_says_leaked_and_links_absolutely(settings: Any, demo_history: Any) -> None:
    settings.CLAIMLINE_BASE_URL = "https://claimline.example.com"
    call_command("send-review", "--week", WEEK, "--to", "capacity@example.com")
    [message] = mail.outbox
    html, _ = message.alternatives[0]
    assert "held by flagged claims" not in message.subject + message.body + html
    assert "leaked by flagged claims" in message.subject
    assert "Device-hours leaked by flagged claims" in html and "Leaked device-hours" in html
    assert "Utilization" in html and "Utilization (allocated ÷ advertised device-hours)" in message.body
    hrefs = _hrefs(html)
    assert f"https://claimline.example.com/c/demo/review/?week={WEEK}" in hrefs
    assert any(h.startswith("https://claimline.example.com/c/demo/claims/") for h in hrefs)  # the offenders
    assert all(h.startswith("https://claimline.example.com/") for h in hrefs), hrefs
    assert f"https://claimline.example.com/c/demo/review/?week={WEEK}" in message.body


def test_dry_run_without_recipients_builds_and_saves_the_html(
    settings: Any, demo_history: Any, tmp_path: Path, capsys: Any
) -> None:
    settings.CLAIMLINE_REVIEW_EMAILS = []
    settings.CLAIMLINE_BASE_URL = "https://claimline.example.com"
    out = tmp_path / "review.html"
    call_command("send-review", "--dry-run", "--week", WEEK, "--html-out", str(out))
    assert mail.outbox == []
    printed = capsys.readouterr().out
    assert "not sent (dry run) to no recipients" in printed and f"HTML saved to {out}" in printed
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") == 2
    assert all(h.startswith("https://claimline.example.com/") for h in _hrefs(html))


def test_without_recipients_a_real_send_still_refuses(settings: Any, demo_history: Any) -> None:
    settings.CLAIMLINE_REVIEW_EMAILS = []
    with pytest.raises(CommandError, match="--dry-run"):
        call_command("send-review", "--week", WEEK)
    assert mail.outbox == []


def test_notice_links_are_absolute_with_the_base_url(settings: Any) -> None:
    """Webhooks (JSON, Slack) and e-mails carry the notice's link under CLAIMLINE_BASE_URL, also for a
    notice stored with a path before the setting was made."""
    from datetime import UTC, datetime

    from collector.models import Cluster
    from notify.delivery import EMAIL, Target, send, webhook_body
    from notify.models import Notice

    notice = Notice.objects.create(
        cluster=Cluster.objects.create(name="prod"), kind="leak", subject="uid-1", reason="orphaned-allocation",
        namespace="batch", name="batch/report-gpu", message="holds gpu-5", link="/c/prod/claims/uid-1/",
        first_seen=datetime(2026, 11, 20, tzinfo=UTC),
    )
    settings.CLAIMLINE_BASE_URL = "https://claimline.example.com"
    url = "https://claimline.example.com/c/prod/claims/uid-1/"
    assert webhook_body(notice, "json", notice.message)["link"] == url
    assert f"<{url}|details>" in webhook_body(notice, "slack", notice.message)["text"]
    send(Target("env/email", "platform", EMAIL, emails=("ops@example.com",)), notice)
    assert url in mail.outbox[-1].body
    settings.CLAIMLINE_BASE_URL = ""
    assert webhook_body(notice, "json", notice.message)["link"] == "/c/prod/claims/uid-1/"
