"""The overview and every page in Chromium, signed in as the demo's admin and as alice (team ml-training)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.core.management import call_command

from collector.models import ObjectVersion
from tests.browser import chromium_page, sign_in
from tests.story_counts import TEAM, devices_by_model, report_gpu_hours, stuck_pods

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "claimline-demo"  # noqa: S105 - the demo users' documented password
WIDTH = 1280


@pytest.fixture
def demo_users(demo_history: Any) -> None:
    call_command("ensure-demo-users")


def _overview_numbers(page: Any) -> dict[str, Any]:
    devices = page.get_by_test_id("overview-devices")
    devices.wait_for()
    models = {}
    for row in devices.locator("tbody tr").all():
        cells = row.locator("td").all_inner_texts()
        # GPU-equivalents: a half-held partitioned GPU shows 0.5 allocated and 0.5 free.
        models[cells[1]] = {"advertised": int(cells[2]), "allocated": float(cells[3]), "free": float(cells[4])}
    groups = page.get_by_test_id("overview-pods").locator("details.reason-group")
    pods = {}
    for i in range(groups.count()):
        group = groups.nth(i)
        names = {t.strip() for t in group.locator("ul.pods li a").all_inner_texts()}
        assert int(group.get_attribute("data-count")) == len(names)
        pods[group.get_attribute("data-reason")] = names
    return {"models": models, "pods": pods}


def test_admin_overview_matches_the_demo_story(live_server, demo_users) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url, "admin", PASSWORD)
        page.goto(live_server.url + "/")
        page.wait_for_url("**/c/demo/")
        assert page.title() == "Overview · Claimline"
        numbers = _overview_numbers(page)
        assert numbers["models"] == devices_by_model()
        assert numbers["pods"] == stuck_pods()
        held, leaked = report_gpu_hours()
        flagged = page.get_by_test_id("overview-flagged")
        assert flagged.get_by_test_id("flagged-held").inner_text() == str(held)
        assert flagged.get_by_test_id("flagged-leaked").inner_text() == str(leaked)
        assert "admin-access-namespace" in page.get_by_test_id("overview-warnings").inner_text()
        assert "ok" in page.get_by_test_id("collection").inner_text()
        page.locator("[data-testid=overview-chart][data-rendered=true] svg.main-svg").first.wait_for()
        page.get_by_test_id("overview-pods").get_by_role("link", name="research/llm-finetune").click()
        page.wait_for_url("**/pods/research/llm-finetune/")
        assert "selector-unsatisfiable" in page.get_by_test_id("verdict").inner_text()
        page.goto(live_server.url + "/c/demo/claims")
        row = page.get_by_test_id("claims").locator("tr", has_text="report-gpu")
        assert "orphaned-allocation" in row.inner_text() and "reserved" in row.inner_text()
        assert page.errors == []  # type: ignore[attr-defined]


def test_team_member_overview_shows_only_their_pods(live_server, demo_users) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url, "alice", PASSWORD)
        page.goto(live_server.url + "/")
        page.wait_for_url("**/c/demo/")
        numbers = _overview_numbers(page)
        assert numbers["models"] == devices_by_model()
        assert numbers["pods"] == stuck_pods({TEAM})
        assert "Flagged claims: 0" in page.get_by_test_id("overview-flagged").inner_text()
        # Only the node's taint rule: inventory every team sees (the admin-access namespace is not theirs).
        warnings = page.get_by_test_id("overview-warnings").inner_text()
        assert warnings == "Audit warnings: 1\ndevice-taint-rule 1 — a DeviceTaintRule taints devices"
        assert "inference/" not in page.content() and "research/" not in page.content()
        assert page.errors == []  # type: ignore[attr-defined]


def _pages() -> list[str]:
    report = ObjectVersion.objects.filter(kind="ResourceClaim", name="report-gpu").values_list("uid", flat=True)[0]
    return [
        "/c/demo/",
        "/c/demo/claims",
        f"/c/demo/claims/{report}/",
        "/c/demo/pods/research/llm-finetune/",
        "/c/demo/pods/ml-training/eval-harness-6d5f7c9b8-x2kqp/",
        "/c/demo/pods/ml-training/pretrain-8xh100-q7n4k/",
        "/c/demo/playground/?expression=device.attributes%5B%22gpu.nvidia.com%22%5D.productName.startsWith(%22NVIDIA%20A%22)",
        "/c/demo/retained/",
        "/c/demo/review/",
        "/c/demo/review/?print=1",
        "/c/demo/inventory/",
        "/c/demo/classes/",
        "/c/demo/devices/gpu.nvidia.com/worker-a100-1/gpu-3/",
        # worker-h100-mig-0: a partitioned GPU's pending whole-GPU Pod, the partition, the shared L40S
        "/c/demo/pods/ml-training/h100-bench-7r2mx/",
        "/c/demo/pods/inference/whisper-asr-0/",
        "/c/demo/devices/gpu.nvidia.com/worker-h100-mig-0/gpu-0/",
        "/c/demo/devices/gpu.nvidia.com/worker-h100-mig-0/gpu-1/",
        "/c/demo/audit/",
        "/c/demo/snapshots/",
    ]


@pytest.mark.parametrize("user", ["admin", "alice"])
def test_every_page_fits_1280_pixels(live_server, demo_users, user: str) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        sign_in(page, live_server.url, user, PASSWORD)
        wide = {}
        for url in _pages():
            if user == "alice" and ("research" in url or "claims/" in url or "/inference/" in url):
                continue  # other teams' Pods and claims are 404 for her
            response = page.goto(live_server.url + url)
            assert response is not None and response.status == 200, url
            page.wait_for_load_state("load")
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > WIDTH:
                wide[url] = width
        assert wide == {}
        assert page.errors == []  # type: ignore[attr-defined]
