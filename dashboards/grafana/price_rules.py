"""The price book as Prometheus recording rules: the per-model price series the chargeback dashboard uses.

One rule per GPU model name the store's inventory uses (``model`` as ``gpulens_gpu_info`` labels it, e.g.
``NVIDIA H200``, and the short ``gpu_model``): ``gpulens:price_usd_per_gpu_hour`` = the price paid per
whole-GPU hour, with its ``source``. An unpriced model gets no series, so PromQL money over it is absent,
never zero. Rendered by ``gpulens prices rules``; load the file next to gpulens' own rules.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from analytics.price_book_actions import store_models
from analytics.prices import PriceBook, run_price_book
from collector.store_errors import connect_store, reading_store
from gpulens.core.mig_catalog import MODELS, short_model

PRICE_SERIES = "gpulens:price_usd_per_gpu_hour"
"""The recorded series: USD paid per whole-GPU hour, labels ``model`` (as the exporter names it) and ``gpu_model``."""
GROUP = "gpulens.prices"


def price_rules(book: PriceBook, model_names: list[str]) -> dict[str, object]:
    """The rules file for ``book``: one constant series per model name that has a price."""
    names = sorted(set(model_names) | set(MODELS) | {m.name for m in MODELS.values()})
    rules = []
    for name in names:
        price = book.price_of(name)
        if price is None:
            continue
        rules.append({
            "record": PRICE_SERIES,
            "expr": f"vector({price.paid!r})",
            "labels": {"model": name, "gpu_model": short_model(name), "source": price.source},
        })
    return {"groups": [{"name": GROUP, "rules": rules}]}


def write_price_rules(db: Path, out: Path) -> str:
    """Write the rules of the book the newest analysis run priced with (else the store's) to ``out``."""
    with connect_store(db, read_only=True) as con, reading_store(db):
        book = run_price_book(con)
        models = store_models(con)
    doc = price_rules(book, models)
    out.write_text("# Written by `gpulens prices rules`: the price book as recording rules (do not edit; "
                   "run it again after a price changes).\n" + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    rules = doc["groups"][0]["rules"]  # type: ignore[index]
    unpriced = book.unpriced(models)
    tail = f"; unpriced (no series): {', '.join(unpriced)}" if unpriced else ""
    return f"{len(rules)} price rule(s) for {len({r['labels']['gpu_model'] for r in rules})} model(s) written to {out} ({book.origin}){tail}"
