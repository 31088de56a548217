"""Issue 21, the login parts, reproduced as the probe did them, against three real brokers.

* One salt everywhere: a live token id and an unknown id each get the same SCRAM salt on
  every broker (the probe told them apart because a live token's salt differed per broker).
* Equal time at server-first: known users, unknown users, live tokens (implicit) and
  unknown token ids take the same path; the four distributions of the client-first round
  trip, sampled interleaved over real sockets, are compared pairwise and a systematic gap
  fails the test (the probe saw unknown names ~25 us slower, 99.7% above the known median).
* Token sessions cannot create lasting access: a session logged in with a token owned by
  a super user may not alter SCRAM credentials or ACLs (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
  audited), on the controller and through a forwarding broker; the setting
  ``delegation.token.session.alter.access.enable`` restores Kafka's behaviour.
* No user may be named like a live token id (UNACCEPTABLE_CREDENTIAL, clear message).
* Old librdkafka's repeated client nonce: refused by default with its own audit reason and
  a log line naming the host and the setting; accepted with the setting on.
* No secret in the audit log, even misplaced: a password typed as a user name is audited
  only as a keyed fingerprint, the same on every broker, and the audit findings (the
  reference rules the Spark job is held to) still group its repeats.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import secrets
import socket
import time
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest

from tests.support.client import WireClient
from tests.support.inproc import (
    InProcessBroker,
    chroot_with_users,
    running_brokers,
    wait_for_controller,
)
from tests.support.wait import retry
from tokensvc.audit.events import FINGERPRINT_PREFIX, name_fingerprint
from tokensvc.audit.rules import ReferenceAudit, RuleSettings
from tokensvc.core.errors import Errors
from tokensvc.protocol import RequestHeader, decode_response, encode_request, frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.formatter import ScramMechanism, client_proof
from tokensvc.scram.messages import ServerFirstMessage

# Names of one length (a token id's, 22): the classes must differ by what they are only.
KNOWN_USER = "known-user-22-char-nam"
UNKNOWN_USER = "unknown-user-22-char-n"
PASSWORDS = {"admin": "admin-secret", "broker": "broker-secret", "alice": "alice-secret",
             "bob": "bob-secret", KNOWN_USER: "known-secret"}
BOUND_S = 20.0
NOT_ALLOWED = int(Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> Iterator[dict]:
    connect = chroot_with_users(zookeeper.connect, "login-oracles", list(PASSWORDS.items()))
    audit = tmp_path_factory.mktemp("oracles-audit")
    with running_brokers(connect, (1, 2, 3), audit_root=audit) as brokers:
        controller = wait_for_controller(brokers)
        yield {
            "brokers": brokers,
            "controller": controller,
            "forwarder": next(b for b in brokers if b is not controller),
            "audit": audit,
        }


# -- helpers -----------------------------------------------------------------------------------


class RawConnection:
    """A blocking Kafka-protocol connection that stops wherever the test wants."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._corr = count(1)

    def call(self, api_key: int, version: int, body: dict) -> dict:
        header = RequestHeader(api_key, version, next(self._corr), "oracle-probe")
        self.sock.sendall(frame(encode_request(header, body)))
        size = int.from_bytes(self._read(4), "big")
        return decode_response(api_key, version, self._read(size))[1]

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def client_first(address: tuple[str, int], mechanism: str, name: str,
                 extensions: str = "") -> tuple[bytes, int]:
    """(server-first message, nanoseconds of the client-first round trip) on a new connection."""
    conn = RawConnection(address)
    try:
        handshake = conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": mechanism})
        assert handshake["ErrorCode"] == 0
        message = f"n,,n={name},r={secrets.token_urlsafe(18)}{extensions}".encode()
        started = time.perf_counter_ns()
        answer = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": message})
        elapsed = time.perf_counter_ns() - started
    finally:
        conn.close()
    assert answer["ErrorCode"] == 0, answer
    return bytes(answer["AuthBytes"]), elapsed


def create_token(broker: InProcessBroker, user: str) -> dict:
    with WireClient(broker.address(), user, PASSWORDS[user]) as client:
        created = client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                 {"Renewers": [], "MaxLifetimeMs": -1})
    assert created["ErrorCode"] == 0, created
    return created


def wait_known_everywhere(brokers: list[InProcessBroker], token_id: str) -> None:
    def known() -> None:
        assert all(b.broker.local.cache.info(token_id) is not None for b in brokers)

    retry(known, BOUND_S, errors=(AssertionError,), interval=0.02)


