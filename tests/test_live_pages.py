"""The Pod page is live: its body asks again every few seconds while watching, and is answered "nothing
new" (204, htmx keeps the page) until a newer snapshot is stored; a page of a past time does not ask."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from collector.models import Snapshot
from demo import builders
from demo.story import demo_snapshots

pytestmark = pytest.mark.django_db

POD = "/c/demo/pods/research/llm-finetune/"


def live_url(html: str) -> str:
    match = re.search(r'id="pod-body" hx-get="([^"]+)" hx-trigger="every (\d+)s"', html)
    assert match, "the Pod body does not ask again"
    return match.group(1).replace("&amp;", "&")


def test_the_pod_page_asks_again_and_is_told_when_nothing_is_new(
    demo_history: Any, admin_client: Client, tmp_path: Path, settings: Any
) -> None:
    settings.CLAIMLINE_COLLECT_MODE = "watch"
    page = admin_client.get(POD).content.decode()
    assert 'hx-trigger="every 3s"' in page
    url = live_url(page)
    newest = Snapshot.objects.latest("at")
    assert f"shown={newest.pk}" in url
    assert admin_client.get(url, HTTP_HX_REQUEST="true").status_code == 204
    # a newer snapshot (a watched batch or a checkpoint): the body is rendered again, naming it
    at, objects = demo_snapshots(demo_history)[-1]
    dump = tmp_path / "later.json"
    dump.write_bytes(builders.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", (newest.at + timedelta(seconds=30)).isoformat())
    fresh = admin_client.get(url, HTTP_HX_REQUEST="true")
    assert fresh.status_code == 200
    body = fresh.content.decode()
    assert body.lstrip().startswith('<section id="pod-body"') and "<html" not in body
    assert f"shown={Snapshot.objects.latest('at').pk}" in live_url(body)


def test_a_past_page_is_not_live_and_polling_asks_less_often(
    demo_history: Any, admin_client: Client, settings: Any
) -> None:
    past = admin_client.get(POD, {"as_of": demo_history.isoformat()}).content.decode()
    assert "hx-trigger" not in past.split('id="pod-body"')[1].split(">")[0]
    settings.CLAIMLINE_COLLECT_MODE = "poll"
    assert 'hx-trigger="every 15s"' in admin_client.get(POD).content.decode()
