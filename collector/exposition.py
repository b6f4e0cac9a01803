"""Vectorized parser of the Prometheus text exposition format into a long polars frame.

Every sample line becomes one row: ``line`` (1-based line number), ``metric``, ``value`` (float),
``ts_ms`` (the sample's own timestamp in milliseconds, or null) and one string column per label name.
All lines are handled at once by Arrow and polars (no Python loop per sample).

The common line, ``name{a="x",b="y"} value [ts]`` with no escape, is cut by ONE literal split on
``"``: label names and values alternate in the pieces, so each label column is a gather at a position
that is the same for every line of one metric and label count. The positions are read from the
group's first line, whose pieces are checked by regex in Python; every other line of the group must
have the very same name pieces (compared as strings) and a valid ``} value [ts]`` tail, which together
make it a valid line. Any other line (escapes, blanks, labels in another order, anything malformed)
takes the general path: a full-line validation regex, one regex pass for the pairs, then a pivot. Only
label values that contain escapes are unescaped in Python. A malformed line raises
:class:`ExpositionError` naming the target and the line.
"""

from __future__ import annotations

import re

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\]|\\.)*"'
_LABELS = rf"\{{[ \t]*(?:{_LABEL}[ \t]*(?:,[ \t]*{_LABEL}[ \t]*)*,?[ \t]*)?\}}"
_SAMPLE = rf"^({_NAME})[ \t]*({_LABELS})?[ \t]+([^ \t]+)(?:[ \t]+(-?[0-9]+))?[ \t]*$"
_FLOAT = r"(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN)"
_VALID_FLOAT = rf"^{_FLOAT}$"
_VALUE_AND_TS = rf"{_FLOAT}(?:[ \t]+-?[0-9]+)?"
_VALID_VALUE_IN_LINE = rf"[ \t]{_VALUE_AND_TS}[ \t]*$"
_FIRST_PIECE = re.compile(rf"{_NAME}\{{[a-zA-Z_][a-zA-Z0-9_]*=")
_NAME_PIECE = re.compile(r",[a-zA-Z_][a-zA-Z0-9_]*=")
_TAIL_PIECE = rf"^\}}[ \t]+{_VALUE_AND_TS}$"

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


def _column_name(label: str) -> str:
    """A label named like one of our own columns (``line``, ``value``, ...) becomes ``label_<name>``."""
    return f"label_{label}" if label in LONG_SCHEMA else label


def _first_error(bad: pl.DataFrame, target: str) -> None:
    """Raise for the first line of ``bad`` (lines that failed the full-line check)."""
    row = bad.row(0, named=True)
    match = re.match(_SAMPLE, row["raw"])
    if match and not re.match(_VALID_FLOAT, match.group(3)):
        raise ExpositionError(target, row["line"], f"invalid sample value {match.group(3)[:50]!r}")
    raise ExpositionError(target, row["line"], f"not a valid sample line: {row['raw'][:200]!r}")


def _value_and_ts(words: pl.Expr) -> list[pl.Expr]:
    """``value`` and ``ts_ms`` from ``"<value> [<ts>]"`` (any blanks between them)."""
    parts = words.str.replace_all(r"[ \t]+", " ").str.split_exact(" ", 1)
    return [
        parts.struct.field("field_0").cast(pl.Float64, strict=False).alias("value"),
        parts.struct.field("field_1").cast(pl.Int64, strict=False).alias("ts_ms"),
    ]


# -- the common line: one split on '"' ------------------------------------------------------------


def _group_names(pieces: list[str]) -> list[str] | None:
    """Label names of a split line (``metric{a=``, value, ``,b=``, value, ..., tail), or ``None`` when
    its name pieces are not exactly that or a name repeats (such lines take the general path)."""
    if len(pieces) % 2 == 0 or not _FIRST_PIECE.fullmatch(pieces[0]):
        return None
    if not all(_NAME_PIECE.fullmatch(p) for p in pieces[2:-1:2]):
        return None
    names = [pieces[0].split("{", 1)[1][:-1], *(p[1:-1] for p in pieces[2:-1:2])]
    return names if len(set(names)) == len(names) else None