def token_session(broker: InProcessBroker, token: dict) -> WireClient:
    return WireClient(broker.address(), token["TokenId"],
                      base64.b64encode(token["Hmac"]).decode(), mechanism="SCRAM-SHA-512")


def audit_events(audit: Path, broker_id: int | None = None) -> list[dict]:
    folders = [audit / str(broker_id)] if broker_id is not None else sorted(audit.iterdir())
    events = []
    for folder in folders:
        for path in sorted(folder.glob("*.jsonl")):
            events += [json.loads(line) for line in path.read_text().splitlines()]
    return events


def auc(a: list[int], b: list[int]) -> float:
    """P(a sample of ``a`` > a sample of ``b``), ties half: 0.5 = not separable."""
    merged = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    rank_sum_a, i = 0.0, 0
    while i < len(merged):
        j = i
        while j + 1 < len(merged) and merged[j + 1][0] == merged[i][0]:
            j += 1
        rank = (i + j) / 2 + 1
        rank_sum_a += rank * sum(1 for k in range(i, j + 1) if merged[k][1] == 0)
        i = j + 1
    return (rank_sum_a - len(a) * (len(a) + 1) / 2) / (len(a) * len(b))


def scram_upsertion(user: str, password: str) -> dict:
    mechanism = ScramMechanism.SCRAM_SHA_256
    salt = secrets.token_bytes(32)
    return {"Name": user, "Mechanism": mechanism.wire_type, "Iterations": 4096, "Salt": salt,
            "SaltedPassword": mechanism.salted_password(password, salt, 4096)}


ACL_CREATION = {"ResourceType": 2, "ResourceName": "payments", "ResourcePatternType": 3,
                "Principal": "User:mallory", "Host": "*", "Operation": 3, "PermissionType": 3}
ACL_FILTER = {"ResourceTypeFilter": 2, "ResourceNameFilter": "payments", "PatternTypeFilter": 3,
              "PrincipalFilter": None, "HostFilter": None, "Operation": 1, "PermissionType": 1}


# -- one salt everywhere -----------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_live_token_and_an_unknown_id_each_get_one_salt_on_every_broker(
    cluster: dict, mechanism: str
) -> None:
    brokers = cluster["brokers"]
    token = create_token(cluster["forwarder"], "alice")
    wait_known_everywhere(brokers, token["TokenId"])
    unknown = base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()
    for name in (token["TokenId"], unknown):
        for extensions in ("", ",tokenauth=true"):
            salts = {
                ServerFirstMessage.parse(
                    client_first(b.address(), mechanism, name, extensions)[0].decode()).salt
                for b in brokers
            }
            assert len(salts) == 1, (name, extensions)
    # ...and it is the salt the token's credential really has: the token logs in everywhere.
    for broker in brokers:
        token_session(broker, token).close()


# -- equal time at server-first ---------------------------------------------------------------


def test_known_unknown_user_live_and_unknown_token_are_not_separable_at_server_first(
    cluster: dict,
) -> None:
    broker = cluster["forwarder"]
    token = create_token(cluster["controller"], "alice")
    wait_known_everywhere([broker], token["TokenId"])
    assert len(KNOWN_USER) == len(UNKNOWN_USER) == len(token["TokenId"])
    classes = {
        "known user": KNOWN_USER,
        "unknown user": UNKNOWN_USER,
        "live token": token["TokenId"],
        "unknown token": base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode(),
    }
    samples: dict[str, list[int]] = {name: [] for name in classes}
    order = list(classes) * 300
    random.Random(21).shuffle(order)
    for value in classes.values():  # warm every path once (first use of each code path)
        client_first(broker.address(), "SCRAM-SHA-512", value)
    for name in order:
        samples[name].append(client_first(broker.address(), "SCRAM-SHA-512", classes[name])[1])
    # AUC 0.5: a sample of one class is as likely to be slower as faster than one of
    # another. The probe's 25 us gap gave ~0.95, and the code before issue 21 0.28-0.31;
    # noise alone stays near 0.5. Under load a small real gap shows: the live token's
    # own branch (its lookups found something, _choose took the token path) cost ~0.5 us
    # in process and read 0.32-0.35 here with two busy processes on the machine (and in
    # CI), 0.43-0.46 quiet. Since both paths run the same steps it reads 0.43-0.56 under
    # that load. The band is 0.33-0.67: well clear of the old code's 0.31.
    separations = {
        (a, b): round(auc(samples[a], samples[b]), 3)
        for i, a in enumerate(classes) for b in list(classes)[i + 1:]
    }
    assert all(0.33 < value < 0.67 for value in separations.values()), separations


