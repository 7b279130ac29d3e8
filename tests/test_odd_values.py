"""Odd values in a URL are the asker's mistake: 400 with a message saying what is wrong, never a 500.

PostgreSQL refuses a NUL byte in text, so a NUL in a name compared with stored names raised ``DataError``;
a week at the start of the calendar made the review's dates overflow. The suite runs on PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from demo import builders as b
from tests.clusters import T0, small_cluster

pytestmark = pytest.mark.django_db

NUL_URLS = [
    # ?cluster=, ?namespace=, ?q=, ?pod=
    "/api/claims?cluster=de%00mo",
    "/api/explain?cluster=%00&pod=team-a/train-0",
    "/api/match-devices?cluster=%00&expression=true",
    "/api/snapshots?cluster=%00",
    "/metrics?cluster=%00",
    "/c/demo/claims?namespace=team%00-a",
    "/c/demo/search?q=train-0%00",
    "/c/demo/search?q=team-a%00/train-0",
    "/api/explain?pod=team-a/train%00-0",
    "/api/explain?pod=team%00-a/train-0",
    # claim, Pod and device path segments
    "/c/demo/claims/%00/",
    "/c/demo/pods/team-a/train%00-0/",
    "/c/demo/pods/team%00-a/train-0/",
    "/c/demo/devices/gpu.nvidia.com/worker-0/gpu-0%00/",
    "/c/demo/devices/gpu.nvidia.com/worker%00-0/gpu-0/",
    "/c/demo/devices/gpu%00.nvidia.com/worker-0/gpu-0/",
    # other values, and a NUL in a parameter's name
    "/c/demo/inventory/?node=worker%00-0",
    "/c/demo/pods/team-a/train-0/?uid=%00",
    "/api/leaks?as_of=%00",
    "/c/demo/claims?%00=1",
]
WEEK_URLS = [
    "/c/demo/review/?week=0001-01-01",  # the calendar's first Monday: the week before it is no date
    "/c/demo/review.csv?week=0001-01-01",
    "/c/demo/review/?week=0001-02-12",  # the eight weeks the review spans reach before year 1
    "/c/demo/review/?week=2026-13-01",
    "/c/demo/review/?week=%00",
]


@pytest.fixture
def admin(tmp_path: Path) -> Client:
    dump = tmp_path / "small.json"
    dump.write_bytes(b.dump_json(small_cluster(T0)))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat())
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root"))
    return client


def _answers(client: Client, url: str, **headers: str) -> tuple[int, str]:
    response = client.get(url, headers=headers)
    if response.get("Content-Type", "").startswith("application/json"):
        return response.status_code, str(response.json().get("error", ""))
    return response.status_code, response.content.decode(errors="replace")


def _not_400_saying(client: Client, urls: list[str], word: str) -> list[str]:
    """Each URL not answered 400 with a message that has ``word``, with what it got instead."""
    wrong = []
    for url in urls:
        status, message = _answers(client, url)
        if status != 400 or word not in message:
            wrong.append(f"{url}: {status} {message[:200]!r}")
    return wrong


def test_a_nul_byte_anywhere_in_the_url_is_a_400_naming_it(admin: Client) -> None:
    wrong = _not_400_saying(admin, NUL_URLS, "NUL")
    assert not wrong, "\n".join(wrong)
    # The API answers in JSON, pages in HTML; htmx asks get the message too.
    api = admin.get("/api/claims?cluster=%00")
    assert api["Content-Type"] == "application/json" and "cluster" in api.json()["error"]
    page = admin.get("/c/demo/search?q=%00", headers={"HX-Request": "true"})
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    assert "q=" in page.content.decode() and "Content-Security-Policy" in page


def test_weeks_the_review_cannot_reach_are_a_400(admin: Client) -> None:
    wrong = _not_400_saying(admin, WEEK_URLS, "week")
    assert not wrong, "\n".join(wrong)
    # The week the snapshot is in, and weeks before it back to the earliest the review can span, still answer.
    assert admin.get("/c/demo/review/").status_code == 200
    assert admin.get("/c/demo/review/?week=0001-03-12").status_code == 200
    assert admin.get("/c/demo/review/?week=2100-01-04").status_code == 404  # has not begun: no such review


def test_sign_in_still_comes_first(admin: Client) -> None:
    anonymous = Client(raise_request_exception=False)
    assert anonymous.get("/api/claims?cluster=%00").status_code == 401
    assert anonymous.get("/c/demo/claims/%00/").status_code == 302
