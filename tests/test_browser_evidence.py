"""Issue 20 items 6 and 7 in Chromium at 1280 px, as the demo's admin and as alice (team ml-training):
timeline charts without a red lane on a healthy Pod, the overview's legend clear of its date axis, table
cells that break no word between two letters, the blocked whole GPU and the product's 404 page."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.core.management import call_command

from tests.browser import chromium_page, sign_in

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "claimline-demo"  # noqa: S105 - the demo users' documented password
WIDTH = 1280
HEALTHY_POD = "/c/demo/pods/ml-training/jupyter-alice-0/"  # verdict ok, alice's own

# Every marker's fill on a rendered timeline chart, by lane (its trace's name).
MARKER_FILLS = """() => Array.from(document.querySelectorAll('[data-testid=timeline-chart] .scatterlayer .trace'))
  .map(t => Array.from(t.querySelectorAll('path.point')).map(p => p.style.fill)).flat()"""

# The boxes of the legend, the title and the x axis' tick labels of the overview's chart.
CHART_BOXES = """() => {
  const chart = document.querySelector('[data-testid=overview-chart]');
  const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {
    legend: box(chart.querySelector('g.legend')),
    title: box(chart.querySelector('.gtitle')),
    ticks: Array.from(chart.querySelectorAll('.xaxislayer-above .xtick text')).map(box),
    plot: box(chart.querySelector('.draglayer .nsewdrag')),
  };
}"""

# Words (letters only: no hyphen, slash or dot a line may break at) that a table cell shows on two lines.
BROKEN_WORDS = """() => {
  const out = [];
  for (const cell of document.querySelectorAll('table.grid td, table.grid th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest('.ident')) continue;
      for (const m of node.textContent.matchAll(/[A-Za-z]{3,}/g)) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
        if (tops.size > 1) out.push(m[0]);
      }
    }
  }
  return out;
}"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.fixture
def demo_users(demo_history: Any) -> None:
    call_command("ensure-demo-users")


@pytest.mark.parametrize("user", ["admin", "alice"])
def test_healthy_pods_timeline_has_no_red_and_the_legend_clears_the_dates(  # type: ignore[no-untyped-def]
    live_server, demo_users, user: str
) -> None:
    with chromium_page() as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        sign_in(page, live_server.url, user, PASSWORD)
        page.goto(live_server.url + HEALTHY_POD)
        assert "ok" in page.get_by_test_id("verdict").inner_text()
        page.locator("[data-testid=timeline-chart][data-rendered=true] path.point").first.wait_for()
        fills = page.evaluate(MARKER_FILLS)
        assert fills and not [f for f in fills if f.replace(" ", "") in ("rgb(239,85,59)", "rgb(180,35,24)")]
        page.goto(live_server.url + "/c/demo/")
        page.locator("[data-testid=overview-chart][data-rendered=true] g.legend").first.wait_for()
        boxes = page.evaluate(CHART_BOXES)
        assert boxes["ticks"]
        assert not [t for t in boxes["ticks"] if _overlap(boxes["legend"], t)]
        assert not _overlap(boxes["legend"], boxes["title"]) and not _overlap(boxes["legend"], boxes["plot"])
        assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("user", ["admin", "alice"])
def test_table_cells_break_no_word_between_letters(live_server, demo_users, user: str) -> None:  # type: ignore[no-untyped-def]
    pages = [
        "/c/demo/inventory/",
        "/c/demo/audit/",
        "/c/demo/claims",
        "/c/demo/classes/",
        "/c/demo/devices/gpu.nvidia.com/worker-h100-mig-0/gpu-0/",
        "/c/demo/pods/ml-training/h100-bench-7r2mx/",
        HEALTHY_POD,
        "/c/demo/notices/",
    ]
    if user == "admin":
        pages += ["/c/demo/retained/", "/c/demo/pods/inference/whisper-asr-0/"]
    with chromium_page() as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        sign_in(page, live_server.url, user, PASSWORD)
        broken, wide = {}, {}
        for url in pages:
            response = page.goto(live_server.url + url)
            assert response is not None and response.status == 200, url
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
            found = page.evaluate(BROKEN_WORDS)
            if found:
                broken[url] = found
            if page.evaluate("document.documentElement.scrollWidth") > WIDTH:
                wide[url] = page.evaluate("document.documentElement.scrollWidth")
        assert broken == {} and wide == {}
        assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("user", ["admin", "alice"])
def test_blocked_whole_gpu_and_the_404_page(live_server, demo_users, user: str) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        sign_in(page, live_server.url, user, PASSWORD)
        page.goto(live_server.url + "/c/demo/inventory/")
        row = page.get_by_test_id("inventory").locator("tr", has=page.get_by_role("link", name="gpu-0", exact=True))
        whole = row.filter(has_text="worker-h100-mig-0")
        assert "blocked by counters" in whole.inner_text() and "gpu-0-mig-3g-0" in whole.inner_text()
        assert "26 physical GPUs" in page.get_by_test_id("devices-vs-gpus").inner_text()
        assert page.errors == []  # type: ignore[attr-defined]
        response = page.goto(live_server.url + "/c/demo/no-such-page")
        assert response is not None and response.status == 404
        # Chromium logs the 404 itself; nothing else may fail.
        assert [e for e in page.errors if "404" not in e] == []  # type: ignore[attr-defined]
        page.errors.clear()  # type: ignore[attr-defined]
        assert page.title() == "Not found · Claimline"
        assert page.locator("header.top").is_visible() and page.get_by_test_id("not-found").is_visible()
        page.get_by_role("link", name="Overview of demo").click()
        page.wait_for_url("**/c/demo/")
        assert page.errors == []  # type: ignore[attr-defined]
