"""Issue 52: OAUTHBEARER logins (KIP-768) on a 3-broker cluster, against a real OpenID
provider (node-oidc-provider on loopback) and a Kubernetes-like issuer (a JWKS file).

- librdkafka (confluent-kafka, ``sasl.oauthbearer.method=oidc``) gets client-credentials
  tokens from the provider's token endpoint and logs in to every broker; across a
  rotation of the provider's signing key it re-authenticates (KIP-368) with a token
  signed by the new key, which the brokers fetch on first sight of its ``kid``.
- A service-account token of the Kubernetes-like issuer maps to ``User:<ns>-<sa>``;
  the session creates a token owned by that principal, labelled by the mapping, its
  lifetime capped by the mapping -- on every broker (two of three forward the create).
- The refusal list is refused on every broker as Kafka's ``OAuthBearerSaslServer``
  does it (an ``invalid_token`` challenge, the client's ``%x01``, then
  SASL_AUTHENTICATION_FAILED with the reason), each with an audit event naming the
  issuer, subject, ``jti`` and expiry the token claimed; no JWT in any log or audit file.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from tests.support.build_cache import java_program
from tests.support.local_cluster import ClusterFactory, admin_client, broker_address
from tests.support.oauth_wire import OAuthWire
from tests.support.oidc import FileIssuer, OidcProvider
from tests.support.wait import wait_for
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.jvm.jars import resolve
from tokensvc.protocol import ApiKey

pytestmark = pytest.mark.heavy(minutes=2)  # an OpenID provider (npm on first use), 3 brokers, a JVM


ROOT = Path(__file__).resolve().parents[3]
BROKERS = (1, 2, 3)
AUDIENCE = "urn:tokensvc"
CLIENT, SECRET = "etl-client", "etl-client-secret-0123456789"
DOWN_ISSUER = "https://issuer-down.example"
MAPPING_MAX_LIFETIME_MS = 3_600_000


def _mappings(k8s: FileIssuer, provider: OidcProvider, down_port: int) -> str:
    return f'''
[[issuer]]
issuer = "{k8s.issuer}"
jwks_file = "{k8s.jwks_file}"
audience = ["{k8s.audience}"]

[[issuer]]
issuer = "{DOWN_ISSUER}"
jwks_url = "http://127.0.0.1:{down_port}/jwks"

[[mapping]]
name = "oidc-etl"
issuer = "{provider.issuer}"
subject = "{CLIENT}"
scopes = ["kafka"]
principal = "User:etl-client"
labels = {{ idp = "oidc", client = "{CLIENT}" }}

[[mapping]]
name = "k8s-payments"
issuer = "{k8s.issuer}"
subject_pattern = "system:serviceaccount:(?P<ns>payments):(?P<sa>[a-z0-9-]+)"
principal = "User:{{ns}}-{{sa}}"
max_token_lifetime_ms = {MAPPING_MAX_LIFETIME_MS}
labels = {{ namespace = "{{ns}}", serviceaccount = "{{sa}}" }}

[[mapping]]
name = "down"
issuer = "{DOWN_ISSUER}"
subject = "anyone"
principal = "User:anyone"
'''


def _closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block ends: nothing listens there


@pytest.fixture(scope="module")
def oauth_world(tmp_path_factory: pytest.TempPathFactory,
                module_cluster_factory: ClusterFactory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("oauth")
    provider = OidcProvider(directory, clients={CLIENT: SECRET}, audience=AUDIENCE,
                            ttl_seconds=20)
    try:
        k8s = FileIssuer(directory)
        mappings = directory / "mappings.toml"
        mappings.write_text(_mappings(k8s, provider, _closed_port()))
        cluster = module_cluster_factory(brokers=3, overrides={
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "sasl.oauthbearer.jwks.endpoint.url": provider.jwks_url,
            "sasl.oauthbearer.jwks.endpoint.ca.location": str(provider.ca),
            "sasl.oauthbearer.expected.issuer": provider.issuer,
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.principal.mappings.file": str(mappings),
            "delegation.token.secret.key": "oauth-test-master-key",
            "connection.failed.authentication.delay.ms": "0",
        })
        yield {"provider": provider, "k8s": k8s, "cluster": cluster, "mappings": mappings}
    finally:
        provider.close()


def audit_events(cluster: LocalCluster, broker_id: int | None = None, **match: Any) -> list[dict]:
    pattern = f"audit-{broker_id}-*.jsonl" if broker_id is not None else "audit-*.jsonl"
    events = []
    for path in sorted(Path(cluster.info["audit_dir"]).glob(pattern)):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if all(event.get(k) == v for k, v in match.items()):
                events.append(event)
    return events


def _oauth_events(cluster: LocalCluster, broker_id: int, outcome: str) -> list[dict]:
    return audit_events(cluster, broker_id, type="authentication", kind="oauth", outcome=outcome)


def _confluent(cluster: LocalCluster, provider: OidcProvider, broker_id: int,
               client_id: str) -> ConfluentAdmin:
    host, port = broker_address(cluster, broker_id)
    return ConfluentAdmin({
        "bootstrap.servers": f"{host}:{port}",
        "client.id": client_id,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": CLIENT,
        "sasl.oauthbearer.client.secret": SECRET,
        "sasl.oauthbearer.token.endpoint.url": provider.token_url,
        "sasl.oauthbearer.scope": "kafka",
        "https.ca.location": str(provider.ca),
    })


def _describes_cluster(admin: ConfluentAdmin) -> bool:
    return bool(admin.describe_cluster(request_timeout=10).result(timeout=15).nodes)


# -- librdkafka, client credentials -------------------------------------------------------


def test_librdkafka_oidc_logs_in_to_every_broker(oauth_world):
    cluster, provider = oauth_world["cluster"], oauth_world["provider"]
    for broker_id in BROKERS:
        admin = _confluent(cluster, provider, broker_id, f"oidc-login-{broker_id}")
        assert _describes_cluster(admin)
        event = wait_for(lambda b=broker_id: [
            e for e in _oauth_events(cluster, b, "success") if e["client_id"] == f"oidc-login-{b}"
        ], 10, f"an OAUTHBEARER login audited on broker {broker_id}")[0]
        assert event["principal"] == "User:etl-client"
        assert event["mechanism"] == "OAUTHBEARER"
        oauth = event["oauth"]
        assert oauth["issuer"] == provider.issuer and oauth["subject"] == CLIENT
        assert oauth["mapping"] == "oidc-etl" and oauth["jti"] and oauth["expiry_ms"] > 0


def test_librdkafka_reauthenticates_across_a_signing_key_rotation(oauth_world):
    cluster, provider = oauth_world["cluster"], oauth_world["provider"]
    admin = _confluent(cluster, provider, 2, "oidc-rotation")
    assert _describes_cluster(admin)
    old_kid = provider.signing_kid
    new_kid = provider.rotate_key()
    assert new_kid != old_kid

    def reauthenticated_with_new_key() -> list[dict]:
        _describes_cluster(admin)  # every request must still succeed meanwhile
        return [e for b in BROKERS for e in _oauth_events(cluster, b, "success")
                if e["client_id"] == "oidc-rotation" and e["oauth"]["kid"] == new_kid
                and e["reason"] == "reauthenticated"]

    # The client's connections (to whichever brokers it uses) re-authenticate before
    # their sessions end at the JWT's exp, with tokens the provider now signs with the
    # new key: the brokers fetch it on first sight of its kid.
    event = wait_for(reauthenticated_with_new_key, 60,
                     "a re-authentication with a token signed by the new key")[0]
    assert event["principal"] == "User:etl-client"
    failures = [e for b in BROKERS for e in _oauth_events(cluster, b, "failure")
                if e["client_id"] == "oidc-rotation"]
    assert failures == []


# -- the Java client ---------------------------------------------------------------------------

JAVA_SOURCE = Path(__file__).resolve().parents[2] / "java" / "OAuthTokenCreate.java"
# kafka-clients from Maven Central, and what its OAUTHBEARER login needs besides (jose4j and
# jackson are optional dependencies of kafka-clients: a user adds them, as here).
KAFKA_CLIENTS = ("org.apache.kafka:kafka-clients:4.3.0", "org.bitbucket.b_c:jose4j:0.9.4",
                 "com.fasterxml.jackson.core:jackson-databind:2.16.2")
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def _java_classpath() -> str:
    return java_program(JAVA_SOURCE, resolve(KAFKA_CLIENTS))


def test_java_client_logs_in_and_creates_a_token_owned_by_the_mapped_principal(
        oauth_world, tmp_path):
    cluster, provider = oauth_world["cluster"], oauth_world["provider"]
    classpath = _java_classpath()
    java = shutil.which("java")
    assert java
    ran = subprocess.run(
        [java, *JVM_FLAGS, f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={provider.token_url}",
         "-cp", classpath, "OAuthTokenCreate", cluster.info["bootstrap_servers"],
         provider.token_url, CLIENT, "kafka", str(provider.ca)],
        check=False, capture_output=True, text=True, timeout=120,
        env={**os.environ, "OAUTH_CLIENT_SECRET": SECRET})
    assert ran.returncode == 0, (ran.stdout, ran.stderr[-3000:])
    verb, token_id, owner, issue, max_ms = ran.stdout.strip().splitlines()[-1].split()
    assert (verb, owner) == ("created", "User:etl-client")
    with admin_client(cluster) as admin:
        token = next(t for t in admin.describe_tokens(owners=["User:etl-client"])
                     if t.token_id == token_id)
    assert str(token.requester) == "User:etl-client"
    assert dict(token.labels) == {"idp": "oidc", "client": CLIENT}
    assert (token.issue_ms, token.max_ms) == (int(issue), int(max_ms))
    logins = wait_for(lambda: [e for b in BROKERS for e in _oauth_events(cluster, b, "success")
                               if e["client_id"] == "java-oauth"], 10, "the Java client's logins")
    assert all(e["principal"] == "User:etl-client" for e in logins)


def test_the_cli_logs_in_with_a_client_credentials_grant(oauth_world, tmp_path):
    """tokensvc's own client takes Kafka's client-credentials form of the command config
    (token endpoint, OAuthBearerLoginModule with clientId and clientSecret)."""
    cluster, provider = oauth_world["cluster"], oauth_world["provider"]
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={provider.token_url}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        f'required clientId="{CLIENT}" clientSecret="{SECRET}" scope="kafka" '
        f'ssl.truststore.location="{provider.ca}";\n')
    ran = subprocess.run(
        [sys.executable, "-m", "cli.delegation_token", "--create", "--output", "json",
         "--bootstrap-server", cluster.info["bootstrap_servers"], "--command-config", str(config),
         "--timeout", "20"],
        check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    created = json.loads(ran.stdout)
    assert (created["owner"], created["requester"]) == ("User:etl-client", "User:etl-client")
    assert created["labels"] == {"idp": "oidc", "client": CLIENT}
    assert SECRET not in ran.stdout + ran.stderr


# -- a Kubernetes service account: mapping and token policy ----------------------------------


def _create(wire: OAuthWire, **body: Any) -> dict:
    request = {"OwnerPrincipalType": None, "OwnerPrincipalName": None, "Renewers": [],
               "MaxLifetimeMs": -1, **body}
    return wire.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, request)


@pytest.mark.parametrize("broker_id", BROKERS)
def test_service_account_creates_a_token_owned_by_its_mapped_principal(oauth_world, broker_id):
    cluster, k8s = oauth_world["cluster"], oauth_world["k8s"]
    token = k8s.service_account_token("payments", "etl", lifetime_s=600)
    with OAuthWire(broker_address(cluster, broker_id)) as wire:
        outcome = wire.login(token)
        assert outcome.error_code == 0, outcome.error_message
        assert 590_000 < outcome.session_lifetime_ms <= 600_000  # to the JWT's exp
        created = _create(wire, MaxLifetimeMs=7 * 86_400_000,
                          Labels=[{"Key": "job", "Value": "nightly"},
                                  {"Key": "namespace", "Value": "spoofed"}])
        assert created["ErrorCode"] == 0
        assert (created["PrincipalType"], created["PrincipalName"]) == ("User", "payments-etl")
        assert created["MaxTimestampMs"] - created["IssueTimestampMs"] == MAPPING_MAX_LIFETIME_MS
        labels = {lb["Key"]: lb["Value"] for lb in created["Labels"]}
        assert labels == {"namespace": "payments", "serviceaccount": "etl", "job": "nightly"}
        other = _create(wire, OwnerPrincipalType="User", OwnerPrincipalName="someone-else")
        assert other["ErrorCode"] == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED
        assert "other owners" in other["ErrorMessage"]
    wait_for(lambda: audit_events(cluster, type="token", action="create", reason="oauth_policy",
                                  requester="User:payments-etl", owner="User:someone-else"),
             10, "the policy refusal's audit event")


def test_a_session_ends_at_its_jwts_expiry(oauth_world):
    """KIP-368: past the JWT's exp, a request other than a re-authentication ends the
    connection (no request is served on an expired identity)."""
    cluster, k8s = oauth_world["cluster"], oauth_world["k8s"]
    token = k8s.service_account_token("payments", "etl", lifetime_s=3)
    with OAuthWire(broker_address(cluster, 2)) as wire:
        outcome = wire.login(token)
        assert outcome.error_code == 0 and outcome.session_lifetime_ms <= 3000
        assert wire.request(ApiKey.DESCRIBE_CLUSTER, 0, {
            "IncludeClusterAuthorizedOperations": False})["ErrorCode"] == 0
        deadline = time.monotonic() + outcome.session_lifetime_ms / 1000 + 0.2
        wait_for(lambda: time.monotonic() > deadline, 5, "the JWT's expiry")
        with pytest.raises(ConnectionError):
            wire.request(ApiKey.DESCRIBE_CLUSTER, 0, {"IncludeClusterAuthorizedOperations": False})


# -- the refusal list ---------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict, claims: dict, signature: bytes = b"") -> str:
    return ".".join((_b64(json.dumps(header).encode()), _b64(json.dumps(claims).encode()),
                     _b64(signature)))


def _refusal_cases(world: dict) -> dict[str, tuple[str, str]]:
    """case -> (JWT, the audit reason), each built against the live issuers."""
    k8s: FileIssuer = world["k8s"]
    provider: OidcProvider = world["provider"]
    now = int(time.time())
    good = k8s.service_account_token("payments", "etl")
    claims = json.loads(base64.urlsafe_b64decode(good.split(".")[1] + "=="))
    public_pem = provider.keys[-1].as_pem(private=False)
    hmac_input = f"{_b64(json.dumps({'alg': 'HS256', 'kid': 'oidc-1'}).encode())}." \
                 f"{_b64(json.dumps({**claims, 'iss': provider.issuer}).encode())}"
    forged_hmac = hmac_input + "." + _b64(hmac.new(public_pem, hmac_input.encode(),
                                                     hashlib.sha256).digest())
    stranger = ECKey.generate_key("P-256", parameters={"kid": "k8s-1"})
    ghost = RSAKey.generate_key(2048, parameters={"kid": "ghost"})
    header, _, signature = good.split(".")
    tampered_claims = {**claims, "sub": "system:serviceaccount:payments:admin"}
    return {
        "alg_none": (_unsigned({"alg": "none"}, claims), "alg_none"),
        "hmac_with_public_key": (forged_hmac, "alg_hmac"),
        "unlisted_algorithm": (_unsigned({"alg": "ES256K", "kid": "k8s-1"}, claims, b"x" * 64),
                               "alg_not_allowed"),
        "expired": (k8s.service_account_token("payments", "etl", now=now - 3600, lifetime_s=600),
                    "expired"),
        "not_yet_valid": (k8s.service_account_token("payments", "etl", now=now + 3600),
                          "not_yet_valid"),
        "wrong_audience": (k8s.service_account_token("payments", "etl", aud=["someone-else"]),
                           "wrong_audience"),
        "wrong_issuer": (jwt.encode({"alg": "ES256", "kid": "k8s-1"},
                                    {**claims, "iss": "https://evil.example"}, k8s.key),
                         "unknown_issuer"),
        "unknown_key_file_issuer": (
            jwt.encode({"alg": "ES256", "kid": "k8s-unknown"}, claims, stranger),
            "unknown_key"),
        "unknown_key_https_issuer": (
            jwt.encode({"alg": "RS256", "kid": "ghost"},
                       {**claims, "iss": provider.issuer, "aud": AUDIENCE}, ghost),
            "unknown_key"),
        "bad_signature": (f"{header}.{_b64(json.dumps(tampered_claims).encode())}.{signature}",
                          "bad_signature"),
        "wrong_key_same_kid": (jwt.encode({"alg": "ES256", "kid": "k8s-1"}, claims, stranger),
                               "bad_signature"),
        "missing_subject": (k8s.service_account_token("payments", "etl", sub=None),
                            "missing_subject"),
        "oversized": (k8s.service_account_token("payments", "etl", padding="p" * 20_000),
                      "oversized"),
        "jwks_unreachable": (jwt.encode({"alg": "ES256", "kid": "k8s-1"},
                                        {**claims, "iss": DOWN_ISSUER, "sub": "anyone"}, k8s.key),
                             "jwks_unavailable"),
        "no_mapping": (k8s.service_account_token("billing", "etl"), "no_mapping"),
    }


def test_refusal_list_is_refused_on_every_broker_with_an_audit_event(oauth_world):
    cluster = oauth_world["cluster"]
    cases = _refusal_cases(oauth_world)
    for broker_id in BROKERS:
        before = len(_oauth_events(cluster, broker_id, "failure"))
        for case, (token, reason) in cases.items():
            with OAuthWire(broker_address(cluster, broker_id), client_id=f"refuse-{case}") as wire:
                outcome = wire.login(token)
            assert outcome.error_code == Errors.SASL_AUTHENTICATION_FAILED, (case, outcome)
            assert outcome.error_message.startswith("Authentication failed: "), case
            assert json.loads(outcome.challenge) == {"status": "invalid_token"}, case
        events = wait_for(lambda b=broker_id, n=before: len(_oauth_events(cluster, b, "failure"))
                          - n >= len(cases) and _oauth_events(cluster, b, "failure")[n:],
                          10, f"the refusals' audit events on broker {broker_id}")
        by_client = {e["client_id"]: e for e in events}
        for case, (token, reason) in cases.items():
            event = by_client[f"refuse-{case}"]
            assert event["reason"] == reason, (case, event)
            assert event["principal"] is None
            if case == "oversized":  # refused unread: nothing of it is parsed
                assert set(event["oauth"].values()) == {None}
                continue
            assert event["oauth"]["issuer"], case
            assert event["oauth"]["jti"] and event["oauth"]["expiry_ms"], case
            assert (event["oauth"]["subject"] is None) == (case == "missing_subject"), case
    _assert_no_jwt_anywhere(cluster, [token for token, _ in cases.values()])


def test_no_mapping_refusal_names_issuer_and_subject(oauth_world):
    cluster, k8s = oauth_world["cluster"], oauth_world["k8s"]
    token = k8s.service_account_token("billing", "reporter")
    with OAuthWire(broker_address(cluster, 1)) as wire:
        outcome = wire.login(token)
    assert outcome.error_code == Errors.SASL_AUTHENTICATION_FAILED
    assert k8s.issuer in outcome.error_message
    assert "system:serviceaccount:billing:reporter" in outcome.error_message
    assert "no principal mapping" in outcome.error_message
    _assert_no_jwt_anywhere(cluster, [token])


def _assert_no_jwt_anywhere(cluster: LocalCluster, tokens: list[str]) -> None:
    """No JWT (nor its signature, nor its payload) in any broker log or audit file."""
    files = [Path(b["log"]) for b in cluster.info["brokers"]]
    files += list(Path(cluster.info["audit_dir"]).glob("*.jsonl"))
    texts = [f.read_text(errors="replace") for f in files if f.exists()]
    for token in tokens:
        parts = [p for p in token.split(".") if len(p) >= 16]
        for text in texts:
            assert token not in text
            for part in parts[1:]:
                assert part not in text
