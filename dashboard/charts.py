"""Plotly figures for the report pages, as JSON the page's script renders (no inline script)."""

from __future__ import annotations

from functools import cache
from typing import Any

import plotly.graph_objects as go
from plotly.io.json import to_json_plotly

from dashboard.wording import to_the_second


def _layout(title: str, yaxis: str) -> dict[str, Any]:
    return {
        # The title on the left and the legend on the right, both above the plot: a legend below it
        # (plotly's default for a horizontal one) covers the date axis' two-line labels.
        "title": {
            "text": title,
            "x": 0,
            "xanchor": "left",
            "xref": "paper",
            "y": 1,
            "yanchor": "bottom",
            "yref": "paper",
            "pad": {"b": 22},
        },
        "yaxis": {"title": {"text": yaxis}, "rangemode": "tozero"},
        "margin": {"l": 50, "r": 20, "t": 64, "b": 50},
        "height": 300,
        "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1, "yanchor": "bottom"},
    }


def devices_over_time(series: list[dict[str, Any]], height: int = 300) -> str:
    xs = [to_the_second(p["at"]) for p in series]
    return _filled(
        _devices_figure(height), [(xs, [p["advertised"] for p in series]), (xs, [p["allocated"] for p in series])]
    )


def leaked_by_week(weekly: list[dict[str, Any]]) -> str:
    xs = [w["week_start"][:10] for w in weekly]
    return _filled(
        _weekly_figure(),
        [(xs, [w["allocated_device_hours"] for w in weekly]), (xs, [w["leaked_device_hours"] for w in weekly])],
    )


# A week's devices series is one point per change of the cluster: ~8,000 at 5,000 nodes. Plotly
# validates and copies every point as a figure is built (~90 ms at that size), so each chart's figure
# is built once without points, and a page's points go into a copy of its dict, encoded as plotly
# encodes a figure (the same JSON as a figure built with them: the points are plain lists).


@cache
def _devices_figure(height: int) -> dict[str, Any]:
    fig = go.Figure(
        [
            go.Scatter(x=[], y=[], name="advertised", line_shape="hv"),
            go.Scatter(x=[], y=[], name="allocated", line_shape="hv"),
        ],
        layout=_layout("Devices advertised vs. allocated", "devices"),
    )
    fig.update_layout(height=height)
    return fig.to_dict()


@cache
def _weekly_figure() -> dict[str, Any]:
    fig = go.Figure(
        [
            go.Bar(x=[], y=[], name="allocated device-hours"),
            go.Bar(x=[], y=[], name="leaked device-hours"),
        ],
        layout=_layout("Device-hours by week", "device-hours"),
    )
    return fig.to_dict()


def _filled(figure: dict[str, Any], points: list[tuple[list[Any], list[Any]]]) -> str:
    """``figure`` (cached, never changed) with each trace's ``x`` and ``y`` set, as JSON."""
    data = [{**trace, "x": xs, "y": ys} for trace, (xs, ys) in zip(figure["data"], points, strict=True)]
    return str(to_json_plotly({**figure, "data": data}))


LANES = ["pod", "inventory", "allocation", "preparation", "runtime"]
# One colour per lane, none of them red: plotly's default palette gives the second trace red, which read
# as a failed allocation on every healthy Pod. The hues follow the timeline table's lane badges.
LANE_COLOURS = {
    "pod": "#667085",
    "inventory": "#2f5bd3",
    "allocation": "#6941c6",
    "preparation": "#b54708",
    "runtime": "#16794c",
}


def claim_timeline(entries: list[dict[str, Any]]) -> str:
    """Transitions on a time axis, one lane per boundary, hover text naming what happened and which timestamp."""
    fig = go.Figure(layout=_layout("Timeline", ""))
    for lane in LANES:
        points = [e for e in entries if (e.get("boundary") or "pod") == lane and e.get("at")]
        if points:
            fig.add_trace(
                go.Scatter(
                    x=[to_the_second(e["at"]) for e in points],
                    y=[lane] * len(points),
                    mode="markers",
                    marker={"size": 11, "color": LANE_COLOURS[lane]},
                    name=lane,
                    text=[f"{to_the_second(e.get('what', ''))} ({e.get('source', '')})" for e in points],
                    hoverinfo="text+x",
                )
            )
    fig.update_layout(
        height=220,
        showlegend=False,
        margin={"t": 36},
        title={"pad": {"b": 8}},
        yaxis={"categoryorder": "array", "categoryarray": LANES[::-1]},
    )
    return fig.to_json()
