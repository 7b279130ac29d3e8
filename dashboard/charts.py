"""Plotly figures for the report pages, as JSON the page's script renders (no inline script)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

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
    fig = go.Figure(
        [
            go.Scatter(x=xs, y=[p["advertised"] for p in series], name="advertised", line_shape="hv"),
            go.Scatter(x=xs, y=[p["allocated"] for p in series], name="allocated", line_shape="hv"),
        ],
        layout=_layout("Devices advertised vs. allocated", "devices"),
    )
    fig.update_layout(height=height)
    return fig.to_json()


def leaked_by_week(weekly: list[dict[str, Any]]) -> str:
    xs = [w["week_start"][:10] for w in weekly]
    fig = go.Figure(
        [
            go.Bar(x=xs, y=[w["allocated_device_hours"] for w in weekly], name="allocated device-hours"),
            go.Bar(x=xs, y=[w["leaked_device_hours"] for w in weekly], name="leaked device-hours"),
        ],
        layout=_layout("Device-hours by week", "device-hours"),
    )
    return fig.to_json()


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
