"""DescribeClientQuotas' rules (tokensvc.core.quotas) over a fixed set of config znodes.

The expected answers are those of Kafka 3.9's ZkAdminManager.describeClientQuotas for the
same znodes, worked out by hand from its rules; tests/integration/kafka/test_kafka_broker.py
asks a Kafka broker and a tokensvc broker on one ZooKeeper the same filters and compares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from tokensvc.core.errors import Errors
from tokensvc.core.quotas import (
    CLIENT_ID,
    IP,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    QuotaFilterError,
    describe,
    quota_filter,
)

SCRAM = "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096"


class Znodes:
    """The config znodes under /config by path (names sanitized), and the reads made."""

    def __init__(self, znodes: Mapping[str, Mapping[str, str]]) -> None:
        self.znodes = dict(znodes)
        self.reads: list[str] = []

    def entity(self, path: str) -> Mapping[str, str]:
        self.reads.append(path)
        return self.znodes.get(path, {})

    def entities(self, folder: str) -> Mapping[str, Mapping[str, str]]:
        self.reads.append(f"{folder}/*")
        return {p.split("/")[1]: c for p, c in self.znodes.items()
                if p.startswith(folder + "/") and p.count("/") == 1}

    def user_clients(self) -> Mapping[tuple[str, str], Mapping[str, str]]:
        self.reads.append("users/*/clients/*")
        return {(p.split("/")[1], p.split("/")[3]): c for p, c in self.znodes.items()
                if p.startswith("users/") and p.count("/") == 3}


WORLD = {
    "users/alice": {"producer_byte_rate": "1024", "SCRAM-SHA-256": SCRAM},
    "users/bob": {"SCRAM-SHA-512": SCRAM},  # credentials only: no quota entity
    "users/<default>": {"consumer_byte_rate": "2048"},
    "users/a%20b": {"request_percentage": "12.5"},
    "users/alice/clients/app": {"producer_byte_rate": "10"},
    "users/<default>/clients/<default>": {"consumer_byte_rate": "1"},
    "users/bob/clients/app": {},
    "clients/app": {"consumer_byte_rate": "500", "unrelated": "x"},
    "clients/<default>": {"producer_byte_rate": "100"},
    "ips/10.0.0.1": {"connection_creation_rate": "5"},
    "ips/<default>": {"connection_creation_rate": "50"},
    "ips/10.0.0.2": {"producer_byte_rate": "1"},  # not an ip quota key
}

ALICE = ((USER, "alice"),)
DEFAULT_USER = ((USER, None),)
SPACED = ((USER, "a b"),)
APP = ((CLIENT_ID, "app"),)
DEFAULT_CLIENT = ((CLIENT_ID, None),)
ALICE_APP = ((USER, "alice"), (CLIENT_ID, "app"))
DEFAULTS = ((USER, None), (CLIENT_ID, None))
IP1 = ((IP, "10.0.0.1"),)
DEFAULT_IP = ((IP, None),)


def exact(kind: str, name: str | None) -> dict:
    return {"EntityType": kind, "MatchType": MATCH_EXACT, "Match": name}


def default(kind: str) -> dict:
    return {"EntityType": kind, "MatchType": MATCH_DEFAULT, "Match": None}


def specified(kind: str) -> dict:
    return {"EntityType": kind, "MatchType": MATCH_SPECIFIED, "Match": None}


def run(components: list[dict], strict: bool, world: Mapping = WORLD) -> dict:
    return describe(quota_filter(components, strict), Znodes(world))


@pytest.mark.parametrize(("components", "strict", "entities"), [
    pytest.param([], False, {ALICE, DEFAULT_USER, SPACED, APP, DEFAULT_CLIENT, ALICE_APP,
                             DEFAULTS, IP1, DEFAULT_IP}, id="everything"),
    pytest.param([], True, set(), id="strict-nothing"),
    pytest.param([exact(USER, "alice")], True, {ALICE}, id="user-exact-strict"),
    pytest.param([exact(USER, "alice")], False, {ALICE, ALICE_APP}, id="user-exact"),
    pytest.param([exact(USER, "a b")], True, {SPACED}, id="user-sanitized"),
    pytest.param([default(USER)], True, {DEFAULT_USER}, id="user-default-strict"),
    pytest.param([default(USER)], False, {DEFAULT_USER, DEFAULTS}, id="user-default"),
    pytest.param([specified(USER)], True, {ALICE, DEFAULT_USER, SPACED}, id="users-strict"),
    pytest.param([specified(USER)], False, {ALICE, DEFAULT_USER, SPACED, ALICE_APP, DEFAULTS},
                 id="users"),
    pytest.param([exact(CLIENT_ID, "app")], True, {APP}, id="client-exact-strict"),
    pytest.param([exact(CLIENT_ID, "app")], False, {APP, ALICE_APP}, id="client-exact"),
    pytest.param([exact(USER, "alice"), exact(CLIENT_ID, "app")], True, {ALICE_APP},
                 id="both-exact"),
    pytest.param([default(USER), default(CLIENT_ID)], True, {DEFAULTS}, id="both-default"),
    pytest.param([specified(USER), specified(CLIENT_ID)], True, {ALICE_APP, DEFAULTS},
                 id="both-specified"),
    pytest.param([exact(USER, "bob")], False, set(), id="credentials-only"),
    pytest.param([exact(USER, "nobody")], True, set(), id="missing"),
    pytest.param([specified(IP)], True, {IP1, DEFAULT_IP}, id="ips"),
    pytest.param([exact(IP, "10.0.0.1")], True, {IP1}, id="ip-exact"),
    pytest.param([default(IP)], False, {DEFAULT_IP}, id="ip-default"),
    pytest.param([exact(IP, "10.0.0.2")], True, set(), id="ip-without-ip-keys"),
])
def test_describe_selects_what_kafka_selects(components, strict, entities) -> None:
    assert set(run(components, strict)) == entities


def test_values_are_the_quota_keys_as_floats() -> None:
    found = run([], False)
    assert found[ALICE] == {"producer_byte_rate": 1024.0}  # not its SCRAM credential
    assert found[APP] == {"consumer_byte_rate": 500.0}  # not its unrelated key
    assert found[SPACED] == {"request_percentage": 12.5}
    assert found[DEFAULT_IP] == {"connection_creation_rate": 50.0}


def test_an_exact_filter_reads_one_znode_and_lists_nothing() -> None:
    znodes = Znodes(WORLD)
    describe(quota_filter([exact(USER, "a b"), exact(CLIENT_ID, "app")], True), znodes)
    assert znodes.reads == ["users/a%20b/clients/app"]
    znodes = Znodes(WORLD)
    describe(quota_filter([default(USER)], True), znodes)
    assert znodes.reads == ["users/<default>"]


@pytest.mark.parametrize(("text", "value"), [
    ("1e3", 1000.0), ("12.5d", 12.5), (" 7 ", 7.0), ("-1", -1.0), (".5", 0.5), ("2.", 2.0),
    ("Infinity", math.inf),
])
def test_values_are_read_as_java_reads_a_double(text: str, value: float) -> None:
    world = {"users/carol": {"producer_byte_rate": text}}
    assert run([exact(USER, "carol")], True, world) == {((USER, "carol"),): {
        "producer_byte_rate": value}}


@pytest.mark.parametrize("text", ["fast", "1_000", "0x10", "", "1e", "inf"])
def test_a_stored_value_that_is_not_a_number_fails_the_request_naming_it(text: str) -> None:
    world = {"users/carol": {"producer_byte_rate": text}}
    with pytest.raises(QuotaFilterError) as raised:
        run([specified(USER)], True, world)
    assert raised.value.error is Errors.UNKNOWN_SERVER_ERROR
    assert raised.value.message == ("the quota producer_byte_rate of user=carol in ZooKeeper "
                                    "is not a number")


@pytest.mark.parametrize(("components", "error", "message"), [
    ([exact(USER, "a"), specified(USER)], Errors.INVALID_REQUEST,
     "Duplicate user filter component entity type"),
    ([default(CLIENT_ID), default(CLIENT_ID)], Errors.INVALID_REQUEST,
     "Duplicate client filter component entity type"),
    ([specified(IP), specified(IP)], Errors.INVALID_REQUEST,
     "Duplicate ip filter component entity type"),
    ([specified(USER), specified(IP)], Errors.INVALID_REQUEST,
     ("Invalid entity filter component combination, IP filter component should not be used "
      "with user or clientId filter component.")),
    ([specified("group")], Errors.UNSUPPORTED_VERSION, "Custom entity type 'group' not supported"),
    ([specified("")], Errors.INVALID_REQUEST, "Unexpected empty filter component entity type"),
    ([exact(USER, None)], Errors.INVALID_REQUEST, "an exact user match needs a name"),
    ([exact(USER, "")], Errors.INVALID_REQUEST, "Empty user not supported"),
    ([{"EntityType": USER, "MatchType": 7, "Match": None}], Errors.INVALID_REQUEST,
     "unknown match type 7 for user (0 exact, 1 default, 2 any specified)"),
])
def test_filters_kafka_refuses_are_refused_saying_why(components, error, message) -> None:
    znodes = Znodes(WORLD)
    with pytest.raises(QuotaFilterError) as raised:
        describe(quota_filter(components, False), znodes)
    assert (raised.value.error, raised.value.message) == (error, message)
    assert znodes.reads == []