def _group_positions(split: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Per (metric, label count): the position of each label name, read from the group's first line.

    Returns the position table (``metric``, ``pairs``, ``_first``: the group's first piece such as
    ``metric{node=``, null when the first line is not plain; ``_p<k>``: the position of label k) and
    the label names in order of k.
    """
    firsts = split.unique(["metric", "pairs"], keep="first", maintain_order=True)
    names: list[str] = []
    positions: list[dict[str, int] | None] = []
    for pieces in firsts["pieces"].to_list():
        group = _group_names(pieces)
        positions.append({name: i for i, name in enumerate(group)} if group else None)
        names.extend(n for n in group or () if n not in names)
    table = firsts.select(
        "metric",
        "pairs",
        _first=pl.Series([pieces[0] if at else None for pieces, at in zip(
            firsts["pieces"].to_list(), positions, strict=True)], dtype=pl.Utf8),
    ).with_columns(
        pl.Series(f"_p{k}", [at.get(name) if at else None for at in positions], dtype=pl.Int64)
        for k, name in enumerate(names)
    )
    return table, names


def _parse_plain(candidates: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parse lines with a label block and no backslash: (parsed rows, rows left for the general path)."""
    pieces = pl.col("raw").str.split('"')
    split = candidates.select(
        "line",
        "raw",
        pieces.alias("pieces"),
        metric=pieces.list.first().str.splitn("{", 2).struct.field("field_0"),
        pairs=(pieces.list.len() - 1) // 2,
    )
    table, names = _group_positions(split)
    split = split.join(table, on=["metric", "pairs"], how="left", maintain_order="left")
    # A line is cut at its group's positions only when its name pieces are the group's: the same first
    # piece ('metric{a='), the same count, and ',<label>=' before each other label's value.
    same_names = [
        pl.col(f"_p{k}").is_null()
        | (pl.col(f"_p{k}") == 0)
        | (pl.col("pieces").list.get(2 * pl.col(f"_p{k}"), null_on_oob=True) == f",{name}=")
        for k, name in enumerate(names)
    ]
    tail = pl.col("pieces").list.last()
    plain = [
        pl.col("pieces").list.first() == pl.col("_first"),
        pl.col("pieces").list.len() % 2 == 1,
        tail.str.contains(_TAIL_PIECE),
    ]
    split = split.with_columns(ok=pl.all_horizontal(*plain, *same_names).fill_null(False))
    fast = split.filter("ok")
    values = [
        pl.col("pieces").list.get(2 * pl.col(f"_p{k}") + 1, null_on_oob=True).alias(_column_name(name))
        for k, name in enumerate(names)
    ]
    # The tail piece is '} <value> [<ts>]'; blanks other than single spaces are rare and normalized first.
    if fast.select(tail.str.contains(r"\t|  ").any()).item():
        tail = pl.concat_str(pl.lit("} "), tail.str.strip_chars("} \t").str.replace_all(r"[ \t]+", " "))
    words = tail.str.split_exact(" ", 2)
    parsed = fast.select(
        "line",
        "metric",
        words.struct.field("field_1").cast(pl.Float64, strict=False).alias("value"),
        words.struct.field("field_2").cast(pl.Int64, strict=False).alias("ts_ms"),
        *values,
    )
    return parsed, split.filter(~pl.col("ok")).select("line", "raw")


# -- any other line: a regex pass and a pivot --------------------------------------------------------


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


def _parse_general(rows: pl.DataFrame, target: str) -> pl.DataFrame:
    """Parse valid lines of any form (with or without a label block) the general way."""
    has_block = pl.col("raw").str.contains("{", literal=True)
    tail = pl.when(has_block).then(pl.col("raw").str.split("}").list.last()).otherwise(pl.col("raw"))
    words = tail.str.strip_chars()
    bare = words.str.replace_all(r"[ \t]+", " ").str.splitn(" ", 2)
    metric = pl.when(has_block).then(pl.col("raw").str.splitn("{", 2).struct.field("field_0").str.strip_chars())
    base = rows.select(
        "line",
        metric=metric.otherwise(bare.struct.field("field_0")),
        value_ts=pl.when(has_block).then(words).otherwise(bare.struct.field("field_1")),
    ).select("line", "metric", *_value_and_ts(pl.col("value_ts")))
    labels = _general_labels(rows.filter(has_block))
    if labels.height == 0:
        return base
    labels = labels.with_columns(
        label=pl.col("label").map_elements(_column_name, return_dtype=pl.Utf8)
        if labels.select(pl.col("label").is_in(list(LONG_SCHEMA)).any()).item()
        else pl.col("label")
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


def _lines(text: str) -> pl.DataFrame:
    """``line`` (1-based) and ``raw`` (stripped) of every line of ``text``, split by Arrow."""
    split = pc.split_pattern(pa.array([text], pa.large_string()), "\n").flatten()
    raw = pl.Series("raw", split).str.strip_chars()
    return pl.DataFrame(raw).with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.Int64))


def parse_exposition(text: str, target: str = "<text>") -> pl.DataFrame:
    """Parse exposition ``text`` (from ``target``, used in errors) into the long sample frame."""
    lines = _lines(text)
    samples = lines.filter((pl.col("raw") != "") & ~pl.col("raw").str.starts_with("#"))
    if samples.height == 0:
        return pl.DataFrame(schema=LONG_SCHEMA)
    plain = pl.col("raw").str.contains("{", literal=True) & ~pl.col("raw").str.contains("\\", literal=True)
    samples = samples.with_columns(plain=plain)
    parsed, unmatched = _parse_plain(samples.filter("plain").select("line", "raw"))
    other = pl.concat([samples.filter(~pl.col("plain")).select("line", "raw"), unmatched]).sort("line")
    if other.height == 0:
        return parsed
    valid = pl.col("raw").str.contains(_SAMPLE) & pl.col("raw").str.contains(_VALID_VALUE_IN_LINE)
    bad = other.filter(~valid)
    if bad.height:
        _first_error(bad, target)
    rest = _parse_general(other, target)
    return pl.concat([parsed, rest], how="diagonal_relaxed").sort("line")
