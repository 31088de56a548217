"""Issue 15: every SCRAM client logs in with a delegation token, with its default settings.

Three in-process brokers (real sockets, real ZooKeeper, audit logs). For each client and
each of SCRAM-SHA-256 and SCRAM-SHA-512, a fresh token is created through a
non-controller broker, and the client, configured as a user would configure it (token id
as user name, base64 HMAC as password, no extension), then:

1. logs in on every broker, the non-controllers included, and reads metadata;
2. is refused token management -- or, for clients with no delegation-token API, the
   lasting-access requests it can send (SCRAM credentials, ACLs) -- with
   DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, because the session is token-authenticated;
3. sees its connections closed when the token is expired through another broker: every
   broker where the client holds a connection audits its sessions as revoked, and the
   client's next request (from each of its instances) fails.

Clients: confluent-kafka (its bundled librdkafka), aiokafka, kafka-python without the
plug-in, kafka-python with :mod:`tokensvc.kafka_python_token` (``tokenauth=true``), and
tokensvc's own AdminClient. The audit log shows each login as ``kind=token`` with
``implicit`` true exactly for the clients that sent no extension. User logins of the new
client (aiokafka) are tested here; the others' are in test_interop.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.types import Array, Bytes, Int16, Int32, Int64, Schema, String
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion
from confluent_kafka.admin import ScramMechanism as ConfluentScram
from kafka import KafkaAdminClient
from kafka.admin import ScramMechanism as KafkaPythonScram
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion

from tests.support.client import WireClient
from tests.support.inproc import (
    InProcessBroker,
    chroot_with_users,
    running_brokers,
    wait_for_controller,
)
from tests.support.wait import retry
from tokensvc.admin.client import AdminClient
from tokensvc.admin.results import AdminError
from tokensvc.client_config import client_config_from_properties
from tokensvc.core.errors import Errors
from tokensvc.kafka_python_token import token_login_config
from tokensvc.protocol.api import ApiKey

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORDS = {"admin": "admin-secret", "broker": "broker-secret", "alice": "alice-secret"}
# Correctness bounds, not speed targets (propagation speed is benchmark B3).
BOUND_S = 20.0
NOT_ALLOWED = int(Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> Iterator[dict]:
    connect = chroot_with_users(zookeeper.connect, "client-matrix", list(PASSWORDS.items()))
    audit = tmp_path_factory.mktemp("matrix-audit")
    with running_brokers(connect, (1, 2, 3), audit_root=audit) as brokers:
        controller = wait_for_controller(brokers)
        others = [b for b in brokers if b is not controller]
        yield {"brokers": brokers, "issuer": others[1], "login": others[0], "audit": audit}


def _bootstrap(broker: InProcessBroker) -> str:
    host, port = broker.address()
    return f"{host}:{port}"


def _create_token(broker: InProcessBroker) -> dict:
    with WireClient(broker.address(), "alice", PASSWORDS["alice"]) as alice:
        created = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                {"Renewers": [], "MaxLifetimeMs": -1})
    assert created["ErrorCode"] == 0, created
    return created


def _wait_known_everywhere(brokers: list[InProcessBroker], token_id: str) -> None:
    def known() -> None:
        missing = [b.broker.broker_id for b in brokers if b.broker.local.cache.info(token_id) is None]
        assert not missing, f"brokers {missing} do not have token {token_id} yet"

    retry(known, BOUND_S, errors=(AssertionError,), interval=0.02)


def _expire_through(broker: InProcessBroker, token: dict) -> None:
    with WireClient(broker.address(), "alice", PASSWORDS["alice"]) as owner:
        expired = owner.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                {"Hmac": token["Hmac"], "ExpiryTimePeriodMs": 0})
    assert expired["ErrorCode"] == 0, expired


def _audit_events(audit: Path, broker_id: int) -> list[dict]:
    events = []
    for path in sorted((audit / str(broker_id)).glob("*.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines()]
    return events


def _eventually(check: Callable[[], Any]) -> Any:
    return retry(check, BOUND_S, errors=(Exception,), interval=0.05)


# -- the clients, each as a user would configure it -------------------------------------------


class Client:
    """One client library logged in to one broker."""

    name: ClassVar[str]
    implicit: ClassVar[bool] = True

    def __init__(self, bootstrap: str, mechanism: str, username: str, password: str) -> None:
        raise NotImplementedError

    def broker_ids(self) -> set[int]:
        """Read metadata; the broker ids it lists."""
        raise NotImplementedError

    def refused_management(self) -> None:
        """Attempt token (or lasting-access) management; assert it was refused as a token
        session is refused."""
        raise NotImplementedError

    def request_fails(self) -> None:
        """Assert that a metadata request now fails (the connection was closed and a new
        login with the expired token is refused)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Confluent(Client):
    name = "confluent-kafka"

    def __init__(self, bootstrap: str, mechanism: str, username: str, password: str) -> None:
        self.errors: list[Any] = []
        self.admin = ConfluentAdmin({
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": username,
            "sasl.password": password,
            "log_level": 0,  # refused re-logins after the expiry are expected; keep quiet
            "error_cb": self.errors.append,
        })

    def broker_ids(self) -> set[int]:
        return set(self.admin.list_topics(timeout=15).brokers)

    def refused_management(self) -> None:
        # librdkafka has no delegation-token API: it is refused what it can send.
        upsert = UserScramCredentialUpsertion(
            "mallory", ScramCredentialInfo(ConfluentScram.SCRAM_SHA_256, 4096), b"pw")
        futures = self.admin.alter_user_scram_credentials([upsert])
        with pytest.raises(KafkaException) as refused:
            futures["mallory"].result(timeout=15)
        assert refused.value.args[0].code() == NOT_ALLOWED

    def request_fails(self) -> None:
        try:
            self.admin.list_topics(timeout=1)
        except KafkaException:
            return
        raise AssertionError("librdkafka still reads metadata")

    def close(self) -> None:
        self.admin = None


