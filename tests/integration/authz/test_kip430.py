"""KIP-430: the cluster's authorized operations, as confluent-kafka (librdkafka) and a raw
Metadata request see them, on in-process brokers with and without an authorizer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
from confluent_kafka.admin import AclOperation as ConfluentOp
from confluent_kafka.admin import AdminClient

from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, add_user, bootstrap_user, broker_properties
from tokensvc.authz.acl import AclOperation, ResourceType, supported_operations
from tokensvc.authz.authorizer import ALL_OPERATIONS_BITFIELD, NOT_REQUESTED_BITFIELD
from tokensvc.core.config import BrokerConfig
from tokensvc.protocol.api import ApiKey

CLUSTER_OPS = {op.name for op in supported_operations(ResourceType.CLUSTER)}


def _start(connect: str, **extra: str) -> InProcessBroker:
    broker = InProcessBroker(BrokerConfig.from_properties(broker_properties(1, connect, **extra)))
    broker.start()
    deadline = time.monotonic() + 15
    while not broker.broker.is_controller and time.monotonic() < deadline:
        time.sleep(0.05)
    return broker


@pytest.fixture(scope="module")
def broker(zookeeper) -> Iterator[InProcessBroker]:
    connect = f"{zookeeper.connect}/kip430-{time.monotonic_ns()}"
    for user in ("admin", "broker", "alice", "nobody"):
        bootstrap_user(connect, user, f"{user}-secret")
    running = _start(connect)
    with WireClient(running.address(), "admin", "admin-secret") as admin:
        response = admin.request(ApiKey.CREATE_ACLS, 3, {"Creations": [
            _cluster_acl("User:alice", AclOperation.ALTER),
            _cluster_acl("User:alice", AclOperation.IDEMPOTENT_WRITE),
            _cluster_acl("User:alice", AclOperation.ALTER_CONFIGS),
        ]})
    assert [r["ErrorCode"] for r in response["Results"]] == [0, 0, 0]
    yield running
    running.stop()


@pytest.fixture(scope="module")
def open_broker(zookeeper) -> Iterator[InProcessBroker]:
    connect = f"{zookeeper.connect}/kip430-open-{time.monotonic_ns()}"
    for user in ("broker", "nobody"):
        bootstrap_user(connect, user, f"{user}-secret")
    running = _start(connect, **{"authorizer.class.name": ""})
    yield running
    running.stop()


def _cluster_acl(principal: str, op: AclOperation) -> dict:
    return {"ResourceType": int(ResourceType.CLUSTER), "ResourceName": "kafka-cluster",
            "ResourcePatternType": 3, "Principal": principal, "Host": "*",
            "Operation": int(op), "PermissionType": 3}


def confluent_operations(broker: InProcessBroker, user: str) -> set[str] | None:
    host, port = broker.address()
    client = AdminClient({
        "bootstrap.servers": f"{host}:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
        "log_level": 0,
    })
    future: Future = client.describe_cluster(include_authorized_operations=True,
                                             request_timeout=15)
    described = future.result(timeout=30)
    assert [n.id for n in described.nodes] == [1]
    if described.authorized_operations is None:
        return None
    return {op.name for op in described.authorized_operations}


def test_super_user_sees_every_cluster_operation(broker):
    assert confluent_operations(broker, "admin") == CLUSTER_OPS


def test_user_sees_exactly_its_granted_operations_and_the_implied_ones(broker):
    # ALTER implies DESCRIBE and ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    assert confluent_operations(broker, "alice") == {
        "ALTER", "DESCRIBE", "IDEMPOTENT_WRITE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}


def describe_cluster_bitfield(broker: InProcessBroker, user: str) -> int:
    with WireClient(broker.address(), user, f"{user}-secret") as client:
        response = client.request(ApiKey.DESCRIBE_CLUSTER, 0,
                                  {"IncludeClusterAuthorizedOperations": True})
    assert response["ErrorCode"] == 0
    return response["ClusterAuthorizedOperations"]


def test_user_without_cluster_acls_sees_no_operation(broker):
    # confluent-kafka turns an empty operation list into None (DescribeClusterResult keeps
    # the list only when it is non-empty); on the wire the field is 0, not "not requested".
    assert confluent_operations(broker, "nobody") is None
    assert describe_cluster_bitfield(broker, "nobody") == 0


def test_without_an_authorizer_everyone_sees_every_cluster_operation(open_broker):
    assert confluent_operations(open_broker, "nobody") == CLUSTER_OPS
    assert ALL_OPERATIONS_BITFIELD(ResourceType.CLUSTER) == 8096


def test_confluent_names_every_cluster_operation_tokensvc_reports():
    assert CLUSTER_OPS <= {op.name for op in ConfluentOp}


@pytest.mark.parametrize("user, expected", [
    ("admin", 8096),
    ("alice", (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11) | (1 << 12)),
    ("nobody", 0),
])
def test_metadata_reports_the_bitfield_only_when_asked(broker, user, expected):
    with WireClient(broker.address(), user, f"{user}-secret") as client:
        asked = client.request(ApiKey.METADATA, 10, {
            "Topics": [], "AllowAutoTopicCreation": False,
            "IncludeClusterAuthorizedOperations": True, "IncludeTopicAuthorizedOperations": False,
        })
        not_asked = client.request(ApiKey.METADATA, 10, {
            "Topics": [], "AllowAutoTopicCreation": False,
            "IncludeClusterAuthorizedOperations": False, "IncludeTopicAuthorizedOperations": False,
        })
    assert asked["ClusterAuthorizedOperations"] == expected
    assert not_asked["ClusterAuthorizedOperations"] == NOT_REQUESTED_BITFIELD


def test_new_cluster_acl_shows_up_in_the_next_answer(broker):
    user = f"u{uuid.uuid4().hex[:8]}"
    add_user([broker], user, f"{user}-secret")
    assert describe_cluster_bitfield(broker, user) == 0
    with WireClient(broker.address(), "admin", "admin-secret") as admin:
        response = admin.request(ApiKey.CREATE_ACLS, 3, {"Creations": [
            _cluster_acl(f"User:{user}", AclOperation.CLUSTER_ACTION)]})
    assert [r["ErrorCode"] for r in response["Results"]] == [0]
    assert confluent_operations(broker, user) == {"CLUSTER_ACTION"}
