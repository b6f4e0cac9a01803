"""The metric catalog is the one definition of every series; docs/metrics.md and the exporter follow it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.core.metric_catalog import CATALOG, MetricGroup, MetricSpec, MetricType
from tests.support.exporter import fake_cycle, render_text
from tests.support.fakes import every_family_allocations, every_family_readings

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
ROW = re.compile(
    r"^\|\s*`(?P<name>gpulens_[a-z0-9_]+)`\s*\|\s*(?P<type>\w+)\s*\|\s*(?P<unit>[^|]*?)\s*\|\s*(?P<labels>[^|]*)\|"
)

Row = tuple[str, str, frozenset[str]]


def documented() -> dict[str, Row]:
    """metric name -> (type, unit, label names) from the table of docs/metrics.md."""
    table: dict[str, Row] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            labels = frozenset(x.strip() for x in match["labels"].split(",") if x.strip())
            assert match["name"] not in table, f"{match['name']} documented twice"
            table[match["name"]] = (match["type"], match["unit"], labels)
    return table


def catalogued() -> dict[str, Row]:
    return {spec.name: (spec.type.value, spec.unit, frozenset(spec.labels)) for spec in CATALOG}


def emitted() -> dict[str, tuple[str, frozenset[str]]]:
    """metric name -> (type, label names) of what the exporter emits for a snapshot using every family."""
    cycle, _, _ = fake_cycle(every_family_readings(), every_family_allocations())
    text = render_text(cycle.run_once())
    found: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            _, labels = found.setdefault(sample.name, (family.type, set()))
            labels.update(sample.labels)
            label_set = set(sample.labels)
            first = found[sample.name][1]
            assert label_set == first, f"{sample.name} has differing label sets: {label_set} vs {first}"
    return {name: (kind, frozenset(labels)) for name, (kind, labels) in found.items()}


def test_the_doc_table_is_parsed() -> None:
    assert len(documented()) >= 25


def test_the_doc_table_lists_exactly_the_catalog_with_its_types_units_and_labels() -> None:
    doc, cat = documented(), catalogued()
    assert sorted(set(cat) - set(doc)) == [], "in the metric catalog but not in docs/metrics.md"
    assert sorted(set(doc) - set(cat)) == [], "in docs/metrics.md but not in the metric catalog"
    assert {name: (doc[name], cat[name]) for name in doc if doc[name] != cat[name]} == {}


def test_the_doc_table_keeps_the_catalog_order() -> None:
    assert list(documented()) == [spec.name for spec in CATALOG]


def test_the_exporter_emits_exactly_the_catalog_with_its_types_and_labels() -> None:
    out = emitted()
    cat = {spec.name: (spec.type.value, frozenset(spec.labels)) for spec in CATALOG}
    assert sorted(set(out) - set(cat)) == [], "emitted but not catalogued"
    assert sorted(set(cat) - set(out)) == [], "catalogued but never emitted"
    assert {name: (cat[name], out[name]) for name in cat if cat[name] != out[name]} == {}


def test_the_exposition_carries_the_catalog_help() -> None:
    cycle, _, _ = fake_cycle(every_family_readings(), every_family_allocations())
    text = render_text(cycle.run_once())
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.MULTILINE))
    assert {spec.name: helps.get(spec.name) for spec in CATALOG} == {spec.name: spec.help for spec in CATALOG}


@pytest.mark.parametrize(
    ("name", "kind"),
    [("gpulens_gpu_energy_joules", MetricType.COUNTER), ("gpulens_gpu_up_total", MetricType.GAUGE),
     ("gpu_up", MetricType.GAUGE)],
)
def test_a_catalog_entry_that_breaks_the_naming_conventions_is_refused(name: str, kind: MetricType) -> None:
    with pytest.raises(ValueError):
        MetricSpec(name, kind, "1", ("node",), "help.", MetricGroup.GPU)


def test_no_name_is_catalogued_twice() -> None:
    names = [spec.name for spec in CATALOG]
    assert len(names) == len(set(names))