class KafkaPython(Client):
    name = "kafka-python"

    def __init__(self, bootstrap: str, mechanism: str, username: str, password: str) -> None:
        self.admin = KafkaAdminClient(**self._settings(bootstrap, mechanism, username, password))

    @staticmethod
    def _settings(bootstrap: str, mechanism: str, username: str, password: str) -> dict:
        return {
            "bootstrap_servers": [bootstrap],
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": username,
            "sasl_plain_password": password,
        }

    def broker_ids(self) -> set[int]:
        return {b["broker_id"] for b in self.admin.describe_cluster()["brokers"]}

    def refused_management(self) -> None:
        # kafka-python has no delegation-token API: it is refused what it can send.
        result = self.admin.alter_user_scram_credentials(
            [KpUpsertion("mallory", KafkaPythonScram.SCRAM_SHA_256, "pw")])
        assert "delegation.token.session.alter.access.enable" in (result["mallory"] or "")

    def request_fails(self) -> None:
        try:
            self.admin.describe_cluster()
        except Exception:  # noqa: BLE001 - kafka-python raises several kinds
            return
        raise AssertionError("kafka-python still reads metadata")

    def close(self) -> None:
        self.admin.close()


class KafkaPythonPlugin(KafkaPython):
    name = "kafka-python + plug-in"
    implicit = False

    @staticmethod
    def _settings(bootstrap: str, mechanism: str, username: str, password: str) -> dict:
        return {
            "bootstrap_servers": [bootstrap],
            "security_protocol": "SASL_PLAINTEXT",
            **token_login_config(username, password, mechanism),
        }


class _CreateDelegationTokenResponseV1(Response):
    API_KEY = ApiKey.CREATE_DELEGATION_TOKEN
    API_VERSION = 1
    SCHEMA = Schema(
        ("error_code", Int16), ("principal_type", String("utf-8")),
        ("principal_name", String("utf-8")), ("issue_timestamp_ms", Int64),
        ("expiry_timestamp_ms", Int64), ("max_timestamp_ms", Int64),
        ("token_id", String("utf-8")), ("hmac", Bytes), ("throttle_time_ms", Int32),
    )


class _CreateDelegationTokenRequestV1(RequestStruct):
    """Kafka's CreateDelegationToken v1 (aiokafka defines no delegation-token messages)."""

    API_KEY = ApiKey.CREATE_DELEGATION_TOKEN
    API_VERSION = 1
    RESPONSE_TYPE = _CreateDelegationTokenResponseV1
    SCHEMA = Schema(
        ("renewers", Array(("principal_type", String("utf-8")),
                           ("principal_name", String("utf-8")))),
        ("max_lifetime_ms", Int64),
    )


class _CreateDelegationToken(Request[_CreateDelegationTokenRequestV1]):
    API_KEY = ApiKey.CREATE_DELEGATION_TOKEN

    def build(
        self, request_struct_class: type[_CreateDelegationTokenRequestV1]
    ) -> _CreateDelegationTokenRequestV1:
        return request_struct_class(renewers=[], max_lifetime_ms=-1)


class AioKafka(Client):
    name = "aiokafka"

    def __init__(self, bootstrap: str, mechanism: str, username: str, password: str) -> None:
        self.loop = asyncio.new_event_loop()

        async def start() -> AIOKafkaClient:  # aiokafka binds a client to the running loop
            client = AIOKafkaClient(
                bootstrap_servers=bootstrap,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism,
                sasl_plain_username=username,
                sasl_plain_password=password,
            )
            await client.bootstrap()
            return client

        self.client = self.loop.run_until_complete(start())

    def _node(self) -> int:
        return next(iter(self.client.cluster.brokers())).nodeId

    def broker_ids(self) -> set[int]:
        metadata = self.loop.run_until_complete(self.client.fetch_all_metadata())
        return {b.nodeId for b in metadata.brokers()}

    def refused_management(self) -> None:
        response = self.loop.run_until_complete(
            self.client.send(self._node(), _CreateDelegationToken()))
        assert response.error_code == NOT_ALLOWED and response.hmac in (b"", None)

    def request_fails(self) -> None:
        try:
            self.loop.run_until_complete(
                self.client.send(self._node(), MetadataRequest(topics=[])))
        except Exception:  # noqa: BLE001 - a connection or an authentication error
            return
        raise AssertionError("aiokafka still reads metadata")

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


