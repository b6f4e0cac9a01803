"""docs/metrics.md is the single reference of every metric: the exporter emits exactly what it lists."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.exporter import fake_cycle, render_text
from tests.support.fakes import every_family_allocations, every_family_readings

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
ROW = re.compile(r"^\|\s*`(?P<name>gpulens_[a-z0-9_]+)`\s*\|\s*(?P<type>\w+)\s*\|[^|]*\|\s*(?P<labels>[^|]*)\|")


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """metric name -> (type, label names) from the table of docs/metrics.md."""
    table: dict[str, tuple[str, frozenset[str]]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            labels = frozenset(x.strip() for x in match["labels"].split(",") if x.strip())
            assert match["name"] not in table, f"{match['name']} documented twice"
            table[match["name"]] = (match["type"], labels)
    return table


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


def test_every_emitted_metric_is_documented_and_every_documented_metric_is_emitted() -> None:
    doc, out = documented(), emitted()
    assert sorted(set(out) - set(doc)) == [], "emitted but not in docs/metrics.md"
    assert sorted(set(doc) - set(out)) == [], "documented in docs/metrics.md but never emitted"


def test_types_and_label_sets_match_the_doc() -> None:
    doc, out = documented(), emitted()
    mismatches = {name: (doc[name], out[name]) for name in doc.keys() & out.keys() if doc[name] != out[name]}
    assert mismatches == {}
