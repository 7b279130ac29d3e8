"""The weekly review's breakdown table body as HTML, one row per namespace and model of the week.

At 5,000 nodes the breakdown is ~500 rows of 11 cells: the template language spent ~70 ms on them
(a variable lookup and an ``if`` per cell), most of the page. Each cell is rendered here the way the
template renders ``{{ v }}`` (``render_value_in_context``: localized, escaped), so the markup is the
same as the template's loop made.
"""

from __future__ import annotations

import html
from typing import Any

from django.template import Context
from django.template.base import render_value_in_context
from django.utils.safestring import SafeString, mark_safe


def breakdown_rows(rows: list[list[Any]]) -> SafeString:
    """``<tr>`` per row; the cells after the scope and name, but for the last (the reason), are numbers."""
    context = Context()  # the defaults a page renders with: autoescape, the settings' localization

    def cell(value: Any) -> str:
        # The cells are text (the CSV's): a plain string is only escaped, as the template would (Django's
        # ``escape`` is ``html.escape``, behind a lazy-string wrapper that cost more than the escaping).
        return html.escape(value) if type(value) is str else render_value_in_context(value, context)

    markup = []
    for row in rows:
        last = len(row) - 1
        cells = "".join(
            f'<td class="num">{cell(v)}</td>' if 1 < i < last else f"<td>{cell(v)}</td>" for i, v in enumerate(row)
        )
        markup.append(f"<tr>{cells}</tr>")
    # Every value was escaped (html.escape, or render_value_in_context which escapes).
    return mark_safe("".join(markup))  # noqa: S308
