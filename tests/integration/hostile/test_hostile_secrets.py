"""No secret lands anywhere after a full run, and the master key stays out of server.properties.

A two-broker ``LocalCluster`` with its own managed ZooKeeper reads the master key from a
0600 file (``delegation.token.secret.key.file``). A workload exercises everything that
touches a secret: users created over the wire (AlterUserScramCredentials carries a
salted password), token creates on both brokers, token logins with both mechanisms,
renewals by a renewer and refused ones by a stranger, expire-now, a token swept by the
expiry check, failed logins (wrong password, wrong HMAC, an expired token, and a client
that sends a token's HMAC as its user name), describes (their answers carry HMACs).

Then every znode, both brokers' metrics pages and every file the cluster wrote -- broker
logs, audit files, ZooKeeper's logs, snapshots and transaction logs -- are searched for
every secret of the run, raw and in base64 (standard and URL-safe, with and without
padding) and hex: each token's HMAC, the users' passwords and salted passwords, a token's
derived SCRAM keys (salted password, client, stored and server key, learnt from a real
exchange) and the master key. Only the files whose job is to hold a secret are skipped:
the key file, ``server.properties`` (inter-broker password; checked to hold no master
key), ``admin.properties`` and ``cluster.json`` (admin password; all mode 0600).

A second, one-broker cluster takes the master key from an environment variable.
"""

from __future__ import annotations

import base64
import os
import secrets
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.client import WireClient
from tests.support.local_cluster import ClusterFactory, broker_address
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.core.keys import token_hmac
from tokensvc.protocol import RequestHeader, decode_response, encode_request, frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism
from tokensvc.scram.messages import ServerFirstMessage
from zk.client import open_client

ITERATIONS = 4096
SECRET_HOLDERS = {"server.properties", "admin.properties", "cluster.json"}


def eventually(fn: Callable[[], object], timeout: float = 10.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = fn()
        except (AssertionError, ConnectionError):
            if time.monotonic() > deadline:
                raise
        else:
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError("condition not met in time")
        time.sleep(0.05)


def encodings(secret: bytes) -> dict[str, bytes]:
    """The forms a secret could be written in."""
    std = base64.b64encode(secret)
    url = base64.urlsafe_b64encode(secret)
    return {"raw": secret, "base64": std, "base64 unpadded": std.rstrip(b"="),
            "urlsafe": url, "urlsafe unpadded": url.rstrip(b"="),
            "hex": secret.hex().encode(), "HEX": secret.hex().upper().encode()}


class Secrets:
    def __init__(self) -> None:
        self.needles: dict[str, bytes] = {}

    def add(self, name: str, secret: bytes | str) -> None:
        value = secret.encode() if isinstance(secret, str) else secret
        for form, encoded in encodings(value).items():
            if len(encoded) >= 12:
                self.needles[f"{name} ({form})"] = encoded

    def found_in(self, data: bytes) -> list[str]:
        return [name for name, needle in self.needles.items() if needle in data]


def _admin(cluster: LocalCluster, broker_id: int) -> WireClient:
    return WireClient(broker_address(cluster, broker_id), cluster.info["admin"]["username"],
                      cluster.info["admin"]["password"])


def _upsert_user(cluster: LocalCluster, user: str, password: str, found: Secrets) -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    salt = secrets.token_bytes(32)
    salted = mechanism.salted_password(password, salt, ITERATIONS)
    found.add(f"{user} password", password)
    found.add(f"{user} salted password", salted)
    with _admin(cluster, 2) as admin:
        answer = admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                               {"Deletions": [], "Upsertions": [{
            "Name": user, "Mechanism": mechanism.wire_type, "Iterations": ITERATIONS,
            "Salt": salt, "SaltedPassword": salted}]})
    assert [r["ErrorCode"] for r in answer["Results"]] == [0]


def _login(cluster: LocalCluster, broker_id: int, user: str, password: str, **kw) -> WireClient:
    return eventually(lambda: WireClient(broker_address(cluster, broker_id), user, password, **kw))


def _token_password(created: dict) -> str:
    return base64.b64encode(created["Hmac"]).decode("ascii")


def _call(sock: socket.socket, api_key: int, version: int, body: dict) -> dict:
    sock.sendall(frame(encode_request(RequestHeader(api_key, version, 1, "secrets"), body)))
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return decode_response(api_key, version, sock.recv(size, socket.MSG_WAITALL))[1]


