"""HTML building blocks for the report: every value passes through ``html.escape`` here."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl


def esc(value: object) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt_number(value: Any, digits: int = 2) -> str:
    """A number with thousands separators; None/NaN as an en dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def fmt_usd(value: Any) -> str:
    """Dollars with cents."""
    return "–" if value is None else f"${float(value):,.2f}"


def fmt_percent(value: Any) -> str:
    """A ratio 0..1 as a percentage."""
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.0%}"


def fmt_time(value: Any) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM UTC``."""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M UTC")
    return "–" if value is None else str(value)


@dataclass(frozen=True)
class Col:
    """One column of an HTML table: source column, header and how to format a value."""

    name: str
    header: str
    fmt: Callable[[Any], str] = fmt_number
    numeric: bool = True


def table(frame: pl.DataFrame, columns: Sequence[Col], *, css_class: str = "data", limit: int | None = None) -> str:
    """An HTML table of ``frame``'s rows (escaped), optionally only the first ``limit`` rows."""
    rows = frame.head(limit) if limit is not None else frame
    head = "".join(f'<th class="{"num" if c.numeric else "txt"}">{esc(c.header)}</th>' for c in columns)
    body = []
    for row in rows.iter_rows(named=True):
        cells = "".join(
            f'<td class="{"num" if c.numeric else "txt"}">{esc(c.fmt(row.get(c.name)))}</td>' for c in columns
        )
        body.append(f"<tr>{cells}</tr>")
    more = ""
    if limit is not None and frame.height > limit:
        more = f'<p class="note">First {limit} of {frame.height} rows.</p>'
    return f'<table class="{esc(css_class)}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>{more}'


def text(value: Any) -> str:
    """Format a text cell (no number formatting)."""
    return "" if value is None else str(value)


def section(anchor: str, title: str, body: str, *, intro: str = "") -> str:
    """A titled report section; ``body`` is already-built HTML, ``intro`` plain text (escaped)."""
    lead = f'<p class="intro">{esc(intro)}</p>' if intro else ""
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{lead}{body}</section>'


def notice(message: str) -> str:
    """A highlighted plain-text message (e.g. which analysis to run first)."""
    return f'<p class="notice">{esc(message)}</p>'


def cards(items: Sequence[tuple[str, str]]) -> str:
    """Headline figures: (label, formatted value) pairs."""
    inner = "".join(
        f'<div class="card"><div class="value">{esc(value)}</div><div class="label">{esc(label)}</div></div>'
        for label, value in items
    )
    return f'<div class="cards">{inner}</div>'


STYLE = """
body { font-family: system-ui, sans-serif; margin: 0; color: #1d2430; background: #f6f7f9; }
header { background: #1d2d44; color: #fff; padding: 18px 32px; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
header .meta { font-size: 13px; opacity: .85; }
header .run-note { font-size: 13px; margin-top: 6px; padding: 4px 8px; background: #e0a800; color: #1d2430;
                   border-radius: 4px; display: inline-block; }
nav { padding: 8px 32px; background: #e8ebf0; font-size: 14px; }
nav a { margin-right: 16px; color: #1d2d44; }
main { padding: 8px 32px 40px; max-width: 1200px; }
section { background: #fff; border-radius: 6px; padding: 12px 20px 18px; margin: 16px 0;
          box-shadow: 0 1px 2px rgba(0,0,0,.08); }
h2 { font-size: 18px; margin: 6px 0 10px; }
.intro { color: #4a5566; font-size: 14px; margin-top: 0; }
.notice { background: #fff6db; border-left: 4px solid #e0a800; padding: 8px 12px; }
.note { font-size: 12px; color: #666; }
table.data { border-collapse: collapse; font-size: 13px; margin-top: 10px; width: 100%; }
table.data th, table.data td { border-bottom: 1px solid #e3e6eb; padding: 4px 8px; }
table.data th { background: #f0f2f5; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { background: #fff; border-radius: 6px; padding: 10px 16px; min-width: 150px;
        box-shadow: 0 1px 2px rgba(0,0,0,.08); }
.card .value { font-size: 22px; font-weight: 600; }
.card .label { font-size: 12px; color: #4a5566; }
svg.chart { max-width: 100%; height: auto; display: block; margin: 6px 0; }
ul.files li { margin: 4px 0; }
"""


def page(title: str, meta: str, run: str, run_note: str, nav: Sequence[tuple[str, str]], body: str) -> str:
    """The whole HTML document: inline CSS, no scripts, no external resources. ``run`` names the analysis
    run shown; ``run_note`` (if any) says which of its parameters are not the defaults."""
    links = "".join(f'<a href="#{esc(anchor)}">{esc(label)}</a>' for anchor, label in nav)
    note = f'<div class="run-note" id="run-note">{esc(run_note)}</div>' if run_note else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:\">"
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        f'<header><h1>{esc(title)}</h1><div class="meta">{esc(meta)}</div>'
        f'<div class="meta run" id="run">{esc(run)}</div>{note}</header>'
        f"<nav>{links}</nav><main>{body}</main></body></html>\n"
    )
