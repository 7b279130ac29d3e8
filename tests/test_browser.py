"""The running app in a real browser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.management import call_command

from demo import builders as b
from tests.browser import chromium_page
from tests.clusters import T0, small_cluster

# Playwright's sync API runs an event loop in this thread; the ORM calls are ours, not async.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_home_page_lists_claims_and_opens_one(live_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.json").write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(tmp_path / "a.json"), "--at", T0.isoformat())
    with chromium_page() as page:
        page.goto(live_server.url + "/")
        table = page.get_by_test_id("claims")
        table.wait_for()
        assert "train-0-gpu" in table.inner_text()
        assert page.title() == "Claims · Claimline"
        page.get_by_role("link", name="train-1-gpu").click()
        page.get_by_test_id("versions").wait_for()
        assert "worker-1/gpu-0" in page.content()
        page.screenshot(path=str(tmp_path / "claim.png"))
        assert page.errors == []  # type: ignore[attr-defined]
