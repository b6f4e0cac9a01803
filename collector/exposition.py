"""Vectorized parser of the Prometheus text exposition format into a long polars frame.

Every sample line becomes one row: ``line`` (1-based line number), ``metric``, ``value`` (float),
``ts_ms`` (the sample's own timestamp in milliseconds, or null) and one string column per label name.
All lines are handled at once by polars (no Python loop per sample): one capture-free regex pass
validates every line, literal splits cut out name, value and timestamp and the label pairs of plain
blocks (``{a="x",b="y"}``), one regex pass finds the pairs of other blocks (blanks, escapes), and a pivot
makes the label columns. Only label values that contain escapes are unescaped in Python.
A malformed line raises :class:`ExpositionError` naming the target and the line.
"""

from __future__ import annotations

import re

import polars as pl

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\]|\\.)*"'
_LABELS = rf"\{{[ \t]*(?:{_LABEL}[ \t]*(?:,[ \t]*{_LABEL}[ \t]*)*,?[ \t]*)?\}}"
_SIMPLE_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_SIMPLE_LINE = rf"^{_NAME}\{{{_SIMPLE_PAIR}(?:,{_SIMPLE_PAIR})*\}}[ \t]"
_SAMPLE = rf"^({_NAME})[ \t]*({_LABELS})?[ \t]+([^ \t]+)(?:[ \t]+(-?[0-9]+))?[ \t]*$"
_FLOAT = r"(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN)"
_VALID_FLOAT = rf"^{_FLOAT}$"
_VALID_VALUE_IN_LINE = rf"[ \t]{_FLOAT}(?:[ \t]+-?[0-9]+)?[ \t]*$"

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


def _first_error(parts: pl.DataFrame, target: str) -> None:
    """Raise for the first invalid line of ``parts`` (lines that failed the full-line check)."""
    row = parts.row(0, named=True)
    match = re.match(_SAMPLE, row["raw"])
    if match and not re.match(_VALID_FLOAT, match.group(3)):
        raise ExpositionError(target, row["line"], f"invalid sample value {match.group(3)[:50]!r}")
    raise ExpositionError(target, row["line"], f"not a valid sample line: {row['raw'][:200]!r}")


def _simple_labels(parts: pl.DataFrame) -> pl.DataFrame:
    """Label pairs of lines whose block is ``{a="x",b="y"}`` with no escape nor blank: literal splits only."""
    block = pl.col("raw").str.splitn("{", 2).struct.field("field_1").str.split('"}').list.first()
    pairs = parts.select("line", pair=block.str.split('",')).explode("pair")
    kv = pl.col("pair").str.splitn('="', 2)
    return pairs.select("line", label=kv.struct.field("field_0"), raw_value=kv.struct.field("field_1"))


def _general_labels(parts: pl.DataFrame) -> pl.DataFrame:
    """Label pairs of any valid block: one regex pass, then the first '=' splits name and quoted value."""
    pairs = parts.select("line", pair=pl.col("raw").str.extract_all(_LABEL)).explode("pair").drop_nulls("pair")
    kv = pl.col("pair").str.splitn("=", 2)
    quoted = kv.struct.field("field_1").str.strip_chars(" \t")
    return pairs.select(
        "line",
        label=kv.struct.field("field_0").str.strip_chars(" \t"),
        raw_value=quoted.str.slice(1, quoted.str.len_chars() - 2),
    )


def parse_exposition(text: str, target: str = "<text>") -> pl.DataFrame:
    """Parse exposition ``text`` (from ``target``, used in errors) into the long sample frame."""
    lines = pl.DataFrame({"raw": text.split("\n")}).with_row_index("line", offset=1)
    lines = lines.with_columns(pl.col("line").cast(pl.Int64), pl.col("raw").str.strip_chars())
    samples = lines.filter((pl.col("raw") != "") & ~pl.col("raw").str.starts_with("#"))
    if samples.height == 0:
        return pl.DataFrame(schema=LONG_SCHEMA)
    # Validation by a capture-free match (a fast DFA); the pieces are then cut out with literal splits.
    valid = pl.col("raw").str.contains(_SAMPLE) & pl.col("raw").str.contains(_VALID_VALUE_IN_LINE)
    bad = samples.filter(~valid)
    if bad.height:
        _first_error(bad, target)
    has_block = pl.col("raw").str.contains("{", literal=True)
    tail = pl.when(has_block).then(pl.col("raw").str.split("}").list.last()).otherwise(pl.col("raw"))
    words = tail.str.strip_chars().str.replace_all(r"[ \t]+", " ")
    with_block = words.str.split_exact(" ", 1)
    bare = words.str.split_exact(" ", 2)
    parts = samples.select(
        "line",
        metric=pl.when(has_block)
        .then(pl.col("raw").str.splitn("{", 2).struct.field("field_0").str.strip_chars())
        .otherwise(bare.struct.field("field_0")),
        value=pl.when(has_block).then(with_block.struct.field("field_0")).otherwise(bare.struct.field("field_1")),
        ts_ms=pl.when(has_block).then(with_block.struct.field("field_1")).otherwise(bare.struct.field("field_2")),
        simple=pl.col("raw").str.contains(_SIMPLE_LINE),
        raw=pl.when(has_block).then(pl.col("raw")),
    ).with_columns(
        pl.col("value").cast(pl.Float64, strict=False),
        pl.col("ts_ms").cast(pl.Int64, strict=False),
    )
    base = parts.select("line", "metric", "value", "ts_ms")
    labels = pl.concat([_simple_labels(parts.filter(pl.col("simple"))),
                        _general_labels(parts.filter(~pl.col("simple") & pl.col("raw").is_not_null()))])
    if labels.height == 0:
        return base
    name = pl.col("label")
    # A label named like one of our own columns (``line``, ``value``, ...) becomes ``label_<name>``.
    labels = labels.with_columns(
        label=pl.when(name.is_in(list(LONG_SCHEMA))).then(pl.lit("label_") + name).otherwise(name)
    )
    escaped = pl.col("raw_value").str.contains("\\", literal=True)
    if labels.select(escaped.any()).item():
        labels = labels.with_columns(
            pl.when(escaped)
            .then(pl.col("raw_value").map_elements(unescape_label_value, return_dtype=pl.Utf8))
            .otherwise(pl.col("raw_value"))
            .alias("raw_value")
        )
    try:
        wide = labels.pivot(on="label", index="line", values="raw_value", aggregate_function=None)
    except pl.exceptions.ComputeError:
        dup = labels.group_by("line", "label").len().filter(pl.col("len") > 1).sort("line")
        row = dup.row(0, named=True)
        raise ExpositionError(target, row["line"], f"label {row['label']!r} appears twice") from None
    return base.join(wide, on="line", how="left")
