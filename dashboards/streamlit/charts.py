"""Altair charts of the app. Tenant names are chart data (rendered as text by Vega), never HTML."""

from __future__ import annotations

import altair as alt
import polars as pl

from dashboards.report.svg import colour_for


def _scale(states: list[str]) -> alt.Scale:
    return alt.Scale(domain=states, range=[colour_for(s, i) for i, s in enumerate(states)])


def capacity_area(frame: pl.DataFrame) -> alt.Chart:
    """Stacked area of GPU-equivalents per state over time (``capacity_states`` frame)."""
    states = [c for c in frame.columns if c != "bucket" and frame[c].sum() > 0]
    long = frame.unpivot(index="bucket", on=states, variable_name="state", value_name="ge")
    return (
        alt.Chart(long)
        .mark_area()
        .encode(
            x=alt.X("bucket:T", title="time (UTC)"),
            y=alt.Y("ge:Q", stack=True, title="GPU-equivalents"),
            color=alt.Color("state:N", scale=_scale(states), sort=states),
            order=alt.Order("state_order:Q"),
            tooltip=["bucket:T", "state:N", alt.Tooltip("ge:Q", format=".2f")],
        )
        .transform_calculate(state_order=f"indexof({states!r}, datum.state)")
    )


def stacked_bars(frame: pl.DataFrame, category: str, state: str, value: str, title: str) -> alt.Chart:
    """Horizontal bars per ``category``, stacked by ``state`` (e.g. cost per account and cost state)."""
    states = sorted(set(frame[state].to_list()))
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            y=alt.Y(f"{category}:N", sort="-x", title=None),
            x=alt.X(f"sum({value}):Q", title=title),
            color=alt.Color(f"{state}:N", scale=_scale(states)),
            tooltip=[f"{category}:N", f"{state}:N", alt.Tooltip(f"{value}:Q", format=",.2f")],
        )
    )


def risk_heat_map(terms: pl.DataFrame) -> alt.LayerChart:
    """Subjects x terms, shaded by points and labelled with them; the reason is in the tooltip."""
    base = alt.Chart(terms).encode(
        x=alt.X("term:N", title="term", axis=alt.Axis(labelAngle=-30, labelLimit=180, labelOverlap=False)),
        y=alt.Y("subject:N", sort=alt.EncodingSortField("score", order="descending"), title=None,
                axis=alt.Axis(labelLimit=260)),
    )
    cells = base.mark_rect(stroke="white").encode(
        color=alt.Color("points:Q", scale=alt.Scale(scheme="orangered", domainMin=0), title="points"),
        tooltip=["subject:N", "term:N", "points:Q", "reason:N", "score:Q"],
    )
    labels = base.mark_text(fontSize=11).encode(text=alt.Text("points:Q", format=".0f"))
    return (cells + labels).properties(height=alt.Step(26))


def evidence_lines(frame: pl.DataFrame) -> alt.Chart:
    """Held vs used GPU-equivalents over time for one workload (``workload_series`` frame)."""
    named = frame.rename({"held_ge": "held", "compute_ge": "used (activity x GE)"})
    long = named.unpivot(index="bucket", on=["held", "used (activity x GE)"], variable_name="series", value_name="ge")
    return (
        alt.Chart(long)
        .mark_line()
        .encode(
            x=alt.X("bucket:T", title="time (UTC)"),
            y=alt.Y("ge:Q", title="GPU-equivalents"),
            color=alt.Color("series:N", title=None),
            tooltip=["bucket:T", "series:N", alt.Tooltip("ge:Q", format=".3f")],
        )
    )


def memory_line(frame: pl.DataFrame) -> alt.Chart:
    """Memory in use (GiB) over time for one workload."""
    data = frame.with_columns((pl.col("memory_bytes") / 2**30).alias("memory_gib"))
    return (
        alt.Chart(data)
        .mark_line(color="#3c9d5d")
        .encode(
            x=alt.X("bucket:T", title="time (UTC)"),
            y=alt.Y("memory_gib:Q", title="memory in use (GiB)"),
            tooltip=["bucket:T", alt.Tooltip("memory_gib:Q", format=".2f")],
        )
    )
