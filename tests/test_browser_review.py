"""The weekly review's print view in Chromium: it fits an A4 page and no cell breaks a word mid-letter,
for the demo's admin and for alice (team ml-training)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.core.management import call_command

from tests.browser import chromium_page, sign_in

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "claimline-demo"  # noqa: S105 - the demo users' documented password
A4_WIDTH = 794  # CSS pixels: 210 mm at 96 px per inch
# The print stylesheet's @page margin (12 mm each side): what is left for the content.
A4_CONTENT = A4_WIDTH - 2 * round(12 / 25.4 * 96)
PRINT_VIEW = "/c/demo/review/?week=2026-11-16&print=1"

# Every place a table cell's text wraps between two letters or digits (a word cut mid-letter,
# "Namesp|ace"), and every cell whose content overflows it, as "cell text @ index".
MID_WORD_BREAKS = """() => {
  const word = /[\\p{L}\\p{N}]/u;
  const out = [];
  for (const cell of document.querySelectorAll('main td, main th')) {
    if (cell.scrollWidth > cell.clientWidth + 1) out.push('overflows: ' + cell.innerText.slice(0, 40));
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent;
      const range = document.createRange();
      let previous = null;
      for (let i = 0; i < text.length; i++) {
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rects = range.getClientRects();
        if (!rects.length) continue;
        const top = rects[0].top;
        if (previous !== null && top > previous + 1 && word.test(text[i - 1]) && word.test(text[i])) {
          out.push(text.slice(Math.max(0, i - 12), i) + '|' + text.slice(i, i + 12));
        }
        previous = top;
      }
    }
  }
  return out;
}"""


@pytest.fixture
def demo_users(demo_history: Any) -> None:
    call_command("ensure-demo-users")


def measure(page: Any, base_url: str, width: int) -> dict[str, Any]:
    page.set_viewport_size({"width": width, "height": 1123})
    page.emulate_media(media="print")
    response = page.goto(base_url + PRINT_VIEW)
    assert response is not None and response.status == 200
    page.wait_for_load_state("load")
    page.get_by_test_id("review-table").wait_for()
    return {
        "width": page.evaluate("document.documentElement.scrollWidth"),
        "breaks": page.evaluate(MID_WORD_BREAKS),
        "font": page.evaluate("getComputedStyle(document.querySelector('table.review-table td')).fontSize"),
    }


@pytest.mark.parametrize("user", ["admin", "alice"])
def test_print_view_fits_a4_without_breaking_words(live_server, demo_users, user: str) -> None:  # type: ignore[no-untyped-def]
    with chromium_page() as page:
        sign_in(page, live_server.url, user, PASSWORD)
        for width in (A4_WIDTH, A4_CONTENT):
            got = measure(page, live_server.url, width)
            print(f"{user} at {width} px, print media: page {got['width']} px, table font {got['font']}")
            assert got["width"] <= width, got
            assert got["breaks"] == [], got["breaks"]
        # The utilization shows in print too.
        assert page.get_by_test_id("utilization").inner_text().endswith(")")
        pdf = page.pdf(format="A4", print_background=True)
        assert pdf.startswith(b"%PDF")
        assert page.errors == []  # type: ignore[attr-defined]
