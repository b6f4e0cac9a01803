"""A MIG layout plan over a store: read the inputs, plan, price what it frees, write the files, explain it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import yaml

from analytics.miglayout.fleet import demands_from_stored_run, load_gpu_states, load_layout_inputs
from analytics.miglayout.operator_files import mig_parted_config, node_label_patches, rollout_readme
from analytics.miglayout.planner import LayoutPlan, plan_layout
from analytics.miglayout.workload_patches import WorkloadPatch, rollback_patch, workload_patch
from analytics.prices import PriceBook, load_price_book, run_price_book
from analytics.rightsizing.strategy import WorkloadRecommendation
from collector.store_errors import connect_store, reading_store
from gpulens.core.mig_catalog import model_by_name

_HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class LayoutRun:
    """A layout plan with the window it was decided on and what it frees at the price book's prices."""

    plan: LayoutPlan
    window_start: datetime
    window_end: datetime
    book: PriceBook
    """The price book (``analytics/prices``): the newest analysis run's, else the store's."""

    @property
    def price_origin(self) -> str:
        return self.book.origin

    @property
    def models(self) -> list[str]:
        return sorted({d.model for d in self.plan.demands})

    @property
    def unpriced_models(self) -> list[str]:
        """Models of the plan that the book does not price: what they free is in no dollar figure."""
        return self.book.unpriced(self.models)

    @property
    def window_hours(self) -> float:
        return (self.window_end - self.window_start).total_seconds() / 3600

    @property
    def ge_hours_freed(self) -> float:
        """GE-hours the conversions would have freed over the evidence window."""
        return self.plan.gpu_equivalents_freed * self.window_hours

    @property
    def usd_per_month_freed(self) -> float | None:
        """Value of the freed GE of priced models over a 730-hour month at the price paid (None: none priced)."""
        total = None
        for d in self.plan.demands:
            price = self.book.contracted_for(d.model)
            if d.workload in self.plan.unplaced_workloads or price is None:
                continue
            ge = d.current_ge - d.count * model_by_name(d.model).profile(d.profile).gpu_equivalents
            total = (total or 0.0) + ge * price * _HOURS_PER_MONTH
        return total

    def money_words(self) -> str:
        """``$365 per month at H200: $5 per GPU-hour list (source)``, and which models are unpriced."""
        priced = [p.describe() for p in map(self.book.price_of, self.models) if p is not None]
        words = ("no dollar figure" if self.usd_per_month_freed is None
                 else f"${self.usd_per_month_freed:,.0f} per month at {'; '.join(priced)}")
        if self.unpriced_models:
            words += f"; unpriced: {', '.join(self.unpriced_models)} (what it frees there is not counted)"
        return words

    def render(self) -> str:
        """The plan in words, for the command line."""
        p = self.plan
        if not p.demands:
            return "MIG layout plan: no workload has a confident move to another MIG profile in this window."
        lines = [
            f"MIG layout plan (evidence {self.window_start:%Y-%m-%d %H:%M} -> {self.window_end:%Y-%m-%d %H:%M} UTC): "
            f"{len(p.demands)} workload(s), {len(p.changes)} GPU(s) on {len(p.nodes_changed)} node(s) to repartition, "
            f"{len(p.reused)} instance(s) on existing free MIG devices",
            f"  frees {p.whole_gpus_freed} whole GPU(s), {p.gpu_equivalents_freed:.2f} GE "
            f"({self.ge_hours_freed:,.1f} GE-hours over the window; {self.money_words()})",
        ]
        for c in p.changes:
            before = "+".join(c.gpu.layout) or "whole GPU"
            lines.append(f"  {c.gpu.node} GPU {c.gpu.index if c.gpu.index is not None else c.gpu.gpu_uuid}: "
                         f"{before} -> {'+'.join(c.layout)} (serves {len(c.serves)}, spare {c.spare})")
        for u in p.unplaced:
            lines.append(f"  does not fit: {u.workload} {u.count} x {u.profile}: {u.reason}")
        for d in p.pending_moves:
            lines.append(f"  pending work: {d.workload} -> {d.profile}: {d.pending}")
        return "\n".join(lines)


