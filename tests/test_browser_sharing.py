"""A new user finds the demo's shared GPUs in Chromium: partitions, a share of capacity, an extended resource."""

from __future__ import annotations

import os

import pytest

from demo import builders as b
from demo import story_sharing as shared
from tests.browser import chromium_page, sign_in

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NODE = shared.MIG_NODE


@pytest.fixture(autouse=True)
def admin(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_superuser("admin", password="pw")


def _generated(ns_name: tuple[str, str]) -> str:
    ns, name = ns_name
    return b.generated_claim_name(name, "gpu", b.object_uid("Pod", ns, name))


def test_whole_gpu_pod_names_the_partitions_claim(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    ns, name = shared.WHOLE_H100
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + f"/c/demo/pods/{ns}/{name}/")
        verdict = page.get_by_test_id("verdict").inner_text()
        assert "devices-in-use" in verdict
        assert f"{shared.MIG_NOTEBOOK[0]}/{_generated(shared.MIG_NOTEBOOK)} holds 40Gi" in verdict
        assert "counter set gpu-0-counters" in verdict
        # the partition's holder is the claim keeping the GPU, dated by research's finished holds (the sweep's
        # earlier trials): the estimate and its basis
        when = page.get_by_test_id("estimate").inner_text()
        assert "the holder has held its devices 5h" in when
        assert f"claims in the namespace of {shared.MIG_NOTEBOOK[0]}/{_generated(shared.MIG_NOTEBOOK)}" in when
        assert "usually held them 6h50m (median of 3 finished since 2026-10-21, p75 7h10m)" in when
        assert "the first is likely free in ~1h50m (about 2026-11-20 13:50 UTC) on worker-h100-mig-0" in when
        assert page.errors == []  # type: ignore[attr-defined]


def test_inventory_shows_the_counter_set_and_the_shared_device_its_shares(  # type: ignore[no-untyped-def]
    live_server, demo_history
) -> None:
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + "/c/demo/inventory/")
        counter_set = page.locator(f"[data-counter-set='{NODE}/gpu-0-counters']")
        memory = counter_set.locator("tr[data-counter=memory]")
        assert memory.get_by_test_id("counter-used").inner_text() == "40Gi"
        assert memory.get_by_test_id("counter-free").inner_text() == "40Gi"
        holders = counter_set.get_by_test_id("counter-holders").inner_text()
        assert _generated(shared.MIG_NOTEBOOK) in holders and shared.PARTITION in holders
        # From the inventory to the shared L40S's page: what is left, and who holds the rest.
        row = page.get_by_test_id("inventory").locator("tr", has_text=NODE).filter(has_text="L40S")
        row.get_by_role("link", name=shared.SHARED_DEVICE).click()
        page.wait_for_url(f"**/devices/{b.GPU_DRIVER}/{NODE}/{shared.SHARED_DEVICE}/")
        assert page.get_by_test_id("capacity-remaining").inner_text() == "24Gi"
        shares = page.get_by_test_id("device-shares").inner_text()
        assert _generated(shared.SHARED_INFERENCE) in shares and "memory 24Gi" in shares
        assert page.errors == []  # type: ignore[attr-defined]


def test_extended_resource_pod_shows_its_claim_and_is_ok(live_server, demo_history) -> None:  # type: ignore[no-untyped-def]
    ns, name = shared.EXTENDED_GPU
    with chromium_page() as page:
        sign_in(page, live_server.url)
        page.goto(live_server.url + f"/c/demo/pods/{ns}/{name}/")
        assert "all four boundaries hold" in page.get_by_test_id("verdict").inner_text()
        card = page.get_by_test_id("claim-timeline").first
        assert shared.extended_claim_name() in card.inner_text()
        assert "nvidia.com/gpu" in card.get_by_test_id("extended-resources").inner_text()
        assert page.errors == []  # type: ignore[attr-defined]
