"""Issue 37: the reference Java client, Apache kafka-clients 4.x, against a 3-broker cluster.

kafka-clients is what Spark, Flink and Kafka Connect use to manage and log in with tokens.
Its jar and its runtime dependencies come from Maven Central, fetched once and cached
(:func:`tokensvc.kafka.kafka_clients_jars`, through ``mvn``). ``tests/java/TokenMatrix.java`` is
compiled against it with the JDK's javac once per module and run once per SCRAM mechanism
with ``java``; it prints ``check <name> ok <json>`` per check (see that file) and stops at
the first failure. Every check is asserted here by name, and its effects are verified from
Python: tokensvc's AdminClient reads the tokens, credentials and ACLs the Java client left,
the audit log shows the worker's ``tokenauth=true`` logins on every broker, and
confluent-kafka (librdkafka) is refused the expired token and logs in with the live one.

``TokenMatrix describe`` lists every token the admin may see with all the fields
kafka-clients parsed; the last test compares that with tokensvc's own describe. It is where
anything tokensvc adds to a token on the wire (tagged fields) proves that Java still parses
every token.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from tests.support.local_cluster import ClusterFactory
from tests.support.wait import retry
from tokensvc.admin.client import AdminClient
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.broker.gates.freshness import STALE_VIEW
from tokensvc.client_config import ClientConfig
from tokensvc.cluster import LocalCluster
from tokensvc.kafka import kafka_clients_jars
from tokensvc.scram.formatter import ScramMechanism

# The kafka-clients release the matrix runs (Maven Central).
KAFKA_CLIENTS_VERSION = "4.3.0"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
JAVA_SOURCE = Path(__file__).resolve().parents[2] / "java" / "TokenMatrix.java"
# Every check of ``TokenMatrix all``, in the order it runs them ("program": all ran).
CHECKS = (
    "admin_login", "scram_upsert", "scram_describe", "scram_delete", "scram_unknown_user",
    "requester_login", "create_for_owner_unauthorized", "acl_create", "acl_describe",
    "acl_delete", "create", "create_for_owner", "describe", "describe_by_owner",
    "renew_by_renewer", "token_login", "token_create_refused", "expire_now", "expire",
    "expired_renew_refused", "expired_login_refused", "program",
)
JAVA_TIMEOUT_S = 120.0  # one JVM run (the program bounds each wait to 20 s)
BOUND_S = 20.0  # propagation, a correctness bound (its speed is benchmark B3)
# JVM flags (not client settings) for a short run: about a quarter less CPU (JIT, GC).
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
CHECK_LINE = re.compile(r"^check (\S+) (ok|FAIL) (.*)$")


@dataclass(frozen=True)
class JavaProgram:
    classpath: str
    kafka_clients_version: str


def _kafka_clients_jars() -> tuple[list[Path], str]:
    """kafka-clients' jar and its dependencies from Maven Central, and kafka-clients'
    version as the jar itself says (its kafka-version.properties)."""
    jars = kafka_clients_jars(KAFKA_CLIENTS_VERSION)
    clients = [j for j in jars if j.name.startswith("kafka-clients-")]
    assert len(clients) == 1, f"resolved {[j.name for j in jars]}"
    with zipfile.ZipFile(clients[0]) as jar:
        properties = jar.read("kafka/kafka-version.properties").decode()
    version = re.search(r"^version=(\S+)$", properties, re.MULTILINE)
    assert version, properties
    return jars, version.group(1)


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> JavaProgram:
    """TokenMatrix compiled against kafka-clients from Maven Central (once per module)."""
    javac = shutil.which("javac")
    assert javac, "javac (a JDK 17) is needed to compile tests/java/TokenMatrix.java"
    jars, version = _kafka_clients_jars()
    assert version.split(".")[0] == "4", f"kafka-clients {version}: the matrix tests 4.x"
    classes = tmp_path_factory.mktemp("java-classes")
    libs = os.pathsep.join(str(j) for j in jars)
    compiled = subprocess.run(
        [javac, *(f"-J{flag}" for flag in JVM_FLAGS), "-Xlint:all", "-d", str(classes), "-cp", libs, str(JAVA_SOURCE)],
        check=False, capture_output=True, text=True, timeout=JAVA_TIMEOUT_S,
    )
    assert compiled.returncode == 0, compiled.stderr
    return JavaProgram(os.pathsep.join([str(classes), libs]), version)


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(brokers=3)


def run_java(java: JavaProgram, cluster: LocalCluster, *args: str) -> dict[str, dict[str, Any]]:
    """Run ``TokenMatrix args...``; its checks by name (each ok, or the test fails naming the
    one that failed and why)."""
    admin = cluster.info["admin"]
    env = {**os.environ, "MATRIX_ADMIN_USER": admin["username"],
           "MATRIX_ADMIN_PASSWORD": admin["password"]}
    java_command = shutil.which("java")
    assert java_command, "java (a JDK 17) is needed to run tests/java/TokenMatrix.java"
    ran = subprocess.run(
        [java_command, *JVM_FLAGS, "-cp", java.classpath, "TokenMatrix", *args],
        check=False, env=env, capture_output=True, text=True, timeout=JAVA_TIMEOUT_S,
    )
    checks: dict[str, dict[str, Any]] = {}
    for line in ran.stdout.splitlines():
        match = CHECK_LINE.match(line)
        assert match, f"not a check line: {line!r}"
        name, outcome, detail = match.groups()
        assert outcome == "ok", f"the Java client failed check {name}: {detail}\n{ran.stderr}"
        checks[name] = json.loads(detail)
    assert ran.returncode == 0, f"exit {ran.returncode}\n{ran.stdout}\n{ran.stderr}"
    return checks


def _admin(cluster: LocalCluster) -> AdminClient:
    admin = cluster.info["admin"]
    config = ClientConfig(security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism=ScramMechanism.SCRAM_SHA_512,
                          username=admin["username"], password=admin["password"])
    return AdminClient(cluster.info["bootstrap_servers"], config, timeout_s=15)


def _audit_events(cluster: LocalCluster) -> list[dict[str, Any]]:
    events = []
    for path in sorted(Path(cluster.info["audit_dir"]).glob("*.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines() if line]
    return events


def _confluent_login(address: str, mechanism: str, username: str, password: str) -> str | None:
    """None when librdkafka logs in on ``address`` and reads the metadata of all three
    brokers; else the authentication error it reports."""
    errors: list[ConfluentError] = []
    client = ConfluentAdmin({
        "bootstrap.servers": address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": username,
        "sasl.password": password,
        "log_level": 0,  # a refusal is asserted through error_cb
        "error_cb": errors.append,
    })
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        try:
            assert len(client.list_topics(timeout=1).brokers) == 3
            return None
        except Exception:  # noqa: BLE001 - the reason comes through error_cb
            client.poll(0.1)
        refused = [e for e in errors if e.code() == ConfluentError._AUTHENTICATION]
        if refused:
            return refused[0].str()
    raise AssertionError(f"neither a login nor an authentication error: {errors}")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_clients_admin_manages_tokens_acls_and_credentials_and_logs_in_with_a_token(
    java: JavaProgram, cluster: LocalCluster, mechanism: str
) -> None:
    suffix = mechanism.rpartition("-")[2]
    requester, owner = f"java-requester-{suffix}", f"java-owner-{suffix}"
    brokers = [b["listeners"]["SASL_PLAINTEXT"] for b in cluster.info["brokers"]]

    checks = run_java(java, cluster, "all", ",".join(brokers), mechanism, suffix)

    assert tuple(checks) == CHECKS
    assert checks["admin_login"]["brokers"] == [1, 2, 3]
    assert checks["scram_describe"]["credentials"] == sorted(
        [{"mechanism": mechanism, "iterations": 4096},
         {"mechanism": next(m for m in MECHANISMS if m != mechanism), "iterations": 8192}],
        key=lambda c: c["mechanism"])
    assert checks["scram_delete"]["credentials"] == [{"mechanism": mechanism, "iterations": 4096}]
    mine, for_owner = checks["create"], checks["create_for_owner"]
    assert (mine["owner"], mine["requester"], mine["renewers"]) == (
        "User:admin", "User:admin", [f"User:{requester}"])
    assert (for_owner["owner"], for_owner["requester"], for_owner["renewers"]) == (
        f"User:{owner}", f"User:{requester}", ["User:admin"])
    described = {t["token_id"]: t for t in checks["describe"]["tokens"]}
    assert described[mine["token_id"]] == mine and described[for_owner["token_id"]] == for_owner
    assert checks["describe_by_owner"]["tokens"] == [for_owner]
    renewed = checks["renew_by_renewer"]
    assert renewed["expiry_before"] == mine["expiry_ms"] < renewed["expiry"] <= mine["max_ms"]
    assert checks["token_login"]["brokers"] == {b: [1, 2, 3] for b in brokers}
    assert checks["token_create_refused"]["exception"].endswith(
        "UnsupportedByAuthenticationException")
    assert checks["expired_renew_refused"]["exception"].endswith("DelegationTokenExpiredException")
    refused = checks["expired_login_refused"]["brokers"]
    assert set(refused) == set(brokers)
    assert all(r["exception"].endswith("SaslAuthenticationException") for r in refused.values())

    # What the Java client did, as tokensvc's own client sees it.
    removed = checks["expire_now"]["token_id"]
    with _admin(cluster) as admin:
        tokens = {t.token_id: t for t in admin.describe_tokens()}
        assert removed not in tokens
        kept = tokens[for_owner["token_id"]]
        assert (str(kept.owner), str(kept.requester), [str(r) for r in kept.renewers]) == (
            f"User:{owner}", f"User:{requester}", ["User:admin"])
        assert (kept.issue_ms, kept.expiry_ms, kept.max_ms) == (
            for_owner["issue_ms"], for_owner["expiry_ms"], for_owner["max_ms"])
        expired = tokens[mine["token_id"]]
        assert expired.expiry_ms == checks["expire"]["expiry"] <= int(time.time() * 1000)
        credentials = admin.describe_user_scram_credentials([requester])[requester]
        assert [(c.mechanism, c.iterations) for c in credentials] == [
            (ScramMechanism.from_name(mechanism), 4096)]
        acls = admin.describe_acls(AclBindingFilter.of(principal=f"User:{requester}"))
        assert acls == [AclBinding(
            ResourcePattern(ResourceType.USER, f"User:{owner}", PatternType.LITERAL),
            AccessControlEntry(f"User:{requester}", "*", AclOperation.CREATE_TOKENS,
                               AclPermissionType.ALLOW))]

    # The worker's logins were tokenauth=true logins of the token, on every broker; the
    # expired token's were refused as expired.
    def audited() -> None:
        logins = [e for e in _audit_events(cluster) if e["type"] == "authentication"
                  and e["username"] == mine["token_id"]]
        succeeded = [e for e in logins if e["outcome"] == "success"]
        assert {e["broker_id"] for e in succeeded} == {1, 2, 3}, logins
        assert all(e["kind"] == "token" and e["implicit"] is False and e["mechanism"] == mechanism
                   and e["principal"] == "User:admin" for e in succeeded), succeeded
        # (a login tried before the token reached a broker fails too, before the expiry)
        expiry = checks["expire"]["expiry"]
        failed = [e for e in logins if e["outcome"] == "failure" and e["ts"] >= expiry]
        # A broker that cannot confirm its view is current (bounded staleness, under load)
        # refuses a token login before looking the name up: audited with reason stale_view
        # and the name as its fingerprint only. The Java client's one refused attempt on a
        # broker may have been that one.
        unconfirmed = {e["broker_id"] for e in _audit_events(cluster)
                       if e["type"] == "authentication" and e["outcome"] == "failure"
                       and e["kind"] == "token" and e["reason"] == STALE_VIEW
                       and e["ts"] >= expiry}
        assert {e["broker_id"] for e in failed} | unconfirmed == {1, 2, 3}, logins
        assert {e["reason"] for e in failed} == {"expired_token"}, failed

    retry(audited, BOUND_S, errors=(AssertionError,), interval=0.1)

    # Another client agrees: librdkafka is refused the expired token, and logs in with the
    # token the Java client created for another owner.
    hmac_b64 = base64.b64encode(expired.hmac).decode()
    for address in brokers:
        assert _confluent_login(address, mechanism, mine["token_id"], hmac_b64) is not None
    assert _confluent_login(brokers[0], mechanism, kept.token_id, kept.hmac_b64) is None


def described_by_java(java: JavaProgram, cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    """Every token the admin may see, as kafka-clients' describeDelegationToken parses it."""
    checks = run_java(java, cluster, "describe", cluster.info["bootstrap_servers"],
                      "SCRAM-SHA-512")
    return {t["token_id"]: t for t in checks["describe"]["tokens"]}


