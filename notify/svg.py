"""Grouped horizontal bar charts as inline SVG: e-mail clients run no script and fetch nothing."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

ROW = 18
LABEL_WIDTH = 170
BAR_WIDTH = 330
VALUE_WIDTH = 70
COLORS = ("#4c78a8", "#e45756", "#54a24b")


def _number(value: float) -> str:
    return f"{value:,.1f}"


def bar_chart(title: str, series: Sequence[str], rows: Sequence[tuple[str, Sequence[float]]]) -> str:
    """One group of bars per row (label, one value per series), scaled to the largest value."""
    top = max((v for _, values in rows for v in values), default=0.0) or 1.0
    group = ROW * len(series) + 8
    legend_y = 22
    y0 = legend_y + 14
    width = LABEL_WIDTH + BAR_WIDTH + VALUE_WIDTH
    height = y0 + group * max(len(rows), 1) + 4
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" '
        'style="font-family:sans-serif;font-size:12px">',
        f'<text x="0" y="14" font-weight="bold">{escape(title)}</text>',
    ]
    x = LABEL_WIDTH
    for i, name in enumerate(series):
        color = COLORS[i % len(COLORS)]
        parts.append(f'<rect x="{x}" y="{legend_y - 9}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 14}" y="{legend_y}">{escape(name)}</text>')
        x += 14 + 8 * len(name) + 16
    if not rows:
        parts.append(f'<text x="0" y="{y0 + 12}" fill="#666">nothing to show</text>')
    for r, (label, values) in enumerate(rows):
        y = y0 + r * group
        parts.append(f'<text x="0" y="{y + ROW - 5}">{escape(label[:28])}</text>')
        for i, value in enumerate(values):
            length = max(value, 0.0) / top * BAR_WIDTH
            by = y + i * ROW
            parts.append(
                f'<rect x="{LABEL_WIDTH}" y="{by + 2}" width="{length:.1f}" height="{ROW - 4}" '
                f'fill="{COLORS[i % len(COLORS)]}"/>'
            )
            parts.append(f'<text x="{LABEL_WIDTH + length + 4:.1f}" y="{by + ROW - 5}">{_number(value)}</text>')
    parts.append("</svg>")
    return "".join(parts)
