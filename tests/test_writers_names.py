"""Names of GPUQuotaRecommendation objects and dry-run files: valid DNS-1123, one per quota object."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from analytics.recommend import RecommendSettings, recommend, write_dry_run
from analytics.writers.crd import recommendation_name
from tests.support.recommend_store import StoreBuilder

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
NOW = datetime(2026, 11, 9, 12, 0)
WEEK = 7 * 288

# Real names (DNS labels and subdomains) and names only a doctored store could hold.
names = st.one_of(
    st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?", fullmatch=True),
    st.text(alphabet="aA-._/\n9 é", min_size=0, max_size=12),
    st.text(alphabet="a-", min_size=250, max_size=300),
)
identities = st.tuples(st.sampled_from(["ClusterQueue", "ResourceQuota"]), names, names)


@given(identities)
def test_every_name_is_a_valid_dns1123_subdomain(identity: tuple[str, str, str]) -> None:
    name = recommendation_name(*identity)
    assert DNS1123_SUBDOMAIN.fullmatch(name) and len(name) <= 253, name


@given(identities, identities)
def test_different_objects_never_share_a_name(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    if a != b:
        assert recommendation_name(*a) != recommendation_name(*b)


def test_quotas_whose_dashed_names_coincide_get_their_own_files_and_recommendations(tmp_path: Path) -> None:
    s = StoreBuilder(tmp_path / "s.duckdb")
    for namespace, name in (("team-a", "gpu-quota"), ("team", "a-gpu-quota")):
        s.quota("ResourceQuota", name, "requests.nvidia.com/gpu", namespace=namespace, tenant=namespace, nominal=8,
                usage=[2] * WEEK)
    report = recommend(s.save(), RecommendSettings(targets=("resourcequota",), quota={"min_cut_days": 7}), clock=lambda: NOW)
    written = write_dry_run(report, tmp_path / "out")
    quota_files = sorted(p.name for p in written if p.name != "gpuquotarecommendations.yaml")
    assert quota_files == ["resourcequota-team-a.gpu-quota.yaml", "resourcequota-team.a-gpu-quota.yaml"]
    assert all(p.exists() for p in written)  # "wrote N files" means N files
    objects = report.recommendation_objects()
    assert len({o["metadata"]["name"] for o in objects}) == len(objects) == 2


def test_a_name_with_a_newline_stays_on_the_diffs_header_line(tmp_path: Path) -> None:
    s = StoreBuilder(tmp_path / "s.duckdb")
    s.quota("ClusterQueue", "team-x\n+++ ClusterQueue team-y (proposed)\n@@ -1 +1 @@", "nvidia.com/gpu", flavor="h100",
            tenant="team-x", nominal=16, usage=[4 + (i % 4) for i in range(WEEK)])
    report = recommend(s.save(), RecommendSettings(targets=("kueue",), quota={"min_cut_days": 7}), clock=lambda: NOW)
    (plan,) = report.plans
    lines = plan.diff(report.generated_at).splitlines()
    assert lines[:2] == [
        "--- ClusterQueue team-x\\n+++ ClusterQueue team-y (proposed)\\n@@ -1 +1 @@ (now)",
        "+++ ClusterQueue team-x\\n+++ ClusterQueue team-y (proposed)\\n@@ -1 +1 @@ (proposed)",
    ]
    body = lines[2:]
    assert not [line for line in body if line.startswith(("---", "+++"))]
    assert len([line for line in body if line.startswith("@@")]) == 1
    assert all(line.startswith((" ", "-", "+", "@@")) for line in body)
