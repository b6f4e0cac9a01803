"""Vectorized parser of the Prometheus text exposition format into a long polars frame.

Every sample line becomes one row: ``line`` (1-based line number), ``metric``, ``value`` (float),
``ts_ms`` (the sample's own timestamp in milliseconds, or null) and one string column per label name.
The work is done by polars' regex kernels over all lines at once, not by a Python loop per sample;
only label values that contain escapes (``\\\\``, ``\\"``, ``\\n``) are unescaped in Python.
A malformed line raises :class:`ExpositionError` naming the target and the line.
"""

from __future__ import annotations

import polars as pl

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\]|\\.)*"'
_LABELS = rf"\{{[ \t]*(?:{_LABEL}[ \t]*(?:,[ \t]*{_LABEL}[ \t]*)*,?[ \t]*)?\}}"
_SAMPLE = rf"^({_NAME})[ \t]*({_LABELS})?[ \t]+([^ \t]+)(?:[ \t]+(-?[0-9]+))?[ \t]*$"
_LABEL_PARTS = r'^([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"(.*)"$'
_VALID_FLOAT = r"^(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN)$"

LONG_SCHEMA = {"line": pl.Int64, "metric": pl.Utf8, "value": pl.Float64, "ts_ms": pl.Int64}


class ExpositionError(ValueError):
    """A line that is not valid Prometheus exposition text."""

    def __init__(self, target: str, line: int, message: str) -> None:
        super().__init__(f"{target}: line {line}: {message}")
        self.target = target
        self.line = line


def unescape_label_value(raw: str) -> str:
    """Undo the exposition format's label-value escapes (``\\\\``, ``\\"``, ``\\n``)."""
    if "\\" not in raw:
        return raw
    out = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def escape_label_value(value: str) -> str:
    """Escape a label value for the exposition format (inverse of :func:`unescape_label_value`)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def parse_exposition(text: str, target: str = "<text>") -> pl.DataFrame:
    """Parse exposition ``text`` (from ``target``, used in errors) into the long sample frame."""
    lines = pl.DataFrame({"raw": text.split("\n")}).with_row_index("line", offset=1)
    lines = lines.with_columns(pl.col("line").cast(pl.Int64), pl.col("raw").str.strip_chars())
    samples = lines.filter((pl.col("raw") != "") & ~pl.col("raw").str.starts_with("#"))
    if samples.height == 0:
        return pl.DataFrame(schema=LONG_SCHEMA)
    parts = samples.with_columns(m=pl.col("raw").str.extract_groups(_SAMPLE)).unnest("m")
    parts = parts.rename({"1": "metric", "2": "labels", "3": "value_text", "4": "ts_text"})
    bad = parts.filter(pl.col("metric").is_null())
    if bad.height:
        row = bad.row(0, named=True)
        raise ExpositionError(target, row["line"], f"not a valid sample line: {row['raw'][:200]!r}")
    bad_value = parts.filter(~pl.col("value_text").str.contains(_VALID_FLOAT))
    if bad_value.height:
        row = bad_value.row(0, named=True)
        raise ExpositionError(target, row["line"], f"invalid sample value {row['value_text'][:50]!r}")
    parts = parts.with_columns(
        value=pl.col("value_text").cast(pl.Float64, strict=False),
        ts_ms=pl.col("ts_text").cast(pl.Int64, strict=False),
    )
    base = parts.select("line", "metric", "value", "ts_ms")
    labels = (
        parts.select("line", pairs=pl.col("labels").str.extract_all(_LABEL))
        .explode("pairs")
        .drop_nulls("pairs")
    )
    if labels.height == 0:
        return base
    labels = labels.with_columns(kv=pl.col("pairs").str.extract_groups(_LABEL_PARTS)).unnest("kv")
    labels = labels.rename({"1": "label", "2": "raw_value"})
    escaped = pl.col("raw_value").str.contains("\\", literal=True)
    if labels.select(escaped.any()).item():
        labels = labels.with_columns(
            pl.when(escaped)
            .then(pl.col("raw_value").map_elements(unescape_label_value, return_dtype=pl.Utf8))
            .otherwise(pl.col("raw_value"))
            .alias("raw_value")
        )
    dup = labels.group_by("line", "label").len().filter(pl.col("len") > 1)
    if dup.height:
        row = dup.sort("line").row(0, named=True)
        raise ExpositionError(target, row["line"], f"label {row['label']!r} appears twice")
    wide = labels.pivot(on="label", index="line", values="raw_value", aggregate_function=None)
    reserved = set(LONG_SCHEMA) & (set(wide.columns) - {"line"})
    if reserved:
        wide = wide.rename({c: f"label_{c}" for c in reserved})
    return base.join(wide, on="line", how="left")
