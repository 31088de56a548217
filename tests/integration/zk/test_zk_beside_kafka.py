"""Beside a Kafka cluster (issue #50), against a real ZooKeeper: tokensvc's election and
broker registry live under ``/tokensvc`` and touch none of Kafka's coordination znodes;
the cluster id is only read; a broker that may not be controller (a wrong clock) stands
aside and resigns; a KRaft migration's ``/migration`` is seen at once.

Kafka's own brokers on the same ensemble are in tests/integration/kafka/; here the
pieces are checked one by one, with Kafka's znodes written as a Kafka broker writes them.
"""

from __future__ import annotations

import threading

import pytest

from tests.support.wait import poll_until as eventually
from tokensvc.core.clock import FakeClock
from zk import layout
from zk.brokers import BrokerRegistry
from zk.client import ZkSettings, open_client
from zk.election import ControllerElection
from zk.kraft import KraftMigrationWatch

TIMEOUT_S = 10.0
KAFKA_CONTROLLER = b'{"version":2,"brokerid":1,"timestamp":"1700000000000","kraftControllerEpoch":-1}'


@pytest.fixture
def clients(zk_connect):
    made = []

    def make():
        client = open_client(ZkSettings(zk_connect, session_timeout_ms=4000))
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()


def _snapshot(client, paths):
    """Data and version of each of Kafka's coordination znodes that exist."""
    found = {}
    for path in paths:
        got = client.exists(path)
        if got is not None:
            found[path] = (client.get(path)[0], got.version, client.get_children(path))
    return found


def test_election_and_registry_beside_kafka_touch_none_of_kafkas_coordination(clients):
    kafka = clients()
    # What a Kafka broker that is its cluster's controller has written.
    kafka.create("/controller_epoch", b"7")
    kafka.create("/controller", KAFKA_CONTROLLER, ephemeral=True)
    kafka.create("/brokers/ids/1", b'{"version":5}', ephemeral=True, makepath=True)
    kafka.create("/cluster/id", b'{"version":"1","id":"kafka-cluster-id-0000"}', makepath=True)
    before = _snapshot(kafka, layout.KAFKA_COORDINATION_ROOTS + (layout.BROKER_IDS,))

    brokers = []
    for broker_id in (101, 102):
        client = clients()
        registry = BrokerRegistry(client, clock=FakeClock(1_700_000_000_000),
                                  paths=layout.BESIDE_KAFKA)
        registry.register(broker_id, {"SASL_PLAINTEXT": ("SASL_PLAINTEXT", "127.0.0.1", 9000)})
        registry.start()
        election = ControllerElection(client, broker_id, clock=FakeClock(1_700_000_000_000),
                                      paths=layout.BESIDE_KAFKA)
        election.start()
        brokers.append((registry, election))
    try:
        eventually(lambda: sum(e.is_controller for _, e in brokers) == 1, timeout=TIMEOUT_S)
        winner = next(e for _, e in brokers if e.is_controller)
        assert layout.decode_controller(kafka.get("/tokensvc/controller")[0]) == winner.broker_id
        assert sorted(kafka.get_children("/tokensvc/brokers/ids")) == ["101", "102"]
        eventually(lambda: sorted(brokers[0][0].brokers()) == [101, 102], timeout=TIMEOUT_S)
        # The Kafka cluster's id is read, never replaced.
        assert brokers[0][0].cluster_id() == "kafka-cluster-id-0000"
    finally:
        for registry, election in brokers:
            election.close()
            registry.close()
    assert _snapshot(kafka, layout.KAFKA_COORDINATION_ROOTS + (layout.BROKER_IDS,)) == before
    assert kafka.get_children("/brokers/ids") == ["1"]


def test_beside_kafka_before_any_kafka_broker_the_cluster_id_is_tokensvcs_own(clients):
    client = clients()
    registry = BrokerRegistry(client, paths=layout.BESIDE_KAFKA)
    first = registry.cluster_id()
    assert registry.cluster_id() == first
    assert client.exists(layout.CLUSTER_ID) is None
    assert layout.decode_cluster_id(client.get(layout.OWN_CLUSTER_ID)[0]) == first


def test_an_ineligible_broker_stands_aside_and_an_ineligible_controller_resigns(clients):
    allowed = {1: True, 2: False}
    elections = []
    for broker_id in (1, 2):
        election = ControllerElection(clients(), broker_id, paths=layout.BESIDE_KAFKA,
                                      eligible=lambda b=broker_id: allowed[b])
        election.start()
        elections.append(election)
    one, two = elections
    try:
        eventually(lambda: one.is_controller and two.controller_id() == 1, timeout=TIMEOUT_S)
        # Broker 1's clock goes wrong: it resigns, and broker 2 (now eligible) wins.
        allowed[1], allowed[2] = False, True
        one.reconsider()
        eventually(lambda: two.is_controller, timeout=TIMEOUT_S)
        assert not one.is_controller
        eventually(lambda: one.controller_id() == 2, timeout=TIMEOUT_S)
        # Broker 2 goes too while broker 1 is still ineligible: no controller at all.
        allowed[2] = False
        two.reconsider()
        eventually(lambda: not two.is_controller and two.controller_id() is None,
                   timeout=TIMEOUT_S)
        eventually(lambda: one.controller_id() is None, timeout=TIMEOUT_S)
        assert not one.is_controller
        # Broker 1's clock is back: it takes the role again.
        allowed[1] = True
        one.reconsider()
        eventually(lambda: one.is_controller, timeout=TIMEOUT_S)
    finally:
        for election in elections:
            election.close()


def test_the_migration_znode_is_seen_at_once_and_remembered(clients):
    client = clients()
    seen = threading.Event()
    watch = KraftMigrationWatch(client, on_change=lambda started: started and seen.set())
    watch.start()
    try:
        assert not watch.started
        other = clients()
        other.create(layout.MIGRATION, b'{"version":0,"kraft_controller_id":3000}')
        assert seen.wait(TIMEOUT_S)
        assert watch.started
        other.delete(layout.MIGRATION)
        # Kafka never rolls a migration back by deleting the znode: still refused.
        other.sync("/")
        assert watch.started
    finally:
        watch.close()


def test_a_migration_already_under_way_is_seen_at_start(clients):
    client = clients()
    client.create(layout.MIGRATION, b"{}")
    watch = KraftMigrationWatch(client)
    watch.start()
    try:
        assert watch.started
    finally:
        watch.close()
