"""Small inline-SVG charts built in Python: no JavaScript, no network, so a report works offline.

Every label is escaped here (labels may be tenant names); callers pass plain strings and numbers.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpulens.core.states import DeviceState

PALETTE = ("#2f6fb0", "#e08a2c", "#9a9a9a", "#3c9d5d", "#c0392b", "#7d5ba6", "#17becf", "#8c564b")
"""Colours for series without a state colour."""

STATE_COLOURS: dict[str, str] = {
    DeviceState.ALLOCATED_ACTIVE: "#2f6fb0",
    "active": "#2f6fb0",
    DeviceState.ALLOCATED_IDLE: "#e08a2c",
    "idle": "#e08a2c",
    DeviceState.ALLOCATED_UNMEASURED: "#7d5ba6",
    "unmeasured": "#7d5ba6",
    "shared-unallocated": "#17becf",
    DeviceState.UNALLOCATED: "#9a9a9a",
    DeviceState.UNKNOWN: "#d6d6d6",
}
"""One colour per capacity or cost state, shared by the report and the Streamlit app."""


def colour_for(name: str, index: int) -> str:
    """The state's colour, else the ``index``-th palette colour."""
    return STATE_COLOURS.get(name, PALETTE[index % len(PALETTE)])

_FONT = 'font-family="system-ui, sans-serif" font-size="12"'


@dataclass(frozen=True)
class Series:
    """One named series of values (one value per category or per x position)."""

    name: str
    values: tuple[float, ...]
    color: str


def _text(x: float, y: float, text: str, *, anchor: str = "start", extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {_FONT}{(" " + extra) if extra else ""}>'
        f"{html.escape(text)}</text>"
    )


_TITLE_H = 24
"""Room above every chart for its visible title."""


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    label = html.escape(title, quote=True)
    total = height + _TITLE_H
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{total}" '
        f'viewBox="0 0 {width} {total}" role="img" aria-label="{label}">'
        f"<title>{html.escape(title)}</title>"
        + _text(4, 16, title, extra='font-weight="600"')
        + f'<g transform="translate(0,{_TITLE_H})">'
        + "".join(body)
        + "</g></svg>"
    )


def _legend(series: Sequence[Series], x: float, y: float) -> list[str]:
    out: list[str] = []
    for s in series:
        out.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="12" fill="{s.color}"/>')
        out.append(_text(x + 16, y, s.name))
        x += 28 + 7 * len(s.name)
    return out


def format_number(value: float) -> str:
    """Short human form: 1234.5 -> '1.23k', 0.5 -> '0.5'."""
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e3:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}"


LABEL_CHARS = 30
"""Longest row label drawn in full; longer ones are cut with an ellipsis (tooltips keep them whole)."""
_LABEL_MARGIN = 8 + 7 * LABEL_CHARS
"""Room left of the plot for row labels (about 7 px per character at 12 px)."""


def _truncate(label: str, limit: int = LABEL_CHARS) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def stacked_bar_chart(
    title: str, categories: Sequence[str], series: Sequence[Series], *, unit: str = "", width: int = 820
) -> str:
    """Horizontal bars, one per category, each split into the series' values (stacked left to right).

    A single series gives a plain bar chart.
    """
    for s in series:
        if len(s.values) != len(categories):
            raise ValueError(f"series {s.name!r} has {len(s.values)} values for {len(categories)} categories")
    row_h, top, left, right = 22, 36, _LABEL_MARGIN, 80
    height = top + row_h * max(len(categories), 1) + 20
    totals = [sum(max(s.values[i], 0.0) for s in series) for i in range(len(categories))]
    scale_max = max(totals, default=0.0) or 1.0
    plot_w = width - left - right
    body = _legend(series, left, 18) if len(series) > 1 else []
    if not categories:
        body.append(_text(left, top + 14, "no data"))
    for i, category in enumerate(categories):
        y = top + i * row_h
        body.append(_text(left - 6, y + 14, _truncate(category), anchor="end"))
        x = float(left)
        for s in series:
            w = max(s.values[i], 0.0) / scale_max * plot_w
            if w > 0:
                tip = html.escape(f"{category} · {s.name}: {format_number(s.values[i])} {unit}".strip())
                body.append(
                    f'<rect class="bar" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                    f'fill="{s.color}"><title>{tip}</title></rect>'
                )
            x += w
        body.append(_text(x + 4, y + 14, f"{format_number(totals[i])} {unit}".strip()))
    return _svg(width, height, title, body)


