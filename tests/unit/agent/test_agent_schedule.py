"""The agent's pure schedule, driven over weeks of simulated time against a model of the
cluster's token rules (Kafka's: expiry = min(max, now + period)), with a fake clock."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from tokensvc.agent import schedule
from tokensvc.agent.schedule import Held, Kind, Policy

DAY, HOUR, MINUTE = 86_400_000, 3_600_000, 60_000


@dataclass
class Simulation:
    """The agent's loop with the schedule's actions applied to a model cluster."""

    period: int
    lifetime: int
    policy: Policy
    now: int = 1_000_000
    seed: int = 1

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed).random
        self.current: Held | None = None
        self.retiring: list[Held] = []
        self.live: dict[str, Held] = {}  # what the cluster holds
        self.counts = {kind: 0 for kind in Kind}
        self.renewal_offsets: list[int] = []
        self.successor_leads: list[int] = []
        self.max_live = 0
        self.overlaps: list[int] = []
        self._next_id = 0
        self._replaced_at: dict[str, int] = {}

    def run(self, until: int) -> None:
        while self.now < until:
            action = schedule.next_action(self.current, self.retiring, self.period, self.policy,
                                          self.now)
            if action.kind is Kind.WAIT:
                assert action.at_ms > self.now
                self.now = action.at_ms
                self._check()
                continue
            self.counts[action.kind] += 1
            getattr(self, f"_{action.kind.value}")(action)
            self._check()

    def _check(self) -> None:
        live = [t for t in self.live.values() if t.expiry_ms > self.now]
        self.max_live = max(self.max_live, len(live))
        assert self.current is not None and self.current.valid_at(self.now), (
            f"no valid token at {self.now}")
        assert len(live) <= 2

    def _create(self, action: schedule.Action) -> None:
        self._next_id += 1
        token_id = f"t{self._next_id}"
        max_ms = self.now + self.lifetime
        held = schedule.after_create(token_id, self.now, min(max_ms, self.now + self.period),
                                     max_ms, self.period, self.policy, self.rng)
        if self.current is not None:
            self.successor_leads.append(self.current.max_ms - self.now)
            self.retiring.append(schedule.retire(self.current, self.now, self.period, self.policy))
            self._replaced_at[self.current.token_id] = self.now
        self.current = held
        self.live[token_id] = held

    _replace = _create

    def _renew(self, action: schedule.Action) -> None:
        token = self.live[action.token_id]
        base = token.issue_ms if token.expiry_ms - token.issue_ms == self.period else None
        expiry = min(token.max_ms, self.now + self.period)
        renewed = schedule.after_renew(token, self.now, expiry, self.period, self.policy,
                                       self.rng)
        if base is not None:
            self.renewal_offsets.append(self.now - base)
        self.live[token.token_id] = renewed
        if self.current is not None and self.current.token_id == token.token_id:
            self.current = renewed
        else:
            self.retiring = [renewed if t.token_id == token.token_id else t
                             for t in self.retiring]

    def _expire(self, action: schedule.Action) -> None:
        self.overlaps.append(self.now - self._replaced_at[action.token_id])
        del self.live[action.token_id]
        self.retiring = [t for t in self.retiring if t.token_id != action.token_id]


def test_four_weeks_with_kafkas_defaults_never_leave_the_job_without_a_token() -> None:
    policy = Policy(overlap_ms=10 * MINUTE, margin_ms=5 * MINUTE)
    sim = Simulation(period=DAY, lifetime=7 * DAY, policy=policy)
    sim.run(until=sim.now + 28 * DAY)
    # A token lives 7 days minus its lead (1 day + 5 minutes): four weeks hold 4 successors.
    assert sim.counts[Kind.REPLACE] == 4
    assert sim.counts[Kind.EXPIRE] == 4
    # Renewed about every 0.75 day while it lives: 5-6 renewals per token.
    assert 20 <= sim.counts[Kind.RENEW] <= 36
    assert all(lead == DAY + 5 * MINUTE for lead in sim.successor_leads)
    assert all(overlap == 10 * MINUTE for overlap in sim.overlaps)
    assert sim.max_live == 2


def test_renewal_comes_at_the_fraction_of_the_period_within_the_jitter() -> None:
    sim = Simulation(period=DAY, lifetime=7 * DAY, policy=Policy(overlap_ms=MINUTE))
    sim.run(until=sim.now + 14 * DAY)
    jitter = 0.05 * DAY
    assert sim.renewal_offsets, "the first renewal of a token was never seen"
    assert all(0.75 * DAY - jitter <= o <= 0.75 * DAY + jitter for o in sim.renewal_offsets)
    # ... and really jittered: a thousand agents do not renew in the same second.
    assert len(set(sim.renewal_offsets)) > 1


def test_jitter_spreads_agents_started_together() -> None:
    times = {schedule.renew_time(0, DAY, 7 * DAY, DAY, Policy(), random.Random(i).random)
             for i in range(1000)}
    assert len(times) > 900
    assert min(times) >= 0.70 * DAY and max(times) <= 0.80 * DAY


def test_compressed_lifetimes_of_the_integration_test_give_replacements_and_renewals() -> None:
    # expiry 20 s, max 60 s, overlap 5 s, margin 2 s: three minutes.
    sim = Simulation(period=20_000, lifetime=60_000,
                     policy=Policy(overlap_ms=5_000, margin_ms=2_000))
    sim.run(until=sim.now + 180_000)
    assert sim.counts[Kind.REPLACE] >= 3
    assert sim.counts[Kind.RENEW] >= 6
    assert all(overlap == 5_000 for overlap in sim.overlaps)


def test_max_lifetime_shorter_than_the_period_replaces_without_renewing() -> None:
    # Legal in Kafka: expiry = max. Renewals cannot extend such a token.
    sim = Simulation(period=HOUR, lifetime=HOUR, policy=Policy(overlap_ms=MINUTE,
                                                               margin_ms=MINUTE))
    sim.run(until=sim.now + 10 * HOUR)
    assert sim.counts[Kind.RENEW] == 0
    assert sim.counts[Kind.REPLACE] >= 10


def test_retiring_token_is_renewed_if_it_would_expire_before_its_retirement() -> None:
    policy = Policy(overlap_ms=30_000, margin_ms=1_000, jitter_fraction=0.0)
    old = Held("old", 0, 100_000, 200_000, renew_at_ms=95_000, retire_at_ms=120_000)
    current = Held("new", 90_000, 150_000, 300_000, renew_at_ms=200_000)
    action = schedule.next_action(current, [old], 60_000, policy, 96_000)
    assert (action.kind, action.token_id) == (Kind.RENEW, "old")
    assert action.deadline_ms == 100_000


def test_overdue_expiry_of_an_old_token_comes_before_anything_else() -> None:
    policy = Policy(overlap_ms=1_000, margin_ms=1_000)
    old = Held("old", 0, 50_000, 60_000, None, retire_at_ms=10_000)
    current = Held("new", 5_000, 10_000, 65_000, renew_at_ms=9_000)
    action = schedule.next_action(current, [old], 5_000, policy, 20_000)
    assert (action.kind, action.token_id) == (Kind.EXPIRE, "old")


def test_no_token_or_an_expired_one_means_create_now() -> None:
    policy = Policy()
    assert schedule.next_action(None, [], None, policy, 5).kind is Kind.CREATE
    dead = Held("t", 0, 10, 100, renew_at_ms=8)
    assert schedule.next_action(dead, [], 10, policy, 10).kind is Kind.CREATE


def test_actions_carry_the_current_tokens_expiry_as_deadline() -> None:
    policy = Policy(overlap_ms=1_000, margin_ms=1_000, jitter_fraction=0.0)
    held = Held("t", 0, 20_000, 60_000, renew_at_ms=15_000)
    renew = schedule.next_action(held, [], 20_000, policy, 15_000)
    assert (renew.kind, renew.deadline_ms) == (Kind.RENEW, 20_000)
    wait = schedule.next_action(held, [], 20_000, policy, 1_000)
    assert (wait.kind, wait.at_ms) == (Kind.WAIT, 15_000)


@pytest.mark.parametrize(("lifetime", "period", "overlap", "margin", "problem"), [
    (4_000, 20_000, 5_000, 0, "not longer than the overlap"),
    (10_000, 10_000, 6_000, 4_000, "leaves no time"),
])
def test_lifetimes_that_cannot_be_kept_are_named(
    lifetime: int, period: int, overlap: int, margin: int, problem: str
) -> None:
    policy = Policy(overlap_ms=overlap, margin_ms=margin)
    assert problem in (schedule.check_lifetime(lifetime, period, policy) or "")


def test_lifetimes_that_fit_pass_the_check() -> None:
    assert schedule.check_lifetime(60_000, 20_000, Policy(overlap_ms=5_000, margin_ms=2_000)) is None
    assert schedule.check_lifetime(7 * DAY, DAY, Policy()) is None


@pytest.mark.parametrize("kwargs", [
    {"renew_fraction": 0}, {"renew_fraction": 1}, {"renew_fraction": 0.95, "jitter_fraction": 0.1},
    {"overlap_ms": -1}, {"margin_ms": -5},
])
def test_policy_refuses_values_that_cannot_work(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Policy(**kwargs)


def test_default_overlap_and_margin_follow_the_period_with_caps() -> None:
    policy = Policy()
    assert (policy.overlap(20_000), policy.margin(20_000)) == (5_000, 2_000)
    assert (policy.overlap(DAY), policy.margin(DAY)) == (10 * MINUTE, 5 * MINUTE)