# -- token sessions cannot create lasting access ----------------------------------------------


@pytest.mark.parametrize("role", ["controller", "forwarder"])
def test_a_super_users_token_session_may_not_alter_credentials_or_acls(
    cluster: dict, role: str
) -> None:
    token = create_token(cluster["controller"], "admin")  # owned by a super user
    wait_known_everywhere(cluster["brokers"], token["TokenId"])
    broker = cluster[role]
    with token_session(broker, token) as session:
        altered = session.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "Deletions": [], "Upsertions": [scram_upsertion("alice", "stolen-password")]})
        created = session.request(ApiKey.CREATE_ACLS, 2, {"Creations": [ACL_CREATION]})
        deleted = session.request(ApiKey.DELETE_ACLS, 2, {"Filters": [ACL_FILTER]})
    assert [r["ErrorCode"] for r in altered["Results"]] == [NOT_ALLOWED]
    assert "delegation.token.session.alter.access.enable" in altered["Results"][0]["ErrorMessage"]
    assert [r["ErrorCode"] for r in created["Results"]] == [NOT_ALLOWED]
    assert [r["ErrorCode"] for r in deleted["FilterResults"]] == [NOT_ALLOWED]
    # Nothing changed: alice's password still works, the ACL does not exist.
    WireClient(broker.address(), "alice", PASSWORDS["alice"]).close()
    with WireClient(cluster["controller"].address(), "admin", PASSWORDS["admin"]) as admin:
        described = admin.request(ApiKey.DESCRIBE_ACLS, 2, ACL_FILTER)
    assert described["ErrorCode"] == 0 and described["Resources"] == []

    def audited() -> None:
        refused = [e for e in audit_events(cluster["audit"], broker.broker.broker_id)
                   if e["type"] in ("credential", "acl") and e["error_code"] == NOT_ALLOWED
                   and e["requester"] == "User:admin"]
        assert {e["type"] for e in refused} == {"credential", "acl"}

    retry(audited, BOUND_S, errors=(AssertionError,), interval=0.05)


def test_the_setting_restores_kafkas_behaviour_for_token_sessions(
    zookeeper, tmp_path_factory
) -> None:
    connect = chroot_with_users(zookeeper.connect, "alter-access", list(PASSWORDS.items()))
    with running_brokers(connect, (1,),
                         delegation_token_session_alter_access_enable="true") as (broker,):
        token = create_token(broker, "admin")
        with token_session(broker, token) as session:
            altered = session.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
                "Deletions": [], "Upsertions": [scram_upsertion("bob", "new-bob-password")]})
        assert [r["ErrorCode"] for r in altered["Results"]] == [0]
        WireClient(broker.address(), "bob", "new-bob-password", mechanism="SCRAM-SHA-256").close()


# -- collisions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["controller", "forwarder"])
def test_a_user_named_like_a_live_token_id_is_refused(cluster: dict, role: str) -> None:
    token = create_token(cluster["controller"], "alice")
    wait_known_everywhere(cluster["brokers"], token["TokenId"])
    with WireClient(cluster[role].address(), "admin", PASSWORDS["admin"]) as admin:
        altered = admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "Deletions": [], "Upsertions": [scram_upsertion(token["TokenId"], "squatter")]})
    (result,) = altered["Results"]
    assert result["ErrorCode"] == int(Errors.UNACCEPTABLE_CREDENTIAL)
    assert token["TokenId"] in result["ErrorMessage"]
    assert "delegation token" in result["ErrorMessage"]
    # The name still logs in as the token (implicitly), not as a user.
    with token_session(cluster[role], token):
        pass
    assert not cluster[role].broker.local.users.credentials(token["TokenId"])


# -- no secret in the audit log, even misplaced --------------------------------------------------


