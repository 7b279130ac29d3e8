"""The weekly review page's heavy parts built outside plotly's and the template language's per-item
work (``dashboard.charts``' cached figures, ``dashboard.breakdown``): the same output as before."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go
from django.template import Context, Template

from dashboard import charts
from dashboard.breakdown import breakdown_rows
from dashboard.wording import to_the_second

POINTS: list[list[dict[str, Any]]] = [
    [],
    [{"at": "2026-12-01T18:19:48.712428Z", "advertised": 2, "allocated": 1.5}],
    [
        {"at": "2026-12-01T18:00:00Z", "advertised": 8, "allocated": 0},
        {"at": datetime(2026, 12, 1, 19, 0, 1, 250, tzinfo=UTC), "advertised": 8, "allocated": None},
        {"at": "2026-12-01T20:00:00+00:00", "advertised": 7, "allocated": 7},
    ],
]


def _devices_figure_built(series: list[dict[str, Any]], height: int) -> str:
    """The chart as it was built before: a plotly figure validating every point."""
    xs = [to_the_second(p["at"]) for p in series]
    fig = go.Figure(
        [
            go.Scatter(x=xs, y=[p["advertised"] for p in series], name="advertised", line_shape="hv"),
            go.Scatter(x=xs, y=[p["allocated"] for p in series], name="allocated", line_shape="hv"),
        ],
        layout=charts._layout("Devices advertised vs. allocated", "devices"),
    )
    fig.update_layout(height=height)
    return str(fig.to_json())


def _weekly_figure_built(weekly: list[dict[str, Any]]) -> str:
    xs = [w["week_start"][:10] for w in weekly]
    fig = go.Figure(
        [
            go.Bar(x=xs, y=[w["allocated_device_hours"] for w in weekly], name="allocated device-hours"),
            go.Bar(x=xs, y=[w["leaked_device_hours"] for w in weekly], name="leaked device-hours"),
        ],
        layout=charts._layout("Device-hours by week", "device-hours"),
    )
    return str(fig.to_json())


def test_devices_chart_is_the_figure_plotly_builds() -> None:
    for series in POINTS:
        for height in (300, 260):
            assert charts.devices_over_time(series, height) == _devices_figure_built(series, height)
    # The cached figure is not changed by a page's points: the next chart has only its own.
    assert charts.devices_over_time([]) == _devices_figure_built([], 300)


def test_weekly_chart_is_the_figure_plotly_builds() -> None:
    weekly = [
        {"week_start": "2026-11-16T00:00:00Z", "allocated_device_hours": 12.5, "leaked_device_hours": 0},
        {"week_start": "2026-11-23T00:00:00Z", "allocated_device_hours": 3, "leaked_device_hours": 1.25},
    ]
    assert charts.leaked_by_week(weekly) == _weekly_figure_built(weekly)
    assert charts.leaked_by_week([]) == _weekly_figure_built([])


# The breakdown's body as the review template rendered it before.
TEMPLATE_ROWS = Template(
    "{% for row in rows %}<tr>{% for v in row %}<td{% if forloop.counter > 2 and not forloop.last %}"
    ' class="num"{% endif %}>{{ v }}</td>{% endfor %}</tr>{% endfor %}'
)


def test_breakdown_rows_are_the_templates() -> None:
    rows: list[list[Any]] = [
        ["namespace", "team-a", "12.5", "10.0", "+2.5", "0.0", "0.0", "0.0", "12.5", "0.0", ""],
        ["namespace", "<b>&'\"", "1", "2", "-1", "0", "0", "0", "1", "0", "orphaned <x>"],
        ["model", "NVIDIA A100", 3, 2.5, None, True, "", "0", "1", "0", "a & b"],
    ]
    assert str(breakdown_rows(rows)) == TEMPLATE_ROWS.render(Context({"rows": rows}))
    assert str(breakdown_rows([])) == ""