def _token_derived_keys(address: tuple[str, int], created: dict) -> dict[str, bytes]:
    """Log in with the token by hand and return the SCRAM keys derived from its HMAC."""
    mechanism = ScramMechanism.SCRAM_SHA_512
    password = _token_password(created)
    client = ScramClient(mechanism, created["TokenId"], password,
                         extensions={"tokenauth": "true"})
    with socket.create_connection(address, timeout=10) as sock:
        assert _call(sock, ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": mechanism.mechanism_name}
                     )["ErrorCode"] == 0
        first = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client.first_message()})
        server_first = ServerFirstMessage.parse(first["AuthBytes"].decode())
        final = _call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                      {"AuthBytes": client.final_message(first["AuthBytes"])})
        assert final["ErrorCode"] == 0
    salted = mechanism.salted_password(password, server_first.salt, server_first.iterations)
    client_key = mechanism.hmac(salted, b"Client Key")
    return {"salted password": salted, "client key": client_key,
            "stored key": mechanism.hash(client_key),
            "server key": mechanism.hmac(salted, b"Server Key")}


def _znodes(client, path: str = "/") -> Iterator[tuple[str, bytes]]:
    data, _ = client.get(path)
    yield path, data or b""
    for child in client.get_children(path):
        yield from _znodes(client, f"{path.rstrip('/')}/{child}")


@pytest.fixture
def key_file(tmp_path: Path) -> tuple[Path, str]:
    master_key = secrets.token_urlsafe(32)
    path = tmp_path / "keys" / "master.key"
    path.parent.mkdir()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(master_key + "\n")
    return path, master_key


@pytest.fixture
def cluster(cluster_factory: ClusterFactory, key_file: tuple[Path, str]) -> LocalCluster:
    """A cluster per test, reading the test's master key file."""
    # Its own managed ZooKeeper: the search for secrets covers ZooKeeper's files too.
    return cluster_factory(brokers=2, own_zookeeper=True, overrides={
        "delegation.token.secret.key.file": str(key_file[0]),
        "delegation.token.expiry.check.interval.ms": "300",
        "connection.failed.authentication.delay.ms": "10",
    })


