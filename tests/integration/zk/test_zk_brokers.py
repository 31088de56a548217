"""BrokerRegistry against a real ZooKeeper: Kafka's registration JSON, the watched list of
live brokers, re-registration after session expiry, and the cluster id."""

from __future__ import annotations

import json
import re

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from tests.support.wait import poll_until as eventually
from tests.support.zkclient import expire_session
from tokensvc.core.clock import FakeClock
from zk import layout
from zk.brokers import BrokerIdInUseError, BrokerRegistry
from zk.client import ZkSettings, open_client


def endpoints(port: int) -> dict[str, tuple[str, str, int]]:
    return {
        "SASL_PLAINTEXT": ("SASL_PLAINTEXT", "127.0.0.1", port),
        "SASL_SSL": ("SASL_SSL", "127.0.0.1", port + 1),
    }


@pytest.fixture
def open_registry(zk_connect):
    made: list[tuple[KazooClient, BrokerRegistry]] = []

    def make() -> tuple[KazooClient, BrokerRegistry]:
        client = open_client(ZkSettings(zk_connect, session_timeout_ms=4000))
        registry = BrokerRegistry(client, clock=FakeClock(1_700_000_000_000))
        made.append((client, registry))
        return client, registry

    yield make
    for client, registry in made:
        registry.close()
        client.stop()
        client.close()


def test_registration_is_kafkas_version_5_json_on_an_ephemeral_znode(open_registry):
    client, registry = open_registry()
    registry.register(1, endpoints(9092))
    data, stat = client.get("/brokers/ids/1")
    assert json.loads(data) == {
        "version": 5,
        "listener_security_protocol_map": {
            "SASL_PLAINTEXT": "SASL_PLAINTEXT",
            "SASL_SSL": "SASL_SSL",
        },
        "endpoints": ["SASL_PLAINTEXT://127.0.0.1:9092", "SASL_SSL://127.0.0.1:9093"],
        "host": None,
        "port": -1,
        "jmx_port": -1,
        "timestamp": "1700000000000",
        "features": {},
        "rack": None,
    }
    assert stat.ephemeralOwner == client.client_id[0]


def test_brokers_lists_every_live_registration_and_follows_changes(open_registry):
    _, watcher = open_registry()
    watcher.start()
    client_a, a = open_registry()
    _, b = open_registry()
    a.register(1, endpoints(9092))
    b.register(2, endpoints(9094), rack="r2")
    assert eventually(lambda: set(watcher.brokers()) == {1, 2})
    assert watcher.brokers()[2]["endpoints"] == endpoints(9094)
    assert watcher.brokers()[2]["rack"] == "r2"
    a.close()
    assert eventually(lambda: set(watcher.brokers()) == {2})
    client_a.stop()


def test_brokers_before_start_reads_directly(open_registry):
    _, registry = open_registry()
    registry.register(5, endpoints(9092))
    assert set(registry.brokers()) == {5}


def test_registration_comes_back_after_session_expiry(open_registry):
    client, registry = open_registry()
    registry.register(3, endpoints(9092))
    _, watcher = open_registry()
    watcher.start()
    assert eventually(lambda: 3 in watcher.brokers())
    old_session = client.client_id[0]
    expire_session(client)

    def owner() -> int | None:
        try:  # the client is reconnecting with a new session meanwhile
            stat = client.exists("/brokers/ids/3")
        except KazooException:
            return None
        return stat.ephemeralOwner if stat else None

    assert eventually(lambda: owner() not in (None, old_session))
    assert owner() == client.client_id[0]
    assert eventually(lambda: 3 in watcher.brokers())


def test_a_broker_id_held_by_another_live_session_is_refused(open_registry):
    _, first = open_registry()
    first.register(4, endpoints(9092))
    _, second = open_registry()
    with pytest.raises(BrokerIdInUseError, match="broker id 4"):
        second.register(4, endpoints(9192))


def test_registering_twice_in_one_session_updates_the_znode(open_registry):
    client, registry = open_registry()
    registry.register(6, endpoints(9092))
    registry.register(6, endpoints(9200))
    assert layout.decode_broker(6, client.get("/brokers/ids/6")[0])["endpoints"] == endpoints(
        9200
    )


def test_cluster_id_is_created_once_and_shared(open_registry):
    client, a = open_registry()
    _, b = open_registry()
    first = a.cluster_id()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", first)
    assert b.cluster_id() == first
    assert json.loads(client.get("/cluster/id")[0]) == {"version": "1", "id": first}