def heat_map(
    title: str,
    rows: Sequence[str],
    columns: Sequence[str],
    values: Sequence[Sequence[float | None]],
    *,
    cell_text: Sequence[Sequence[str]] | None = None,
    width: int = 820,
) -> str:
    """A grid of cells shaded by value in 0..1 (white to red); ``None`` cells are grey.

    ``cell_text`` (rows x columns) replaces the printed value of each cell, e.g. with points.
    """
    if len(values) != len(rows) or any(len(r) != len(columns) for r in values):
        raise ValueError("heat map values must be rows x columns")
    top, left, cell_h = 76, _LABEL_MARGIN, 22
    cell_w = (width - left - 70) / max(len(columns), 1)
    height = top + cell_h * max(len(rows), 1) + 10
    body: list[str] = []
    for j, column in enumerate(columns):
        cx = left + j * cell_w + cell_w / 2
        body.append(
            _text(cx, top - 8, _truncate(column, 22), extra=f'transform="rotate(-30 {cx:.1f} {top - 8})"')
        )
    if not rows:
        body.append(_text(left, top + 14, "no data"))
    for i, row in enumerate(rows):
        y = top + i * cell_h
        body.append(_text(left - 6, y + 15, _truncate(row), anchor="end"))
        for j, value in enumerate(values[i]):
            x = left + j * cell_w
            if value is None or math.isnan(value):
                fill, shown = "#eeeeee", "n/a"
            else:
                v = min(max(value, 0.0), 1.0)
                fill, shown = _heat_colour(v), f"{value:.2f}"
            if cell_text is not None:
                shown = cell_text[i][j]
            tip = html.escape(f"{row} · {columns[j]}: {shown}")
            body.append(
                f'<rect class="cell" x="{x:.1f}" y="{y}" width="{cell_w - 1:.1f}" height="{cell_h - 1}" '
                f'fill="{fill}"><title>{tip}</title></rect>'
            )
            if cell_w >= 34:
                body.append(_text(x + cell_w / 2, y + 15, shown, anchor="middle"))
    return _svg(width, height, title, body)


def _heat_colour(v: float) -> str:
    """White (0) through amber to red (1)."""
    r = 255
    g = round(255 - 175 * v)
    b = round(255 - 225 * min(1.0, v * 1.5))
    return f"#{r:02x}{g:02x}{max(b, 30):02x}"


@dataclass(frozen=True)
class _Plot:
    """Geometry of a chart over an x axis: the plot rectangle and the value ranges it maps."""

    left: float
    top: float
    width: float
    height: float
    x0: float
    x_span: float
    y_max: float

    def px(self, x: float) -> float:
        return self.left + (x - self.x0) / self.x_span * self.width

    def py(self, v: float) -> float:
        return self.top + self.height - min(v, self.y_max) / self.y_max * self.height


_X_MARGINS = (60, 20, 46, 30)
"""left, right, top, bottom around the plot of an x-axis chart."""


def _check_lengths(xs: Sequence[float], series: Sequence[Series], x_labels: Sequence[str]) -> None:
    for s in series:
        if len(s.values) != len(xs):
            raise ValueError(f"series {s.name!r} has {len(s.values)} values for {len(xs)} x positions")
    if x_labels and len(x_labels) != len(xs):
        raise ValueError("x_labels must match xs")


