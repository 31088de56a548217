"""The agent schedules by the cluster's time (issue #36): its loop (tokensvc.agent.runner)
driven over days of simulated time on a host whose clock is 20 minutes off, against a
fake cluster that keeps Kafka's token rules on the true time. No sockets, no sleeps: the
agent's waits move the fake time.

A one-hour renewal period makes the skew matter: by its host's clock alone, an agent 20
minutes behind would renew at 75% + 33% of the period (after the expiry), and one 20
minutes ahead at 42%. By the cluster's time it renews at 75% ± the jitter.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tokensvc.admin import AdminError
from tokensvc.admin.propagation import Propagation
from tokensvc.admin.results import TokenDescription
from tokensvc.agent.runner import Agent, AgentOptions
from tokensvc.agent.schedule import Policy
from tokensvc.client_config import ClientConfig
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.scram.formatter import ScramMechanism

HOUR, MINUTE = 3_600_000, 60_000
PERIOD, LIFETIME = HOUR, 6 * HOUR
LATENCY_MS = 15.0  # each way, for every request


class FakeCluster:
    """The brokers as the agent's admin client sees them, on the true time ``now_ms``."""

    def __init__(self) -> None:
        self.now_ms = 1_800_000_000_000.0
        self.timeout_s = 30.0
        self.tokens: dict[bytes, TokenDescription] = {}
        self.renew_fractions: list[float] = []
        self.created = 0
        self.calls: list[str] = []  # "create" and "renew", in order
        self._last_change: dict[bytes, float] = {}

    def _round_trip(self) -> int:
        self.now_ms += LATENCY_MS
        stamped = int(self.now_ms)
        self.now_ms += LATENCY_MS
        return stamped

    def create_token(self, renewers=(), owner=None, max_lifetime_ms=-1,
                     labels=None) -> TokenDescription:
        now = self._round_trip()
        self.created += 1
        self.calls.append("create")
        hmac = f"hmac-{self.created}".encode()
        owner = owner or KafkaPrincipal.user("agent")
        token = TokenDescription(f"t{self.created}", hmac, owner, KafkaPrincipal.user("agent"),
                                 tuple(renewers), now, min(now + LIFETIME, now + PERIOD),
                                 now + LIFETIME)
        self.tokens[hmac] = token
        self._last_change[hmac] = now
        return token

    def renew_token(self, hmac: bytes, renew_period_ms: int = -1) -> int:
        now = self._round_trip()
        token = self.tokens.get(hmac)
        if token is None:
            raise AdminError(Errors.DELEGATION_TOKEN_NOT_FOUND, "no such token")
        if now > token.expiry_ms:
            raise AdminError(Errors.DELEGATION_TOKEN_EXPIRED, "renewed after its expiry")
        self.calls.append("renew")
        self.renew_fractions.append((now - self._last_change[hmac]) / PERIOD)
        expiry = min(token.max_ms, now + PERIOD)
        self.tokens[hmac] = TokenDescription(token.token_id, hmac, token.owner, token.requester,
                                             token.renewers, token.issue_ms, expiry,
                                             token.max_ms)
        self._last_change[hmac] = now
        return expiry

    def expire_token(self, hmac: bytes, expiry_period_ms: int = -1) -> int:
        now = self._round_trip()
        self.tokens.pop(hmac, None)
        return now

    def describe_tokens(self, owners=None) -> list[TokenDescription]:
        self._round_trip()
        return [t for t in self.tokens.values() if t.expiry_ms > self.now_ms]

    def wait_all_brokers(self, check, timeout_s=None) -> Propagation:
        self._round_trip()
        return Propagation(0.0, ())

    def close(self) -> None:
        pass


class SimulatedStop:
    """The agent's stop event: waiting moves the fake time; set once ``until_ms`` is past."""

    def __init__(self, cluster: FakeCluster, until_ms: float) -> None:
        self.cluster = cluster
        self.until_ms = until_ms

    def is_set(self) -> bool:
        return self.cluster.now_ms >= self.until_ms

    def wait(self, seconds: float | None = None) -> bool:
        self.cluster.now_ms += max(seconds or 0.0, 0.001) * 1000
        return self.is_set()


def run_agent(cluster: FakeCluster, skew_ms: float, days: float,
              state_path: Path | None = None) -> Agent:
    """Run an agent on a host whose clock reads the true time plus ``skew_ms``."""
    options = AgentOptions(
        bootstrap="broker:9092",
        config=ClientConfig(security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism=ScramMechanism.SCRAM_SHA_512,
                            username="agent", password="secret"),
        sinks=(), state_path=str(state_path) if state_path else None,
        policy=Policy(), keep_on_exit=True,
    )
    stop = SimulatedStop(cluster, cluster.now_ms + days * 24 * HOUR)
    agent = Agent(options, clock=lambda: (cluster.now_ms + skew_ms) / 1000,
                  rng=random.Random(7).random, stop=stop)  # type: ignore[arg-type]
    agent.admin = cluster  # type: ignore[assignment]
    assert agent.run() == 0
    return agent


@pytest.mark.parametrize("skew_ms", [-20 * MINUTE, 20 * MINUTE])
def test_an_agent_twenty_minutes_off_renews_by_the_cluster_time(skew_ms: float) -> None:
    cluster = FakeCluster()
    agent = run_agent(cluster, skew_ms, days=2)
    assert len(cluster.renew_fractions) > 20
    policy = Policy()
    low = policy.renew_fraction - policy.jitter_fraction - 0.001
    high = policy.renew_fraction + policy.jitter_fraction + 0.001
    assert all(low <= f <= high for f in cluster.renew_fractions), cluster.renew_fractions
    # Successors were created as the max lifetime approached, and the job always held one.
    assert cluster.created >= 2 * 24 * HOUR // LIFETIME
    current = agent.state.current
    assert current is not None and current.held.expiry_ms > cluster.now_ms
    # What it measured: the cluster's time minus its host's clock.
    assert agent.metrics.registry.get_sample_value(
        "tokensvc_agent_clock_offset_seconds") == pytest.approx(-skew_ms / 1000, abs=0.05)
    assert abs(agent.now_ms() - cluster.now_ms) <= 2 * LATENCY_MS + 1


def test_a_restarted_agent_keeps_the_cluster_time_from_its_state_file(tmp_path: Path) -> None:
    cluster = FakeCluster()
    state = tmp_path / "agent.state"
    run_agent(cluster, -20 * MINUTE, days=0.5, state_path=state)
    calls, renewed = len(cluster.calls), len(cluster.renew_fractions)
    # The next run renews the token it finds in the state before it creates anything:
    # its first renewal is on time only if it starts with the saved offset.
    run_agent(cluster, -20 * MINUTE, days=0.5, state_path=state)
    assert cluster.calls[calls] == "renew"
    first_after_restart = cluster.renew_fractions[renewed]
    assert 0.69 <= first_after_restart <= 0.81