def test_after_a_full_run_no_log_audit_file_or_znode_holds_a_secret(
    cluster: LocalCluster, key_file: tuple[Path, str]
) -> None:
    _, master_key = key_file
    found = Secrets()
    found.add("master key", master_key)
    found.add("admin password", cluster.info["admin"]["password"])
    for broker_id in cluster.broker_ids():
        config = Path(cluster.broker_info(broker_id)["config"]).read_text()
        assert master_key not in config
        assert "delegation.token.secret.key.file=" in config
        for line in config.splitlines():
            if line.startswith("inter.broker.sasl.password="):
                found.add("inter-broker password", line.split("=", 1)[1])

    passwords = {user: secrets.token_urlsafe(18) for user in ("alice", "bob", "mallory")}
    for user, password in passwords.items():
        _upsert_user(cluster, user, password, found)

    tokens: list[dict] = []
    with _login(cluster, 1, "alice", passwords["alice"]) as alice:
        for renewers in ([{"PrincipalType": "User", "PrincipalName": "bob"}], []):
            tokens.append(alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                        {"Renewers": renewers, "MaxLifetimeMs": -1}))
        tokens.append(alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                    {"Renewers": [], "MaxLifetimeMs": 800}))
        assert alice.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3,
                             {"Owners": None})["ErrorCode"] == 0
    with _admin(cluster, 2) as admin:
        tokens.append(admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, {
            "Renewers": [], "MaxLifetimeMs": -1, "OwnerPrincipalType": "User",
            "OwnerPrincipalName": "bob"}))
        assert admin.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3,
                             {"Owners": None})["ErrorCode"] == 0
    assert [t["ErrorCode"] for t in tokens] == [0, 0, 0, 0]
    renewable, expire_now, short_lived, for_bob = tokens
    for created in tokens:
        found.add(f"token {created['TokenId']} hmac", created["Hmac"])
        assert created["Hmac"] == token_hmac(master_key, created["TokenId"])

    for broker_id in cluster.broker_ids():
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            _login(cluster, broker_id, renewable["TokenId"], _token_password(renewable),
                   token=True, mechanism=mechanism).close()
    for name, key in _token_derived_keys(broker_address(cluster, 2), renewable).items():
        found.add(f"token {name}", key)
    with _login(cluster, 2, "bob", passwords["bob"]) as bob:
        assert bob.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                           {"Hmac": renewable["Hmac"], "RenewPeriodMs": 60_000}
                           )["ErrorCode"] == 0
    with _login(cluster, 1, "mallory", passwords["mallory"]) as mallory:
        assert mallory.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                               {"Hmac": renewable["Hmac"], "RenewPeriodMs": 1}
                               )["ErrorCode"] == Errors.DELEGATION_TOKEN_OWNER_MISMATCH
    # expire_now was created through broker 1; broker 2 finds it by its HMAC in its own
    # cache, so first wait until broker 2 serves it.
    _login(cluster, 2, expire_now["TokenId"], _token_password(expire_now), token=True).close()
    with _login(cluster, 2, "alice", passwords["alice"]) as alice:
        assert alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                             {"Hmac": expire_now["Hmac"], "ExpiryTimePeriodMs": -1}
                             )["ErrorCode"] == 0
    _login(cluster, 1, for_bob["TokenId"], _token_password(for_bob), token=True).close()
    time.sleep(1.0)  # the 800 ms token expires and is swept

    failures = [
        ("alice", "not-alices-password", False),
        (renewable["TokenId"], base64.b64encode(b"\x01" * 64).decode(), True),
        (short_lived["TokenId"], _token_password(short_lived), True),
        (_token_password(renewable), "the hmac typed as a user name", False),
        (renewable["Hmac"].hex(), _token_password(renewable), True),
    ]
    for user, password, token in failures:
        for broker_id in cluster.broker_ids():
            with pytest.raises(ConnectionError):
                WireClient(broker_address(cluster, broker_id), user, password, token=token)

    zk = open_client(cluster.zk_settings())
    try:
        eventually(lambda: zk.exists(f"/delegation_token/tokens/{short_lived['TokenId']}") is None)
        leaks = {path: found.found_in(data) for path, data in _znodes(zk)}
    finally:
        zk.stop()
        zk.close()
    for broker_id in cluster.broker_ids():
        url = f"http://{cluster.broker_info(broker_id)['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as page:
            leaks[f"metrics of broker {broker_id}"] = found.found_in(page.read())
    cluster.down()

    searched = []
    for path in sorted(cluster.directory.rglob("*")):
        if path.is_file() and path.name not in SECRET_HOLDERS:
            searched.append(path.relative_to(cluster.directory))
            leaks[str(path)] = found.found_in(path.read_bytes())
    assert {place: names for place, names in leaks.items() if names} == {}
    # The search finds what is there: the files that hold secrets on purpose.
    assert "inter-broker password (raw)" in found.found_in(
        Path(cluster.broker_info(1)["config"]).read_bytes())
    assert "admin password (raw)" in found.found_in(
        (cluster.directory / "admin.properties").read_bytes())
    assert "master key (raw)" in found.found_in(key_file[0].read_bytes())
    assert any(p.parts[0] == "audit" for p in searched)
    assert any(p.name == "broker.log" for p in searched)
    assert any(p.parts[0] == "zookeeper" and p.name.startswith("log.") for p in searched)
    assert len(found.needles) > 60


def test_master_key_from_an_environment_variable(
    tmp_path: Path, zk_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    master_key = secrets.token_urlsafe(32)
    monkeypatch.setenv("TOKENSVC_TEST_MASTER_KEY", master_key)
    overrides = {"delegation.token.secret.key.env": "TOKENSVC_TEST_MASTER_KEY"}
    with LocalCluster.up(tmp_path / "cluster", brokers=1, zookeeper=zk_connect,
                         overrides=overrides, die_with_parent=True) as cluster:
        config = Path(cluster.broker_info(1)["config"]).read_text()
        with _admin(cluster, 1) as admin:
            created = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                    {"Renewers": [], "MaxLifetimeMs": -1})
        assert created["ErrorCode"] == 0
        assert created["Hmac"] == token_hmac(master_key, created["TokenId"])
        _login(cluster, 1, created["TokenId"], _token_password(created), token=True).close()
        log = Path(cluster.broker_info(1)["log"]).read_text()
    assert master_key not in config
    assert "delegation.token.secret.key.env=TOKENSVC_TEST_MASTER_KEY" in config
    assert master_key not in log
