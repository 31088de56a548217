"""Issue 52, Kafka as the judge, on the beside-Kafka set-up (one secured ZooKeeper, one
chroot, one master key): an Apache Kafka 3.9 broker with Kafka's own
``OAuthBearerValidatorCallbackHandler`` and a tokensvc broker, configured with the same
Kafka keys for the same issuer (a Kubernetes-like one, its JWKS in a file), get the same
JWTs over the same raw OAUTHBEARER exchange. Every JWT of the refusal list that Kafka's
keys can express gets the same verdict from both; a good token is accepted by both. A
delegation token a service account creates on tokensvc through OAUTHBEARER then logs in
on the Kafka broker (SCRAM, ``tokenauth=true``) as its mapped owner.

Where tokensvc is stricter on purpose, the test says so rather than hiding it: a JWT over
16 KB (Kafka takes any up to ``sasl.server.max.receive.size``), and an identity no mapping
names (Kafka has no mappings; its principal is the subject).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey

from tests.support.oauth_wire import OAuthWire
from tests.support.oidc import FileIssuer
from tests.support.wait import retry
from tokensvc.admin import AdminClient, AdminError
from tokensvc.client_config import ClientConfig
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.protocol import ApiKey
from tokensvc.scram.formatter import ScramMechanism

pytestmark = pytest.mark.heavy(minutes=2)  # ZooKeeper, a tokensvc and a Kafka broker


VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
MAPPINGS = """
[[mapping]]
name = "any-service-account"
issuer = "{issuer}"
subject_pattern = "system:serviceaccount:(?P<ns>payments):(?P<sa>[a-z0-9-]+)"
principal = "User:{{ns}}-{{sa}}"
"""


@pytest.fixture(scope="module")
def judges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    directory = tmp_path_factory.mktemp("kafka-judge")
    k8s = FileIssuer(directory)
    mappings = directory / "mappings.toml"
    mappings.write_text(MAPPINGS.format(issuer=k8s.issuer))
    keys = {
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{k8s.jwks_file}",
        "sasl.oauthbearer.expected.issuer": k8s.issuer,
        "sasl.oauthbearer.expected.audience": k8s.audience,
    }
    listener = "listener.name.sasl_plaintext.oauthbearer"
    with LocalCluster.up(
        directory / "cluster", brokers=1, kafka_brokers=1, die_with_parent=True, timeout=180,
        overrides={**keys, "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
                   "sasl.oauthbearer.principal.mappings.file": str(mappings),
                   "connection.failed.authentication.delay.ms": "0"},
        kafka_overrides={**keys, "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
                         f"{listener}.sasl.server.callback.handler.class": VALIDATOR,
                         f"{listener}.sasl.jaas.config": f"{LOGIN_MODULE} required ;",
                         "connection.failed.authentication.delay.ms": "0"},
    ) as cluster:
        yield {"k8s": k8s, "cluster": cluster,
               "tokensvc": _address(cluster.info["brokers"][0]["listeners"]["SASL_PLAINTEXT"]),
               "kafka": _address(cluster.info["kafka"]["brokers"][0]["listener"])}


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _cases(k8s: FileIssuer) -> dict[str, str]:
    now = int(time.time())
    good = k8s.service_account_token("payments", "etl")
    header, _, signature = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(good.split(".")[1] + "=="))
    stranger = ECKey.generate_key("P-256", parameters={"kid": "k8s-1"})
    unsigned = _b64(json.dumps({"alg": "none"}).encode()) + "." + _b64(json.dumps(claims).encode())
    hmac_head = (_b64(json.dumps({"alg": "HS256", "kid": "k8s-1"}).encode()) + "."
                 + _b64(json.dumps(claims).encode()))
    public_pem = k8s.key.as_pem(private=False)
    return {
        "alg_none": unsigned + ".",
        "hmac_with_public_key": hmac_head + "." + _b64(
            hmac.new(public_pem, hmac_head.encode(), hashlib.sha256).digest()),
        "unlisted_algorithm": (_b64(json.dumps({"alg": "ES256K", "kid": "k8s-1"}).encode())
                               + "." + _b64(json.dumps(claims).encode()) + "." + _b64(b"x" * 64)),
        "expired": k8s.service_account_token("payments", "etl", now=now - 3600, lifetime_s=600),
        "not_yet_valid": k8s.service_account_token("payments", "etl", now=now + 3600),
        "wrong_audience": k8s.service_account_token("payments", "etl", aud=["someone-else"]),
        "wrong_issuer": jwt.encode({"alg": "ES256", "kid": "k8s-1"},
                                   {**claims, "iss": "https://evil.example"}, k8s.key),
        "unknown_key": jwt.encode({"alg": "ES256", "kid": "k8s-unknown"}, claims, stranger),
        "bad_signature": f"{header}.{_b64(json.dumps({**claims, 'sub': 'x'}).encode())}.{signature}",
        "wrong_key_same_kid": jwt.encode({"alg": "ES256", "kid": "k8s-1"}, claims, stranger),
        "missing_subject": k8s.service_account_token("payments", "etl", sub=None),
        "missing_expiry": k8s.service_account_token("payments", "etl", exp=None),
    }


def _verdict(address: tuple[str, int], token: str) -> tuple[bool, bytes]:
    """(accepted, the challenge to the first message) of one login on a new connection."""
    with OAuthWire(address, client_id="judge") as wire:
        outcome = wire.login(token)
    if outcome.error_code == 0:
        return True, outcome.challenge
    assert outcome.error_code == Errors.SASL_AUTHENTICATION_FAILED, outcome
    return False, outcome.challenge


def test_kafka_and_tokensvc_give_every_refused_jwt_the_same_verdict(judges):
    cases = _cases(judges["k8s"])
    verdicts = {case: (_verdict(judges["kafka"], token), _verdict(judges["tokensvc"], token))
                for case, token in cases.items()}
    for case, ((kafka_ok, kafka_challenge), (ours_ok, ours_challenge)) in verdicts.items():
        assert (kafka_ok, ours_ok) == (False, False), (case, verdicts[case])
        # The same exchange: Kafka's error challenge, then the failure after %x01.
        assert json.loads(kafka_challenge) == json.loads(ours_challenge) == {
            "status": "invalid_token"}, case


def test_a_good_token_is_accepted_by_both(judges):
    token = judges["k8s"].service_account_token("payments", "etl")
    assert _verdict(judges["kafka"], token) == (True, b"")
    assert _verdict(judges["tokensvc"], token) == (True, b"")


def test_where_tokensvc_is_stricter_than_kafka(judges):
    k8s = judges["k8s"]
    oversized = k8s.service_account_token("payments", "etl", padding="p" * 20_000)
    unmapped = k8s.service_account_token("billing", "reporter")
    for token in (oversized, unmapped):
        assert _verdict(judges["kafka"], token)[0] is True
        assert _verdict(judges["tokensvc"], token)[0] is False


def test_a_token_created_through_oauthbearer_logs_in_on_the_kafka_broker(judges):
    cluster, k8s = judges["cluster"], judges["k8s"]
    with OAuthWire(judges["tokensvc"]) as wire:
        assert wire.login(k8s.service_account_token("payments", "etl")).error_code == 0
        created = wire.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, {
            "OwnerPrincipalType": None, "OwnerPrincipalName": None, "Renewers": [],
            "MaxLifetimeMs": -1})
    assert created["ErrorCode"] == 0
    assert (created["PrincipalType"], created["PrincipalName"]) == ("User", "payments-etl")
    token = ClientConfig(security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism=ScramMechanism.SCRAM_SHA_512,
                         username=created["TokenId"],
                         password=base64.b64encode(created["Hmac"]).decode(), token_auth=True)
    kafka = cluster.info["kafka"]["bootstrap_servers"]

    def describes_on_kafka() -> int:
        # The Kafka broker learns the token from ZooKeeper's change notification.
        with AdminClient(kafka, token, timeout_s=10) as client:
            return len(client.describe_cluster().brokers)

    assert retry(describes_on_kafka, 20.0, errors=(AdminError,)) >= 1