def test_kafka_clients_describe_parses_every_token_as_tokensvc_describes_it(
    java: JavaProgram, cluster: LocalCluster
) -> None:
    with _admin(cluster) as admin:
        # Labelled (the largest labels allowed on one of them): the Java client must
        # still parse every token of the describe answer.
        made = [admin.create_token(renewers=["User:java-reader"],
                                   labels={"job": "java-matrix", "team": "payments"}),
                admin.create_token(owner="User:java-described-owner",
                                   labels={f"k{i:02d}": "v" * 255 for i in range(16)}),
                admin.create_token(max_lifetime_ms=3_600_000)]
        assert dict(made[0].labels) == {"job": "java-matrix", "team": "payments"}
        expected = {t.token_id: {
            "token_id": t.token_id, "owner": str(t.owner), "requester": str(t.requester),
            "renewers": sorted(str(r) for r in t.renewers), "issue_ms": t.issue_ms,
            "expiry_ms": t.expiry_ms, "max_ms": t.max_ms, "hmac_bytes": len(t.hmac),
        } for t in admin.describe_tokens()}
    assert {t.token_id for t in made} <= set(expected)

    def all_described() -> None:
        assert described_by_java(java, cluster) == expected

    retry(all_described, BOUND_S, errors=(AssertionError,), interval=0.1)