def test_a_password_typed_as_a_user_name_is_audited_only_as_a_fingerprint(cluster: dict) -> None:
    misplaced = "Tr0ub4dor&3-typed-in-the-user-field"
    attempts = 4
    for i in range(attempts):
        broker = cluster["brokers"][i % len(cluster["brokers"])]
        with pytest.raises(ConnectionError):
            WireClient(broker.address(), misplaced, "whatever")
    with pytest.raises(ConnectionError):  # the same mistake in a token login
        WireClient(cluster["forwarder"].address(), misplaced, "whatever", token=True)
    expected = name_fingerprint(cluster["controller"].broker.local.audit_fingerprint_key, misplaced)
    assert expected.startswith(FINGERPRINT_PREFIX)
    assert {b.broker.local.audit_fingerprint_key for b in cluster["brokers"]} == {
        cluster["controller"].broker.local.audit_fingerprint_key}

    def audited() -> list[dict]:
        failures = [e for e in audit_events(cluster["audit"])
                    if e["type"] == "authentication" and e["username"] == expected]
        assert len(failures) == attempts + 1
        return failures

    failures = retry(audited, BOUND_S, errors=(AssertionError,), interval=0.05)
    assert {e["broker_id"] for e in failures} == {b.broker.broker_id for b in cluster["brokers"]}
    assert {e["reason"] for e in failures} == {"unknown_user", "unknown_token"}
    for path in cluster["audit"].rglob("*.jsonl"):
        assert misplaced not in path.read_text()
    # The findings still group the repeats (the Spark job is held to these reference rules).
    reference = ReferenceAudit(RuleSettings(burst_threshold=1, burst_window_s=3600))
    for event in sorted(failures, key=lambda e: e["ts"]):
        reference.observe(event)
    findings = reference.result().findings
    assert any(f.rule == "unknown_token" and f.token_id == expected for f in findings), findings


def test_a_known_user_failing_is_audited_by_name(cluster: dict) -> None:
    with pytest.raises(ConnectionError):
        WireClient(cluster["forwarder"].address(), "bob", "not-bobs-password")

    def audited() -> None:
        assert any(e["type"] == "authentication" and e["username"] == "bob"
                   and e["reason"] == "bad_proof"
                   for e in audit_events(cluster["audit"], cluster["forwarder"].broker.broker_id))

    retry(audited, BOUND_S, errors=(AssertionError,), interval=0.05)


# -- old librdkafka: the repeated client nonce, through a real broker ---------------------------


def librdkafka_login(address: tuple[str, int], user: str, password: str) -> dict:
    """A SCRAM-SHA-256 login as librdkafka < 2.6.1 sends it (client-final nonce = client nonce
    + the whole server-first nonce, the proof over that text); the last SaslAuthenticate answer."""
    mechanism = ScramMechanism.SCRAM_SHA_256
    conn = RawConnection(address)
    try:
        assert conn.call(ApiKey.SASL_HANDSHAKE, 1,
                         {"Mechanism": mechanism.mechanism_name})["ErrorCode"] == 0
        cnonce = secrets.token_urlsafe(18)
        bare = f"n={user},r={cnonce}"
        first = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": f"n,,{bare}".encode()})
        server_first = bytes(first["AuthBytes"]).decode()
        parsed = ServerFirstMessage.parse(server_first)
        without_proof = f"c=biws,r={cnonce}{parsed.nonce}"
        salted = mechanism.salted_password(password, parsed.salt, parsed.iterations)
        proof = client_proof(mechanism, salted, f"{bare},{server_first},{without_proof}".encode())
        final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        return conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": final})
    finally:
        conn.close()


def test_old_librdkafka_nonce_is_refused_audited_and_logged_by_default(
    cluster: dict, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tokensvc.broker.sasl")
    broker = cluster["forwarder"]
    answer = librdkafka_login(broker.address(), "bob", PASSWORDS["bob"])
    assert answer["ErrorCode"] == int(Errors.SASL_AUTHENTICATION_FAILED)

    def audited() -> None:
        assert any(e["type"] == "authentication" and e["username"] == "bob"
                   and e["reason"] == "repeated_client_nonce"
                   for e in audit_events(cluster["audit"], broker.broker.broker_id))

    retry(audited, BOUND_S, errors=(AssertionError,), interval=0.05)
    notices = [r.getMessage() for r in caplog.records if "repeats the client nonce" in r.getMessage()]
    assert notices and "127.0.0.1" in notices[0]
    assert "sasl.scram.accept.repeated.client.nonce" in notices[0]


def test_old_librdkafka_nonce_logs_in_when_the_setting_is_on(zookeeper) -> None:
    connect = chroot_with_users(zookeeper.connect, "repeated-nonce", list(PASSWORDS.items()))
    with running_brokers(connect, (1,),
                         sasl_scram_accept_repeated_client_nonce="true") as (broker,):
        answer = librdkafka_login(broker.address(), "bob", PASSWORDS["bob"])
        assert answer["ErrorCode"] == 0 and bytes(answer["AuthBytes"]).startswith(b"v=")
