"""Issue 20 items 1-3 in Chromium, as a platform admin and as ``alice`` (team ml-training): the flag where you
land, finding a Pod (search by part of a name, the Pods page and its filters), and the header's time picker
with links that keep the chosen time and the Pod page's steps through its changes."""

from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import Group

from access.models import NamespaceGrant
from collector.models import ObjectVersion, Snapshot
from tests.browser import chromium_page, sign_in

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def users(django_user_model):  # type: ignore[no-untyped-def]
    django_user_model.objects.create_superuser("admin", password="pw")
    alice = django_user_model.objects.create_user("alice", password="pw")
    team = Group.objects.create(name="ml-training")
    alice.groups.add(team)
    NamespaceGrant.objects.create(group=team, namespace="ml-training")


def test_the_flag_is_on_the_claim_page_and_the_claims_list(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    uid = ObjectVersion.objects.filter(kind="ResourceClaim", name="report-gpu").values_list("uid", flat=True)[0]
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + f"/c/demo/claims/{uid}/")
        flag = page.locator("[data-testid=leak-flag][data-claim='batch/report-gpu']")
        assert flag.get_by_test_id("leak-reason").inner_text() == "orphaned-allocation"
        assert flag.get_by_test_id("leak-command").inner_text() == "kubectl delete resourceclaim -n batch report-gpu"
        assert float(flag.get_by_test_id("leak-held").inner_text()) > float(flag.get_by_test_id("leak-leaked").inner_text())
        page.goto(live_server.url + "/c/demo/claims?namespace=batch")
        assert page.locator("[data-testid=claims] [data-testid=leak-flag]").count() == 1
        assert page.errors == []  # type: ignore[attr-defined]


def test_alice_searches_a_part_and_filters_the_pods_page(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url, "alice")
        page.goto(live_server.url + "/c/demo/")
        page.get_by_role("searchbox").fill("bench")
        page.get_by_role("searchbox").press("Enter")
        page.wait_for_url("**/search?q=bench**")
        results = page.get_by_test_id("search-results").inner_text()
        assert "ml-training/h100-bench" in results
        assert "research/" not in results and "batch/" not in results
        # The namespace's entry leads to the Pods page, filtered to it; another filter narrows it in place.
        page.get_by_role("searchbox").fill("training")
        page.get_by_role("searchbox").press("Enter")
        page.get_by_test_id("search-namespace").get_by_role("link", name="ml-training").click()
        page.wait_for_url("**/pods/?namespace=ml-training")
        rows = page.get_by_test_id("pods").locator("tbody tr")
        every = rows.count()
        assert every > 0 and all(rows.nth(i).locator("td").first.inner_text() == "ml-training" for i in range(every))
        options = page.locator("#pods-namespace option").all_inner_texts()
        assert options == ["all", "ml-training"]
        page.select_option("#pods-reason", "devices-in-use")
        page.wait_for_url("**reason=devices-in-use**")
        page.get_by_test_id("pods").locator("tbody tr").first.wait_for()
        narrowed = page.get_by_test_id("pods").locator("tbody tr")
        assert 0 < narrowed.count() < every
        assert "devices-in-use" in narrowed.first.inner_text()
        assert page.errors == []  # type: ignore[attr-defined]


def test_the_pods_link_is_in_the_navigation(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + "/c/demo/")
        page.locator("header nav").get_by_role("link", name="Pods").click()
        page.wait_for_url("**/c/demo/pods/")
        assert page.get_by_test_id("pods").locator("tbody tr").count() > 3
        assert page.errors == []  # type: ignore[attr-defined]


def test_the_time_picker_keeps_the_time_and_the_pod_page_steps(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    times = list(Snapshot.objects.order_by("at").values_list("at", flat=True))
    picked = times[1]
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + "/c/demo/claims")
        page.locator("#as-of-picker").fill(picked.strftime("%Y-%m-%dT%H:%M:%S"))
        page.get_by_test_id("time-picker").get_by_role("button", name="Go").click()
        page.wait_for_url("**as_of=**")
        assert f"As of snapshot {picked.strftime('%Y-%m-%d %H:%M:%S')}" in page.locator("#claims").inner_text()
        # A link followed keeps the time: the overview, then back to live.
        page.locator("header nav").get_by_role("link", name="Pods").click()
        page.wait_for_url("**/pods/?as_of=**")
        assert f"As of snapshot {picked.strftime('%Y-%m-%d %H:%M:%S')}" in page.locator("#pods").inner_text()
        assert page.locator("#as-of-picker").input_value().startswith(picked.strftime("%Y-%m-%dT%H:%M"))
        # A Pod of the time, then its changes step by step.
        page.get_by_test_id("pods").locator("tbody tr a").first.click()
        page.wait_for_url("**/pods/*/*/?uid=*as_of=**")
        page.get_by_test_id("pod-steps").wait_for()
        nxt = page.get_by_test_id("next-change")
        if nxt.count():
            nxt.click()
            page.wait_for_url("**/pods/*/*/?as_of=**")
            assert page.get_by_test_id("previous-change").count() == 1
        page.get_by_test_id("live-link").click()
        page.wait_for_url(lambda url: "as_of=" in url and url.endswith("as_of="))
        assert page.get_by_test_id("live-now").count() == 1
        assert page.errors == []  # type: ignore[attr-defined]
