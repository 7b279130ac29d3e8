"""The running app in a real browser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.management import call_command

from demo import builders as b
from tests.browser import chromium_page, sign_in
from tests.clusters import T0, small_cluster

# Playwright's sync API runs an event loop in this thread; the ORM calls are ours, not async.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def admin(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_superuser("admin", password="pw")


def test_home_page_lists_claims_and_opens_one(live_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.json").write_bytes(b.dump_json(small_cluster()))
    call_command("import-snapshot", str(tmp_path / "a.json"), "--at", T0.isoformat())
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + "/c/demo/claims")
        table = page.get_by_test_id("claims")
        table.wait_for()
        assert "train-0-gpu" in table.inner_text()
        assert page.title() == "Claims · Claimline"
        page.get_by_role("link", name="train-1-gpu").click()
        page.get_by_test_id("versions").wait_for()
        assert "worker-1/gpu-0" in page.content()
        page.screenshot(path=str(tmp_path / "claim.png"))
        assert page.errors == []  # type: ignore[attr-defined]


def test_search_a_pod_and_read_its_verdict_and_timeline(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + "/c/demo/")
        page.get_by_role("searchbox", name="Search Pods, claims, nodes and namespaces").fill("llm-finetune")
        page.keyboard.press("Enter")
        page.wait_for_url("**/pods/research/llm-finetune/")
        verdict = page.get_by_test_id("verdict")
        assert "selector-unsatisfiable" in verdict.inner_text()
        assert "no device satisfies request gpu" in verdict.inner_text()
        suggestion = page.get_by_test_id("suggestion").inner_text()  # issue 20 item 8: the nearest change
        assert "Nearest change that would fit: 9 devices have memory 80Gi" in suggestion
        assert "with memory >= 80Gi, worker-h100-0 fits" in suggestion
        card = page.get_by_test_id("claim-timeline").first
        states = card.locator("ol.boundaries li").all_inner_texts()
        assert [s.split()[0].lower() for s in states] == ["inventory", "allocation", "preparation", "runtime"]
        assert "failed" in states[1]
        assert "Pod created" in card.inner_text()
        card.locator("[data-testid=timeline-chart][data-rendered=true] svg.main-svg").first.wait_for()
        assert page.errors == []  # type: ignore[attr-defined]


def test_pod_with_two_incarnations_switches_between_them(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + "/c/demo/pods/ml-training/jupyter-alice-0/")
        links = page.get_by_test_id("incarnations").get_by_role("link")
        assert links.count() == 1
        links.first.click()
        page.wait_for_url("**uid=*")
        assert "(shown)" in page.get_by_test_id("incarnations").inner_text()
        assert page.errors == []  # type: ignore[attr-defined]


def test_playground_matches_as_you_type(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + "/c/demo/playground/")
        page.locator("#expression").fill("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0")
        results = page.get_by_test_id("playground-results")
        # 28 devices: worker-h100-mig-0 adds a whole H100 PCIe (80Gi), two 3g.40gb partitions and an L40S (48Gi).
        results.get_by_text("of 28 devices match").wait_for()
        assert "10 of 28 devices match" in results.inner_text()
        assert "all 18 have memory 40Gi" in page.get_by_test_id("why-not").first.inner_text()
        page.locator("#expression").fill("device.driver ==")
        page.get_by_test_id("playground-error").wait_for()
        assert "does not compile" in page.get_by_test_id("playground-error").inner_text()
        assert page.errors == []  # type: ignore[attr-defined]


def test_report_pages_and_charts(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + "/c/demo/retained/")
        assert "orphaned-allocation" in page.get_by_test_id("leaks").inner_text()
        page.goto(live_server.url + "/c/demo/review/")
        for chart in ("chart-devices", "chart-weekly"):
            page.locator(f"[data-testid={chart}][data-rendered=true] svg.main-svg").first.wait_for()
        assert page.get_by_test_id("review-table").locator("tr").count() > 2
        page.goto(live_server.url + "/c/demo/inventory/")
        assert page.get_by_test_id("inventory").locator("tbody tr").count() == 28  # 4 on worker-h100-mig-0
        page.goto(live_server.url + "/c/demo/audit/")
        assert "admin-access-namespace" in page.get_by_test_id("audit").inner_text()
        assert page.errors == []  # type: ignore[attr-defined]