def plan_mig_layout(
    con: duckdb.DuckDBPyConnection,
    start: datetime,
    end: datetime,
    recommendations: Sequence[WorkloadRecommendation],
    *,
    prices: Path | None = None,
) -> LayoutRun:
    """Plan the layout for a recommendation run's workloads over ``[start, end]``."""
    gpus, demands = load_layout_inputs(con, start, end, recommendations)
    plan = plan_layout(gpus, demands)
    book = run_price_book(con) if prices is None else load_price_book(con, prices, end)
    return LayoutRun(plan, start, end, book)


def _dump(docs: Sequence[object]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)


def write_layout_files(run: LayoutRun, out_dir: Path, *, dra: bool = False) -> list[Path]:
    """``mig/mig-parted.yaml``, ``mig/node-labels.yaml``, ``mig/README.md`` and ``workloads/*.yaml``, each
    with its rollback (``*.rollback.yaml``: today's layouts and resources, ready to re-apply)."""
    mig_dir, wl_dir = out_dir / "mig", out_dir / "workloads"
    mig_dir.mkdir(parents=True, exist_ok=True)
    wl_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*mig_dir.glob("*"), *wl_dir.glob("*.yaml")]:
        stale.unlink()
    written: list[Path] = []
    placed = {w for c in run.plan.changes for w, _ in c.serves} | {r.workload for r in run.plan.reused}
    patches: list[WorkloadPatch] = [workload_patch(d, dra=dra) for d in run.plan.demands if d.workload in placed]
    files: dict[str, list[str]] = {}
    for patch in patches:
        path = wl_dir / f"{patch.file_stem}.yaml"
        path.write_text(patch.header + yaml.safe_dump(patch.body, sort_keys=False), encoding="utf-8")
        written.append(path)
        files.setdefault(patch.demand.workload, []).append(f"workloads/{path.name}")
        if patch.claim_template is not None:
            claim = wl_dir / f"{patch.file_stem}.resourceclaimtemplate.yaml"
            claim.write_text(yaml.safe_dump(patch.claim_template, sort_keys=False), encoding="utf-8")
            written.append(claim)
            files[patch.demand.workload].append(f"workloads/{claim.name}")
    for patch in [rollback_patch(p.demand, dra=dra) for p in patches]:
        path = wl_dir / f"{patch.file_stem}.yaml"
        path.write_text(patch.header + yaml.safe_dump(patch.body, sort_keys=False), encoding="utf-8")
        written.append(path)
    config, node_config = mig_parted_config(run.plan)
    before, node_before = mig_parted_config(run.plan, rollback=True)
    header = ("# mig-parted config written by gpulens (dry run: review, then give it to the GPU Operator's MIG "
              "manager; see README.md)\n")
    rollback = ("# mig-parted config of today's layouts on the nodes the plan changes, written by gpulens: "
                "re-apply it to undo the plan (see README.md)\n")
    none = "# no node changes\n"
    targets = {
        "mig-parted.yaml": header + yaml.safe_dump(config, sort_keys=False),
        "node-labels.yaml": _dump(node_label_patches(node_config)) if node_config else none,
        "mig-parted.rollback.yaml": rollback + yaml.safe_dump(before, sort_keys=False),
        "node-labels.rollback.yaml": _dump(node_label_patches(node_before)) if node_before else none,
        "README.md": rollout_readme(run.plan, node_config, files),
    }
    for name, text in targets.items():
        path = mig_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def layout_for_recommendations(
    db_path: Path, start: datetime, end: datetime, recommendations: Sequence[WorkloadRecommendation]
) -> LayoutRun:
    """Open the store read-only and plan the layout for a recommendation run's workloads."""
    with connect_store(db_path, read_only=True) as con, reading_store(db_path):
        return plan_mig_layout(con, start, end, recommendations)


def layout_from_store(con: duckdb.DuckDBPyConnection) -> LayoutRun | None:
    """The layout plan of the newest stored recommendation run (what the report shows); None: no run."""
    stored = demands_from_stored_run(con)
    if stored is None:
        return None
    demands, start, end = stored
    plan = plan_layout(load_gpu_states(con, start, end), demands)
    return LayoutRun(plan, start, end, run_price_book(con))