def _plot(xs: Sequence[float], width: int, height: int, y_max: float) -> _Plot:
    left, right, top, bottom = _X_MARGINS
    return _Plot(left, top, width - left - right, height - top - bottom, min(xs), (max(xs) - min(xs)) or 1.0,
                 y_max or 1.0)


def _axes(p: _Plot, xs: Sequence[float], x_labels: Sequence[str], unit: str) -> list[str]:
    """Both axis lines, three y ticks, the unit, and first / middle / last x labels."""
    bottom = p.top + p.height
    out = [
        f'<line x1="{p.left}" y1="{bottom}" x2="{p.left + p.width}" y2="{bottom}" stroke="#444"/>',
        f'<line x1="{p.left}" y1="{p.top}" x2="{p.left}" y2="{bottom}" stroke="#444"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        out.append(_text(p.left - 4, p.py(p.y_max * frac) + 4, format_number(p.y_max * frac), anchor="end"))
    if unit:
        out.append(_text(4, p.top - 8, unit))
    if x_labels:
        last = len(xs) - 1
        for i in sorted({0, len(xs) // 2, last}):
            anchor = "start" if i == 0 else ("end" if i == last else "middle")
            out.append(_text(p.px(xs[i]), bottom + 18, x_labels[i], anchor=anchor))
    return out


def stacked_area_chart(
    title: str, xs: Sequence[float], series: Sequence[Series], *, x_labels: Sequence[str] = (), unit: str = "",
    width: int = 820, height: int = 260,
) -> str:
    """Series stacked over an x axis (e.g. time): the band of each series is filled in its colour.

    ``x_labels`` (optional, same length as ``xs``) label the first, middle and last x positions.
    """
    _check_lengths(xs, series, x_labels)
    body = _legend(series, _X_MARGINS[0], 18)
    if len(xs) < 2:
        body.append(_text(_X_MARGINS[0], _X_MARGINS[2] + 20, "not enough data"))
        return _svg(width, height, title, body)
    tops = [sum(max(s.values[i], 0.0) for s in series) for i in range(len(xs))]
    p = _plot(xs, width, height, max(tops))
    base = [0.0] * len(xs)
    for s in series:
        upper = [base[i] + max(s.values[i], 0.0) for i in range(len(xs))]
        points = [f"{p.px(xs[i]):.1f},{p.py(upper[i]):.1f}" for i in range(len(xs))]
        points += [f"{p.px(xs[i]):.1f},{p.py(base[i]):.1f}" for i in reversed(range(len(xs)))]
        body.append(
            f'<polygon class="area" points="{" ".join(points)}" fill="{s.color}" fill-opacity="0.85">'
            f"<title>{html.escape(s.name)}</title></polygon>"
        )
        base = upper
    return _svg(width, height, title, body + _axes(p, xs, x_labels, unit))


def line_chart(
    title: str, xs: Sequence[float], series: Sequence[Series], *, x_labels: Sequence[str] = (), unit: str = "",
    width: int = 820, height: int = 220, y_max: float | None = None,
) -> str:
    """Unstacked lines over an x axis (evidence such as activity or memory over time); NaN = no point."""
    _check_lengths(xs, series, x_labels)
    body = _legend(series, _X_MARGINS[0], 18)
    finite = [v for s in series for v in s.values if not math.isnan(v)]
    if len(xs) < 2 or not finite:
        body.append(_text(_X_MARGINS[0], _X_MARGINS[2] + 20, "not enough data"))
        return _svg(width, height, title, body)
    p = _plot(xs, width, height, y_max if y_max is not None else max(finite) * 1.1)
    for s in series:
        points = [f"{p.px(x):.1f},{p.py(v):.1f}" for x, v in zip(xs, s.values, strict=True) if not math.isnan(v)]
        body.append(
            f'<polyline class="line" points="{" ".join(points)}" fill="none" stroke="{s.color}" '
            f'stroke-width="2"><title>{html.escape(s.name)}</title></polyline>'
        )
    return _svg(width, height, title, body + _axes(p, xs, x_labels, unit))
