"""One cut rule behind `recommend` and `plan`: on the same store they allow or refuse every cut alike, for the
same reason, with the same ``--min-cut-days``; one sample step short of the minimum is not missing evidence."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from analytics.cut_rule import cut_refusal
from analytics.plan.fleet import plan_store
from analytics.plan.policy import CapacityFile, PlanPolicy
from analytics.quota import QuotaSettings
from analytics.recommend import RecommendSettings, recommend
from tests.support.cli import gpulens
from tests.support.recommend_store import StoreBuilder

STEPS_PER_DAY = 288  # samples every 5 minutes
END = 20 * STEPS_PER_DAY
EVIDENCE = {  # queue -> 5-minute quota snapshots ending together at END
    "q-14d-less-a-step": 14 * STEPS_PER_DAY - 1,  # 13.997 days: as the 14-day demo store spans
    "q-14d": 14 * STEPS_PER_DAY,
    "q-13d": 13 * STEPS_PER_DAY,
    "q-10d": 10 * STEPS_PER_DAY,
    "q-3d": 3 * STEPS_PER_DAY,
}


def _store(path: Path) -> Path:
    s = StoreBuilder(path)
    for queue, n in EVIDENCE.items():  # 16 GPUs of quota, 4 in use: every queue asks for a cut
        s.quota("ClusterQueue", queue, "nvidia.com/gpu", flavor="h100", tenant=queue, nominal=16, usage=[4] * n,
                first=END - n)
    return s.save()


def _recommend_cuts(db: Path, min_cut_days: float) -> dict[str, tuple[bool, str | None]]:
    report = recommend(db, RecommendSettings(quota={"min_cut_days": min_cut_days}, store_results=False),
                       clock=lambda: datetime(2026, 12, 1, tzinfo=UTC))
    out = {}
    for q in report.quotas:
        refusal = next((r for r in q.reasons if r.startswith("no cut: the evidence")), None)
        out[q.key.name] = (q.next_value is not None and q.current is not None and q.next_value < q.current, refusal)
    return out


def _plan_cuts(db: Path, min_cut_days: float) -> dict[str, tuple[bool, str | None]]:
    plan = plan_store(db, PlanPolicy(min_evidence_days_to_cut=min_cut_days),
                      capacity=CapacityFile(flavors={"h100": {"nvidia.com/gpu": 200}}), store=False)
    out = {}
    for pool in plan.pools:
        for q in pool.queues:
            refusal = q.explanation.split(": ", 1)[1] if q.binding == "evidence" else None
            out[q.demand.queue] = (q.planned < (q.demand.current or 0), refusal)
    return out


@pytest.mark.parametrize("min_cut_days", [14.0, 10.0])
def test_recommend_and_plan_allow_or_refuse_every_cut_alike_for_the_same_reason(
    tmp_path: Path, min_cut_days: float
) -> None:
    db = _store(tmp_path / "s.duckdb")
    recommended = _recommend_cuts(db, min_cut_days)
    planned = _plan_cuts(db, min_cut_days)
    assert set(recommended) == set(EVIDENCE)
    assert planned == recommended
    assert recommended["q-14d-less-a-step"][0] and recommended["q-14d"][0]  # one 5-minute step short still cuts
    assert not recommended["q-3d"][0]
    assert recommended["q-13d"][0] is (min_cut_days <= 13)


def test_the_cut_rule_tolerates_one_bucket_and_no_more() -> None:
    step = 300.0
    assert cut_refusal(14 - step / 86400, 14, step) is None
    refusal = cut_refusal(14 - 2 * step / 86400, 14, step)
    assert refusal is not None and "--min-cut-days" in refusal and "13.993 days" in refusal


def test_the_quota_default_and_the_plan_default_ask_the_same_days_of_evidence() -> None:
    assert QuotaSettings().min_cut_days == PlanPolicy().min_evidence_days_to_cut


def test_plan_takes_the_same_min_cut_days_flag_as_recommend(tmp_path: Path) -> None:
    db = _store(tmp_path / "s.duckdb")
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text("flavors:\n  h100:\n    nvidia.com/gpu: 200\n")
    strict = gpulens("plan", "--db", str(db), "--capacity", str(capacity), "--no-store", "--out", str(tmp_path / "a"),
                     "--min-cut-days", "20")
    assert strict.returncode == 0, strict.stdout + strict.stderr
    assert "q-14d keeps 16: no cut: the evidence covers 14.000 days and a cut needs at least 20" in strict.stdout
    assert "cuts need >= 20 days of evidence (--min-cut-days, less one bucket" in strict.stdout
    bad = gpulens("plan", "--db", str(db), "--min-cut-days", "-1")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("gpulens: error: --min-cut-days")
