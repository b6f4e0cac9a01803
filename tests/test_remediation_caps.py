"""Guard rails of `gpulens remediate` as properties: the share cap, the last node, the opt-out, untainting."""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.analytics.remediation.decide import NodeCase, decide
from gpulens.analytics.remediation.policy import RemediationPolicy

NOW = datetime(2026, 3, 2)

node_case = st.builds(
    NodeCase,
    node=st.text("abcdefgh", min_size=1, max_size=3),
    flavor=st.sampled_from(["h100", "h200", "a100"]),
    state=st.sampled_from(["ok", "watch", "warn", "drain"]),
    candidate=st.booleans(),
    tainted=st.booleans(),
    opted_out=st.booleans(),
    healthy_since=st.one_of(st.none(), st.just(NOW - timedelta(days=2)), st.just(NOW - timedelta(hours=1))),
)
fleets = st.lists(node_case, max_size=40, unique_by=lambda c: c.node)
shares = st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0])


@settings(max_examples=300, deadline=None)
@given(fleets, shares)
def test_new_taints_never_push_a_flavor_over_its_share_nor_taint_its_last_node(cases: list[NodeCase], share: float) -> None:
    policy = RemediationPolicy(max_share=share)
    decisions = decide(cases, policy, NOW)
    total = Counter(c.flavor for c in cases)
    before = Counter(c.flavor for c in cases if c.tainted and not c.opted_out)
    new = Counter(d.flavor for d in decisions if d.action == "taint")
    gone = Counter(d.flavor for d in decisions if d.action == "untaint")
    for flavor, n in new.items():
        after = before[flavor] - gone[flavor] + n
        assert after <= math.floor(share * total[flavor] + 1e-9)
        assert after < total[flavor], "the last untainted node of a flavor is never tainted"


@settings(max_examples=200, deadline=None)
@given(fleets, shares)
def test_an_opted_out_node_is_never_tainted_or_untainted(cases: list[NodeCase], share: float) -> None:
    out = {c.node for c in cases if c.opted_out}
    for d in decide(cases, RemediationPolicy(max_share=share), NOW):
        if d.node in out:
            assert d.action == "skip"


@settings(max_examples=200, deadline=None)
@given(fleets)
def test_every_candidate_and_every_tainted_node_gets_exactly_one_decision(cases: list[NodeCase]) -> None:
    decisions = decide(cases, RemediationPolicy(), NOW)
    assert sorted(d.node for d in decisions) == sorted(c.node for c in cases if c.candidate or c.tainted)


def test_ten_percent_of_twenty_nodes_is_two_and_the_worst_go_first() -> None:
    cases = [NodeCase(f"n{i:02}", "h100", "ok", False) for i in range(17)]
    cases += [NodeCase("watching", "h100", "watch", True, NOW - timedelta(hours=5)),
              NodeCase("draining", "h100", "drain", True, NOW - timedelta(hours=1)),
              NodeCase("warned", "h100", "warn", True, NOW - timedelta(hours=9))]
    actions = {d.node: d.action for d in decide(cases, RemediationPolicy(), NOW)}
    assert actions == {"draining": "taint", "warned": "taint", "watching": "refuse"}


def test_a_lone_node_is_never_tainted_and_a_healed_node_is_untainted_after_the_healthy_period() -> None:
    (lone,) = decide([NodeCase("solo", "a100", "drain", True)], RemediationPolicy(max_share=1.0), NOW)
    assert lone.action == "refuse" and "last untainted" in lone.reason
    healed = NodeCase("n1", "h100", "ok", False, tainted=True, healthy_since=NOW - timedelta(hours=30))
    recent = NodeCase("n2", "h100", "ok", False, tainted=True, healthy_since=NOW - timedelta(hours=3))
    actions = {d.node: d.action for d in decide([healed, recent], RemediationPolicy(), NOW)}
    assert actions == {"n1": "untaint", "n2": "keep"}
