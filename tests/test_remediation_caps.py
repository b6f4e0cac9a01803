"""Guard rails of `gpulens remediate` as properties: the caps, the last schedulable node, the breaker, the opt-out."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.remediation.decide import NodeCase, decide
from analytics.remediation.policy import RemediationPolicy

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
    blocked=st.one_of(st.none(), st.just("cordoned"), st.just("NotReady")),
    warning_ts=st.one_of(st.none(), st.just(NOW - timedelta(days=1)), st.just(NOW - timedelta(minutes=10))),
)
fleets = st.lists(node_case, max_size=40, unique_by=lambda c: c.node)
shares = st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0])
counts = st.sampled_from([None, 0, 1, 3])


@settings(max_examples=300, deadline=None)
@given(fleets, shares, counts)
def test_new_taints_never_push_a_flavor_over_its_cap_nor_take_its_last_schedulable_node(
        cases: list[NodeCase], share: float, count: int | None) -> None:
    policy = RemediationPolicy(max_share=share, max_nodes=count)
    decisions = decide(cases, policy, NOW)
    total = Counter(c.flavor for c in cases)
    before = Counter(c.flavor for c in cases if c.tainted and not c.opted_out)
    new = Counter(d.flavor for d in decisions if d.action == "taint")
    gone = Counter(d.flavor for d in decisions if d.action == "untaint")
    new_nodes = {d.node for d in decisions if d.action == "taint"}
    tainted_now = {d.node for d in decisions if d.action == "taint"} | {
        c.node for c in cases if c.tainted and c.node not in {d.node for d in decisions if d.action == "untaint"}}
    for flavor, n in new.items():
        after = before[flavor] - gone[flavor] + n
        assert after <= policy.cap(total[flavor])
        took = [c for c in cases if c.flavor == flavor and c.node in new_nodes and not c.blocked]
        schedulable = [c for c in cases if c.flavor == flavor and c.node not in tainted_now and not c.blocked]
        assert schedulable or not took, "a new taint never takes a flavor's last node that can take new work"


def test_the_cap_is_the_share_rounded_down_but_at_least_one_and_never_over_max_nodes() -> None:
    assert [RemediationPolicy().cap(n) for n in (2, 3, 9, 10, 25)] == [1, 1, 1, 1, 2]
    assert RemediationPolicy(max_share=0.5, max_nodes=2).cap(10) == 2
    assert RemediationPolicy(max_nodes=0).cap(100) == 0
    assert RemediationPolicy(max_share=0).cap(100) == 0, "--max-share 0 turns new quarantines off"


def test_a_small_pool_may_quarantine_one_failing_node() -> None:
    cases = [NodeCase("a", "a100", "drain", True), NodeCase("b", "a100", "ok", False), NodeCase("c", "a100", "ok", False)]
    actions = {d.node: d.action for d in decide(cases, RemediationPolicy(), NOW)}
    assert actions == {"a": "taint"}


def test_the_only_schedulable_node_left_is_not_tainted_when_the_other_is_cordoned() -> None:
    cases = [NodeCase("a", "h100", "drain", True), NodeCase("b", "h100", "ok", False, blocked="cordoned")]
    (d,) = decide(cases, RemediationPolicy(max_share=1.0), NOW)
    assert d.action == "refuse" and "last schedulable" in d.reason and "1 of 2" in d.reason


def test_a_device_quarantine_leaves_the_node_schedulable_so_the_last_node_rule_does_not_apply() -> None:
    cases = [NodeCase("a", "h100", "drain", True, scope="device"), NodeCase("b", "h100", "ok", False, blocked="NotReady")]
    (d,) = decide(cases, RemediationPolicy(), NOW)
    assert (d.action, d.scope) == ("taint", "device")


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


def test_the_breaker_holds_every_new_quarantine_when_a_flavor_turns_unhealthy_at_once() -> None:
    recent = NOW - timedelta(minutes=20)
    cases = [NodeCase(f"h{i}", "h100", "drain", True, recent) for i in range(3)]
    cases += [NodeCase("h3", "h100", "ok", False), NodeCase("a0", "a100", "drain", True, NOW - timedelta(days=1))]
    cases += [NodeCase(f"a{i}", "a100", "ok", False) for i in range(1, 5)]
    decisions = {d.node: d for d in decide(cases, RemediationPolicy(), NOW)}
    assert {d.action for d in decisions.values()} == {"hold"}, "a fleet-wide fault stops every new taint"
    assert "3 of 4 h100 node(s) turned unhealthy within 1 h" in decisions["a0"].reason


def test_the_breaker_does_not_trip_on_one_failing_node_or_on_failures_spread_over_time() -> None:
    lone = [NodeCase("a", "h100", "drain", True, NOW - timedelta(minutes=5)), NodeCase("b", "h100", "ok", False)]
    assert [d.action for d in decide(lone, RemediationPolicy(), NOW)] == ["taint"]
    spread = [NodeCase(f"n{i}", "h100", "drain", True, NOW - timedelta(hours=2 + i)) for i in range(3)]
    spread.append(NodeCase("n9", "h100", "ok", False))
    actions = Counter(d.action for d in decide(spread, RemediationPolicy(max_share=1.0), NOW))
    assert actions["hold"] == 0 and actions["taint"] == 3


def test_ten_percent_of_twenty_nodes_is_two_and_the_worst_go_first() -> None:
    cases = [NodeCase(f"n{i:02}", "h100", "ok", False) for i in range(17)]
    cases += [NodeCase("watching", "h100", "watch", True, NOW - timedelta(hours=5)),
              NodeCase("draining", "h100", "drain", True, NOW - timedelta(hours=1)),
              NodeCase("warned", "h100", "warn", True, NOW - timedelta(hours=9))]
    actions = {d.node: d.action for d in decide(cases, RemediationPolicy(), NOW)}
    assert actions == {"draining": "taint", "warned": "taint", "watching": "refuse"}


def test_a_lone_node_is_never_tainted_and_a_healed_node_is_untainted_after_the_healthy_period() -> None:
    (lone,) = decide([NodeCase("solo", "a100", "drain", True)], RemediationPolicy(max_share=1.0), NOW)
    assert lone.action == "refuse" and "last schedulable" in lone.reason
    healed = NodeCase("n1", "h100", "ok", False, tainted=True, healthy_since=NOW - timedelta(hours=30))
    recent = NodeCase("n2", "h100", "ok", False, tainted=True, healthy_since=NOW - timedelta(hours=3))
    actions = {d.node: d.action for d in decide([healed, recent], RemediationPolicy(), NOW)}
    assert actions == {"n1": "untaint", "n2": "keep"}