class TokensvcAdmin(Client):
    name = "tokensvc AdminClient"

    def __init__(self, bootstrap: str, mechanism: str, username: str, password: str) -> None:
        config = client_config_from_properties({
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                f'required username="{username}" password="{password}";',
        })
        self.admin = AdminClient(bootstrap, config, timeout_s=5)

    def broker_ids(self) -> set[int]:
        return {node.broker_id for node in self.admin.describe_cluster().brokers}

    def refused_management(self) -> None:
        with pytest.raises(AdminError) as refused:
            self.admin.create_token()
        assert refused.value.error == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED

    def request_fails(self) -> None:
        try:
            self.admin.describe_cluster()
        except AdminError:
            return
        raise AssertionError("the AdminClient still reads metadata")

    def close(self) -> None:
        self.admin.close()


CLIENTS = [Confluent, AioKafka, KafkaPython, KafkaPythonPlugin, TokensvcAdmin]


# -- the matrix ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client_class", CLIENTS, ids=lambda c: c.name)
def test_fresh_token_logs_in_everywhere_is_refused_management_and_closed_on_expiry(
    cluster: dict, client_class: type[Client], mechanism: str
) -> None:
    brokers: list[InProcessBroker] = cluster["brokers"]
    token = _create_token(cluster["issuer"])
    token_id, hmac = token["TokenId"], base64.b64encode(token["Hmac"]).decode()
    _wait_known_everywhere(brokers, token_id)
    ids = {b.broker.broker_id for b in brokers}
    # The non-controller first, then every other broker.
    order = [cluster["login"]] + [b for b in brokers if b is not cluster["login"]]
    clients: list[Client] = []
    try:
        for broker in order:
            client = client_class(_bootstrap(broker), mechanism, token_id, hmac)
            clients.append(client)
            assert client.broker_ids() == ids
        clients[0].refused_management()

        def token_logins_audited() -> None:
            for broker in brokers:
                logins = [e for e in _audit_events(cluster["audit"], broker.broker.broker_id)
                          if e["type"] == "authentication" and e["username"] == token_id]
                assert logins, f"broker {broker.broker.broker_id} audited no login of the token"
                assert all(e["outcome"] == "success" and e["kind"] == "token"
                           and e["principal"] == "User:alice"
                           and e["implicit"] is client_class.implicit for e in logins), logins

        _eventually(token_logins_audited)
        # Clients keep the connections they need (librdkafka connects sparsely); each
        # earlier token's sessions are closed by now, so these are this token's.
        live = [b for b in brokers if b.broker.parts.sessions.token_sessions() >= 1]
        assert live

        _expire_through(cluster["issuer"], token)

        def revoked_everywhere() -> None:
            for broker in live:
                revoked = [e for e in _audit_events(cluster["audit"], broker.broker.broker_id)
                           if e["type"] == "session" and e["action"] == "revoked"
                           and e["token_id"] == token_id]
                assert revoked, f"broker {broker.broker.broker_id} kept the token's sessions"

        _eventually(revoked_everywhere)
        for client in clients:
            _eventually(client.request_fails)
    finally:
        for client in clients:
            client.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_user_login_reads_metadata(cluster: dict, mechanism: str) -> None:
    client = AioKafka(_bootstrap(cluster["login"]), mechanism, "alice", PASSWORDS["alice"])
    try:
        assert client.broker_ids() == {b.broker.broker_id for b in cluster["brokers"]}
    finally:
        client.close()


# The plug-in hands user logins to kafka-python's own SCRAM: the KafkaPython row covers it
# (the plug-in is installed process-wide once a plug-in row has run).
@pytest.mark.parametrize("client_class", [c for c in CLIENTS if c is not KafkaPythonPlugin],
                         ids=lambda c: c.name)
def test_a_user_login_of_every_client_is_not_token_authenticated(
    cluster: dict, client_class: type[Client]
) -> None:
    client = client_class(_bootstrap(cluster["login"]), "SCRAM-SHA-512", "alice",
                          PASSWORDS["alice"])
    try:
        assert client.broker_ids() == {b.broker.broker_id for b in cluster["brokers"]}
    finally:
        client.close()
    def audited_as_user() -> None:
        logins = [e for e in _audit_events(cluster["audit"], cluster["login"].broker.broker_id)
                  if e["type"] == "authentication" and e["username"] == "alice"
                  and e["outcome"] == "success"]
        assert logins and all(e["kind"] == "user" and not e["implicit"] for e in logins)

    _eventually(audited_as_user)
