"""Inline SVG charts: well-formed, proportional, and labels escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from dashboards.report.svg import Series, heat_map, line_chart, stacked_area_chart, stacked_bar_chart

NS = {"s": "http://www.w3.org/2000/svg"}
EVIL = "<script>alert(1)</script>\"'"


def _bars(svg: str) -> list[ET.Element]:
    return ET.fromstring(svg).findall(".//s:rect[@class='bar']", NS)


def test_bar_lengths_are_proportional_to_values() -> None:
    svg = stacked_bar_chart("t", ["a", "b"], [Series("x", (1.0, 3.0), "#000")])
    widths = [float(r.get("width", "0")) for r in _bars(svg)]
    assert widths[1] == pytest.approx(3 * widths[0], rel=1e-3)


def test_stacked_segments_start_where_the_previous_one_ends() -> None:
    svg = stacked_bar_chart("t", ["a"], [Series("x", (1.0,), "#000"), Series("y", (2.0,), "#111")])
    first, second = _bars(svg)
    assert float(second.get("x", "0")) == pytest.approx(float(first.get("x", "0")) + float(first.get("width", "0")), abs=0.2)


def test_labels_and_titles_are_escaped_and_the_svg_stays_well_formed() -> None:
    svg = stacked_bar_chart(EVIL, [EVIL], [Series(EVIL, (1.0,), "#000")])
    assert "<script>" not in svg
    root = ET.fromstring(svg)  # would raise on broken markup
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert any(t and t.startswith("<script>") for t in texts)  # the parser sees the original text


def test_heat_map_escapes_rows_columns_and_cell_text() -> None:
    svg = heat_map("risk", [EVIL], [EVIL], [[0.5]], cell_text=[[EVIL]])
    assert "<script>" not in svg
    ET.fromstring(svg)


def test_heat_map_shades_higher_values_darker() -> None:
    svg = heat_map("risk", ["a", "b"], ["t"], [[0.0], [1.0]])
    low, high = (r.get("fill", "") for r in ET.fromstring(svg).findall(".//s:rect[@class='cell']", NS))
    assert low == "#ffffff" and high != low


def test_stacked_area_top_band_reaches_the_sum_of_series() -> None:
    svg = stacked_area_chart("cap", [0.0, 1.0], [Series("a", (1.0, 1.0), "#000"), Series("b", (1.0, 3.0), "#111")])
    polygons = ET.fromstring(svg).findall(".//s:polygon", NS)
    assert len(polygons) == 2
    top_points = polygons[1].get("points", "").split()
    ys = [float(p.split(",")[1]) for p in top_points[:2]]
    assert ys[1] < ys[0]  # the second x position stacks higher (4 vs 2)


def test_mismatched_series_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="values for 2"):
        stacked_bar_chart("t", ["a", "b"], [Series("x", (1.0,), "#000")])
    with pytest.raises(ValueError, match="x positions"):
        line_chart("t", [0.0, 1.0], [Series("x", (1.0,), "#000")])


def test_empty_inputs_say_no_data_instead_of_failing() -> None:
    assert "no data" in stacked_bar_chart("t", [], [Series("x", (), "#000")])
    assert "not enough data" in stacked_area_chart("t", [0.0], [Series("x", (1.0,), "#000")])
