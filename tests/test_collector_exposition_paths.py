"""The exposition parser's two paths (one split for plain lines, a regex pass for the others) agree."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.exposition import ExpositionError, escape_label_value, parse_exposition

NAMES = ["node", "gpu", "device", "pod", "value", "line", "x"]
VALUES = st.text(alphabet=st.sampled_from(list('ab0 ,={}"\\\n')), max_size=6)


def _line(metric: str, labels: list[tuple[str, str]], value: float, blank: str) -> str:
    block = ",".join(f"{blank}{k}{blank}={blank}\"{escape_label_value(v)}\"" for k, v in labels)
    return f"{metric}{{{block}}} {value!r}"


@st.composite
def expositions(draw: st.DrawFn) -> tuple[str, list[tuple[str, dict[str, str], float]]]:
    rows = []
    lines = []
    for i in range(draw(st.integers(1, 12))):
        metric = draw(st.sampled_from(["m_a", "m_b"]))
        names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
        labels = [(n, draw(VALUES)) for n in names]
        blank = draw(st.sampled_from(["", "", "", " "]))
        lines.append(_line(metric, labels, float(i), blank))
        rows.append((metric, dict(labels), float(i)))
    return "\n".join(lines) + "\n", rows


@settings(max_examples=80, deadline=None)
@given(expositions())
def test_every_line_parses_to_its_own_labels_whatever_the_order_and_content(
    case: tuple[str, list[tuple[str, dict[str, str], float]]],
) -> None:
    text, rows = case
    long = parse_exposition(text, "t")
    assert long["line"].to_list() == list(range(1, len(rows) + 1))
    label_columns = [c for c in long.columns if c not in ("line", "metric", "value", "ts_ms")]
    for got, (metric, labels, value) in zip(long.iter_rows(named=True), rows, strict=True):
        assert (got["metric"], got["value"]) == (metric, value)
        own = {c.removeprefix("label_") if c in ("label_value", "label_line") else c: got[c]
               for c in label_columns if got[c] is not None}
        assert own == labels


def test_plain_lines_of_one_metric_with_labels_in_another_order_keep_their_values() -> None:
    text = (
        'm{a="1",b="2"} 1 1000\n'
        'm{b="3",a="4"} 2\n'          # same metric and label count, other order
        'm{a="5",c="6"} 3\n'          # same count, another label
        'm{a="7",b="8\\"9"} 4\n'      # an escape: the general path
        'bare 5 2000\n'
    )
    long = parse_exposition(text, "t")
    assert long.select("line", "a", "b", "c", "value", "ts_ms").rows() == [
        (1, "1", "2", None, 1.0, 1000),
        (2, "4", "3", None, 2.0, None),
        (3, "5", None, "6", 3.0, None),
        (4, "7", '8"9', None, 4.0, None),
        (5, None, None, None, 5.0, 2000),
    ]
    assert long.schema["line"] == pl.Int64


def test_tabs_and_repeated_blanks_around_the_value_and_timestamp_are_accepted() -> None:
    long = parse_exposition('m{a="1"}\t2.5 \t 1000\nm{a="2"}  3\n', "t")
    assert long.select("a", "value", "ts_ms").rows() == [("1", 2.5, 1000), ("2", 3.0, None)]


@pytest.mark.parametrize(
    "bad",
    ['m{a="1"b="2"} 1', 'm{a="1"}} 1', 'm{a=""b"} 1', 'm{a="1"}1', 'm{a="1"} 1 2 3', 'm{a="1"} 0x10'],
)
def test_a_malformed_line_after_a_plain_line_of_its_metric_is_still_reported(bad: str) -> None:
    with pytest.raises(ExpositionError) as err:
        parse_exposition(f'm{{a="0"}} 0\n{bad}\nm{{a="2"}} 2\n', "node-1")
    assert err.value.line == 2
