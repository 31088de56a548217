"""tokensvc beside a real Apache Kafka 3.9 cluster (issue #50): one secured managed
ZooKeeper, one chroot, three tokensvc brokers (ids 1-3, ``kafka.zookeeper.shared=true``)
and two Kafka brokers (ids 101, 102) with the same ZooKeeper identity and the same
``delegation.token.secret.key``; the Kafka brokers re-authenticate sessions every few
seconds (``connections.max.reauth.ms``) and both sides sweep expired tokens every second.

What each test shows, with clients and tools others wrote wherever a user would use them:

- a token made through tokensvc (with labels) writes and reads a topic on the Kafka
  brokers with the Java client, franz-go, kafka-python and aiokafka (the last two with
  tokensvc's plug-ins);
- revoked through tokensvc by id, owner or label: new logins refused on both Kafka
  brokers, and an open Java session ends at its next re-authentication;
- a token made with Kafka's ``kafka-delegation-tokens.sh`` through a Kafka broker is
  described by tokensvc, logs in there, counts toward its owner's limit and is revoked by
  owner;
- renewed through a Kafka broker (which rewrites the znode with its seven fields), a
  token keeps its labels, and revocation by label finds it;
- SCRAM users and ACLs both ways (tokensvc -> Kafka's AclAuthorizer; Kafka's
  ``kafka-configs.sh`` and ``kafka-acls.sh`` -> tokensvc);
- an expired token is refused on both sides, whichever controller sweeps it;
- tokensvc's CLI and Python admin client against the Kafka brokers, and Kafka's own tools
  against the tokensvc brokers;
- last, Kafka stays in charge of Kafka: its controller and registry hold only Kafka
  brokers, replicas land on Kafka brokers, through kills of either side's controller.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import TopicAuthorizationFailedError
from kazoo.exceptions import NoNodeError

from cli.delegation_token import delegation_token
from tests.support import kafka_clients
from tests.support.build_cache import java_program
from tests.support.local_cluster import logs_in, user_config
from tests.support.wait import poll_until
from tokensvc.admin import AdminClient, AdminError
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.client_config import ClientConfig, load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.jvm import SHORT_LIVED_KAFKA
from tokensvc.kafka import kafka_jars, run_tool
from tokensvc.scram.formatter import ScramMechanism
from zk import layout

# ZooKeeper, 3 tokensvc and 2 Kafka brokers, Kafka's tools and four clients.
pytestmark = [pytest.mark.slow, pytest.mark.heavy(minutes=4)]

TOKENSVC_IDS = [1, 2, 3]
KAFKA_IDS = [101, 102]
REAUTH_MS = 4_000
OWNER_LIMIT = 8
TOOL_TIMEOUT_S = 180.0
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
# Both sides' ZooKeeper sessions (default 18 s): a killed controller's /controller or
# /tokensvc/controller goes when its session expires, and the kill test waits for both.
SESSION_TIMEOUT = {"zookeeper.session.timeout.ms": "8000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, kafka_jvm: None) -> LocalCluster:
    began = time.monotonic()
    with LocalCluster.up(
        tmp_path_factory.mktemp("beside-kafka"), brokers=3, kafka_brokers=2,
        kafka_reauth_ms=REAUTH_MS, die_with_parent=True, timeout=180,
        overrides={"delegation.token.max.per.owner": str(OWNER_LIMIT),
                   "delegation.token.expiry.check.interval.ms": "1000", **SESSION_TIMEOUT},
        kafka_overrides={"delegation.token.expiry.check.interval.ms": "1000",
                         **SESSION_TIMEOUT},
    ) as local:
        print(f"ZooKeeper, 3 tokensvc and 2 Kafka brokers up in {time.monotonic() - began:.1f}s")
        yield local


# -- helpers ------------------------------------------------------------------------------


def _tokensvc(cluster: LocalCluster) -> str:
    return cluster.info["bootstrap_servers"]


def _kafka(cluster: LocalCluster) -> str:
    return cluster.info["kafka"]["bootstrap_servers"]


def _kafka_addresses(cluster: LocalCluster) -> list[str]:
    return [b["listener"] for b in cluster.info["kafka"]["brokers"]]


def _props(cluster: LocalCluster) -> str:
    return cluster.info["admin"]["properties"]


def _cli(cluster: LocalCluster, bootstrap: str, *args: str) -> dict:
    result = CliRunner().invoke(delegation_token, [
        "--bootstrap-server", bootstrap, "--command-config", _props(cluster),
        "--timeout", "30", "--output", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output) if result.output.strip() else {}


def _create(cluster: LocalCluster, *args: str, bootstrap: str | None = None) -> dict:
    return _cli(cluster, bootstrap or _tokensvc(cluster), "--create", *args)


def _tool(script: str, *args: str) -> str:
    result = run_tool(script, list(args), timeout=TOOL_TIMEOUT_S)
    assert result.returncode == 0, f"{script} exited {result.returncode}: {result.stderr[-3000:]}"
    return result.stdout


def _token_config(token_id: str, hmac_b64: str) -> ClientConfig:
    return ClientConfig(security_protocol="SASL_PLAINTEXT",
                        sasl_mechanism=ScramMechanism.SCRAM_SHA_512,
                        username=token_id, password=hmac_b64, token_auth=True)


def _logs_in(address: str, config: ClientConfig) -> bool:
    """One SASL login (tokenauth=true for a token) on a fresh connection: True when let
    in, False when the broker refuses the credentials."""
    return logs_in(address, config, time.monotonic() + 20)


def _token_logs_in(address: str, token: dict) -> bool:
    return _logs_in(address, _token_config(token["token_id"], token["hmac"]))


def _everywhere(addresses: list[str], check) -> bool:
    return all(check(address) for address in addresses)


def _admin(cluster: LocalCluster, bootstrap: str | None = None) -> AdminClient:
    return AdminClient(bootstrap or _tokensvc(cluster), load_client_config(_props(cluster)),
                       timeout_s=30)


def _described(cluster: LocalCluster, token_id: str, bootstrap: str | None = None):
    with _admin(cluster, bootstrap) as admin:
        found = [t for t in admin.describe_tokens() if t.token_id == token_id]
    return found[0] if found else None


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- tokens ---------------------------------------------------------------------------------


@pytest.mark.timeout(900)  # may build the Java and Go clients (a cold Go build: minutes)
def test_a_tokensvc_token_with_labels_writes_and_reads_a_topic_on_kafka(
        cluster: LocalCluster) -> None:
    token = _create(cluster, "--label", "team=payments", "--label", "job=etl")
    assert token["labels"] == {"team": "payments", "job": "etl"}
    kafka = _kafka(cluster)
    for name, produce_consume in (
        ("java", kafka_clients.java_produce_consume),
        ("franz-go", kafka_clients.franz_go_produce_consume),
        ("kafka-python", kafka_clients.kafka_python_produce_consume),
        ("aiokafka", kafka_clients.aiokafka_produce_consume),
    ):
        result = produce_consume(kafka, token["token_id"], token["hmac"], _unique(name), 20)
        assert result.received == result.sent and len(result.sent) == 20, name


def test_revoked_through_tokensvc_by_id_owner_and_label_is_refused_on_both_kafka_brokers(
        cluster: LocalCluster) -> None:
    owner = _unique("User:revoked-owner")
    by_id = _create(cluster)
    by_owner = _create(cluster, "--owner-principal", owner)
    by_label = _create(cluster, "--label", "revoke=this-batch")
    tokens = [by_id, by_owner, by_label]
    kafka = _kafka_addresses(cluster)
    for token in tokens:
        assert poll_until(lambda t=token: _everywhere(kafka, lambda a: _token_logs_in(a, t)),
                          timeout=20), token["token_id"]

    _cli(cluster, _tokensvc(cluster), "--expire", "--token-id", by_id["token_id"])
    _cli(cluster, _tokensvc(cluster), "--expire", "--owner-principal", owner)
    _cli(cluster, _tokensvc(cluster), "--expire", "--label", "revoke=this-batch")
    for token in tokens:
        assert poll_until(
            lambda t=token: not any(_token_logs_in(a, t) for a in kafka), timeout=20,
        ), token["token_id"]


def test_an_open_kafka_session_ends_at_its_reauthentication_after_a_revocation(
        cluster: LocalCluster) -> None:
    token = _create(cluster)
    session = kafka_clients.java_session(_kafka(cluster), token["token_id"], token["hmac"],
                                         _unique("reauth"))
    try:
        session.wait_open()
        revoked_at = time.monotonic()
        _cli(cluster, _tokensvc(cluster), "--expire", "--token-id", token["token_id"])
        ended = session.wait_end(timeout_s=REAUTH_MS / 1000 * 3 + 20)
        assert ended.refused, ended
        assert time.monotonic() - revoked_at <= REAUTH_MS / 1000 * 3 + 20
    finally:
        session.close()


def test_a_kafka_token_is_described_logs_in_counts_and_is_revoked_by_tokensvc(
        cluster: LocalCluster) -> None:
    owner = _unique("User:quota")
    out = _tool("kafka-delegation-tokens.sh", "--bootstrap-server", _kafka(cluster),
                "--command-config", _props(cluster), "--create", "--max-life-time-period", "-1",
                "--owner-principal", owner)
    token_id = re.search(r"tokenId : (\S+)", out).group(1)
    row = next(line for line in out.splitlines() if line.startswith(token_id))
    kafka_token = {"token_id": token_id, "hmac": row.split()[1]}

    assert poll_until(lambda: _described(cluster, token_id) is not None, timeout=20)
    described = _described(cluster, token_id)
    assert str(described.owner) == owner and not described.labels
    for address in _tokensvc(cluster).split(","):
        assert poll_until(lambda a=address: _token_logs_in(a, kafka_token), timeout=20), address

    # The Kafka token is one of the owner's OWNER_LIMIT.
    for _ in range(OWNER_LIMIT - 1):
        _create(cluster, "--owner-principal", owner)
    with _admin(cluster) as admin:
        with pytest.raises(AdminError) as refused:
            admin.create_token(owner=owner)
        assert refused.value.error == Errors.POLICY_VIOLATION

    revoked = _cli(cluster, _tokensvc(cluster), "--expire", "--owner-principal", owner)
    assert token_id in json.dumps(revoked)
    addresses = _tokensvc(cluster).split(",") + _kafka_addresses(cluster)
    assert poll_until(lambda: not any(_token_logs_in(a, kafka_token) for a in addresses),
                      timeout=20)


def test_renewed_through_a_kafka_broker_a_token_keeps_its_labels(
        cluster: LocalCluster, zk) -> None:
    owner = _unique("User:renewed")
    token = _create(cluster, "--owner-principal", owner, "--renewer-principal", "User:admin",
                    "--label", "renew=through-kafka", "--max-life-time-period", "-1")
    period = 2 * 3_600_000
    renewed = _cli(cluster, _kafka(cluster), "--renew", "--hmac", token["hmac"],
                   "--renew-time-period", str(period))
    expiry = renewed["expiry_timestamp_ms"]
    assert expiry > token["expiry_timestamp_ms"] - 86_400_000 + period - 60_000
    # Kafka rewrote the znode with its seven fields: the labels are gone from it.
    stored = json.loads(zk.get(layout.token_path(token["token_id"]))[0])
    assert stored["expiryTimestamp"] == expiry and "labels" not in stored

    assert poll_until(lambda: _described(cluster, token["token_id"]).expiry_ms == expiry,
                      timeout=20)
    assert dict(_described(cluster, token["token_id"]).labels) == {"renew": "through-kafka"}
    _cli(cluster, _tokensvc(cluster), "--expire", "--label", "renew=through-kafka")
    assert poll_until(lambda: _described(cluster, token["token_id"]) is None, timeout=20)
    assert zk.exists(layout.token_path(token["token_id"])) is None


def test_an_expired_token_is_refused_on_both_sides_whichever_controller_sweeps_it(
        cluster: LocalCluster, zk) -> None:
    short = _create(cluster, "--max-life-time-period", "6000")
    assert _token_logs_in(_tokensvc(cluster).split(",")[0], short)
    assert poll_until(lambda: time.time() * 1000 > short["max_timestamp_ms"] + 200, timeout=20)
    # tokensvc refuses a token past its expiry at once, swept or not.
    for address in _tokensvc(cluster).split(","):
        assert not _token_logs_in(address, short), address
    # A Kafka broker checks no expiry at login (ScramSaslServer): it lets a token still in
    # its cache through, with a session of zero lifetime that its first request closes,
    # and refuses the login once a sweep (every second here, on either side) deleted it.
    for address in _kafka_addresses(cluster):
        assert poll_until(lambda a=address: not _token_logs_in(a, short), timeout=20), address
    # Both controllers sweep every second: the znode goes, whoever deletes it first.
    assert poll_until(lambda: zk.exists(layout.token_path(short["token_id"])) is None,
                      timeout=20)
    assert _described(cluster, short["token_id"]) is None
    assert _described(cluster, short["token_id"], _kafka(cluster)) is None
    for entry in cluster.info["kafka"]["brokers"]:
        text = Path(entry["log"]).read_text(encoding="utf-8", errors="replace")
        assert " ERROR " not in text, entry["id"]


# -- users and ACLs ------------------------------------------------------------------------


def _topic_readable(bootstrap: str, config: dict, topic: str) -> bool:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                             request_timeout_ms=20_000, **config)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        consumer.poll(timeout_ms=3_000)
        consumer.position(TopicPartition(topic, 0))
        return True
    except TopicAuthorizationFailedError:
        return False
    finally:
        consumer.close()


def _kafka_python_user(user: str, password: str) -> dict:
    return {"sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": user,
            "sasl_plain_password": password}


def test_scram_users_and_acls_work_both_ways(cluster: LocalCluster) -> None:
    alice, alice_pw = _unique("alice"), uuid.uuid4().hex
    bob, bob_pw = _unique("bob"), uuid.uuid4().hex
    topic = _unique("acl-topic")
    _tool("kafka-topics.sh", "--bootstrap-server", _kafka(cluster), "--command-config",
          _props(cluster), "--create", "--topic", topic, "--partitions", "1",
          "--replication-factor", "2")

    # A user created through tokensvc logs in on both Kafka brokers.
    with _admin(cluster) as admin:
        admin.upsert_user_scram_credential(alice, ScramMechanism.SCRAM_SHA_512, alice_pw)
    for address in _kafka_addresses(cluster):
        assert poll_until(lambda a=address: _logs_in(a, user_config(alice, alice_pw)),
                          timeout=20), address

    # A user created with Kafka's kafka-configs.sh on a Kafka broker logs in on tokensvc.
    _tool("kafka-configs.sh", "--bootstrap-server", _kafka(cluster), "--command-config",
          _props(cluster), "--alter", "--add-config", f"SCRAM-SHA-512=[password={bob_pw}]",
          "--entity-type", "users", "--entity-name", bob)
    for address in _tokensvc(cluster).split(","):
        assert poll_until(lambda a=address: _logs_in(a, user_config(bob, bob_pw)),
                          timeout=20), address

    # An ACL created through tokensvc is enforced by Kafka's AclAuthorizer.
    read = AclBinding(
        ResourcePattern(ResourceType.TOPIC, topic),
        AccessControlEntry(f"User:{alice}", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )
    alice_config = _kafka_python_user(alice, alice_pw)
    assert not _topic_readable(_kafka(cluster), alice_config, topic)
    with _admin(cluster) as admin:
        admin.create_acls([read])
    assert poll_until(lambda: _topic_readable(_kafka(cluster), alice_config, topic), timeout=20)
    with _admin(cluster) as admin:
        admin.delete_acls([AclBindingFilter.exact(read)])
    assert poll_until(lambda: not _topic_readable(_kafka(cluster), alice_config, topic),
                      timeout=20)

    # An ACL created with Kafka's kafka-acls.sh on a Kafka broker is enforced by tokensvc:
    # bob may describe the admin's tokens only once it exists.
    def bob_sees_admin_tokens() -> bool:
        with AdminClient(_tokensvc(cluster), user_config(bob, bob_pw), timeout_s=20) as client:
            return any(str(t.owner) == "User:admin" for t in client.describe_tokens())

    _create(cluster)  # at least one of the admin's tokens
    assert not bob_sees_admin_tokens()
    _tool("kafka-acls.sh", "--bootstrap-server", _kafka(cluster), "--command-config",
          _props(cluster), "--add", "--allow-principal", f"User:{bob}", "--operation",
          "DescribeTokens", "--user-principal", "User:admin")
    assert poll_until(bob_sees_admin_tokens, timeout=20)


# -- tools across ----------------------------------------------------------------------------


def test_tokensvc_cli_and_admin_client_manage_tokens_on_the_kafka_brokers(
        cluster: LocalCluster) -> None:
    kafka = _kafka(cluster)
    created = _create(cluster, "--renewer-principal", "User:ops", bootstrap=kafka)
    assert created["renewers"] == ["User:ops"]
    listed = _cli(cluster, kafka, "--describe")["tokens"]
    assert created["token_id"] in [t["token_id"] for t in listed]
    renewed = _cli(cluster, kafka, "--renew", "--hmac", created["hmac"],
                   "--renew-time-period", "600000")
    assert renewed["expiry_timestamp_ms"] <= int(time.time() * 1000) + 600_000 + 5_000
    _cli(cluster, kafka, "--expire", "--hmac", created["hmac"])
    assert poll_until(lambda: _described(cluster, created["token_id"], kafka) is None,
                      timeout=20)

    with _admin(cluster, kafka) as admin:
        made = admin.create_token(renewers=["User:ops"], max_lifetime_ms=3_600_000)
        assert made.max_ms - made.issue_ms <= 3_600_000
        assert made.token_id in [t.token_id for t in admin.describe_tokens()]
        admin.renew_token(made.hmac, 60_000)
        admin.expire_token(made.hmac, -1)
        assert poll_until(lambda: made.token_id not in
                          [t.token_id for t in admin.describe_tokens()], timeout=20)


def test_kafkas_own_tools_work_against_the_tokensvc_brokers(cluster: LocalCluster) -> None:
    tokensvc = _tokensvc(cluster)
    common = ["--bootstrap-server", tokensvc, "--command-config", _props(cluster)]
    owner = _unique("User:kafka-tool-owner")
    out = _tool("kafka-delegation-tokens.sh", *common, "--create", "--max-life-time-period",
                "-1", "--renewer-principal", "User:ops", "--owner-principal", owner)
    token_id = re.search(r"tokenId : (\S+)", out).group(1)
    hmac = next(line for line in out.splitlines() if line.startswith(token_id)).split()[1]
    described = _described(cluster, token_id)
    assert str(described.owner) == owner and [str(r) for r in described.renewers] == ["User:ops"]

    own = _tool("kafka-delegation-tokens.sh", *common, "--create", "--max-life-time-period",
                "3600000")
    own_id = re.search(r"tokenId : (\S+)", own).group(1)
    own_hmac = next(line for line in own.splitlines() if line.startswith(own_id)).split()[1]
    assert "User:admin" in next(line for line in own.splitlines() if line.startswith(own_id))

    listed = _tool("kafka-delegation-tokens.sh", *common, "--describe", "--owner-principal",
                   owner)
    assert token_id in listed
    renewed = _tool("kafka-delegation-tokens.sh", *common, "--renew", "--hmac", own_hmac,
                    "--renew-time-period", "600000")
    assert "Completed renew operation" in renewed, renewed
    expired = _tool("kafka-delegation-tokens.sh", *common, "--expire", "--hmac", hmac,
                    "--expiry-time-period", "-1")
    assert "Completed expire operation" in expired, expired
    assert poll_until(lambda: _described(cluster, token_id) is None, timeout=20)

    # kafka-acls.sh: add, list, remove on tokensvc.
    principal = f"User:{_unique('acl-user')}"
    acl = ["--allow-principal", principal, "--operation", "Read", "--topic", "kafka-tool-topic"]
    _tool("kafka-acls.sh", *common, "--add", *acl)
    assert principal in _tool("kafka-acls.sh", *common, "--list", "--topic", "kafka-tool-topic")
    _tool("kafka-acls.sh", *common, "--remove", "--force", *acl)
    assert principal not in _tool("kafka-acls.sh", *common, "--list", "--topic",
                                  "kafka-tool-topic")

    # kafka-configs.sh: a SCRAM user made on tokensvc logs in there.
    user, password = _unique("configs-user"), uuid.uuid4().hex
    _tool("kafka-configs.sh", *common, "--alter", "--add-config",
          f"SCRAM-SHA-256=[iterations=4096,password={password}]", "--entity-type", "users",
          "--entity-name", user)
    # Its --describe asks DescribeClientQuotas and DescribeUserScramCredentials: the
    # quota a Kafka broker set on the user (AlterClientQuotas is Kafka's) and the credential.
    _tool("kafka-configs.sh", "--bootstrap-server", _kafka(cluster), "--command-config",
          _props(cluster), "--alter", "--add-config", "producer_byte_rate=2048",
          "--entity-type", "users", "--entity-name", user)
    shown = _tool("kafka-configs.sh", *common, "--describe", "--entity-type", "users",
                  "--entity-name", user)
    assert f"Quota configs for user-principal '{user}' are producer_byte_rate=2048.0" in shown, \
        shown
    assert f"SCRAM credential configs for user-principal '{user}' are " \
           "SCRAM-SHA-256=iterations=4096" in shown, shown
    for address in tokensvc.split(","):
        assert poll_until(lambda a=address: _logs_in(
            a, user_config(user, password, "SCRAM-SHA-256")), timeout=20), address


QUOTA_MATRIX = Path(__file__).resolve().parents[2] / "java" / "ClientQuotaMatrix.java"


def test_client_quotas_are_described_as_a_kafka_broker_describes_them(
        cluster: LocalCluster) -> None:
    """DescribeClientQuotas on a tokensvc broker answers what a Kafka broker on the same
    ZooKeeper answers, filter for filter (kafka-clients' Admin, quotas set through Kafka):
    exact, default and any-name components, strict or not, users, client ids and their
    pairs, ips, a sanitized name, and the filters Kafka refuses."""
    java = shutil.which("java")
    assert java, "java (a JDK 17) is needed to run tests/java/ClientQuotaMatrix.java"
    classpath = java_program(QUOTA_MATRIX, kafka_jars())
    prefix = _unique("quota")
    ran = subprocess.run(
        [java, *SHORT_LIVED_KAFKA.split(), "-cp", classpath, "ClientQuotaMatrix", _props(cluster), prefix,
         _kafka(cluster), _tokensvc(cluster)],
        check=False, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    assert ran.returncode == 0, (ran.stdout, ran.stderr[-3000:])
    answers: dict[str, dict[str, str]] = {}
    for line in ran.stdout.splitlines():
        name, bootstrap, answer = line.split("\t")
        answers.setdefault(name, {})[bootstrap] = answer
    assert len(answers) == 20, answers
    for name, by_broker in answers.items():
        assert by_broker[_tokensvc(cluster)] == by_broker[_kafka(cluster)], name
    ours = {name: by_broker[_tokensvc(cluster)] for name, by_broker in answers.items()}
    assert ours["user"] == f"{{user={prefix}-user}}={{producer_byte_rate=1024.0}}"
    assert ours["user-client"] == (f"{{client-id={prefix}-client, user={prefix}-user}}="
                                   "{producer_byte_rate=10.0}")
    assert ours["user-sanitized"] == f"{{user={prefix} user ü*}}={{request_percentage=12.5}}"
    assert ours["defaults"] == "{client-id=null, user=null}={consumer_byte_rate=1.0E9}"
    assert ours["ip"] == "{ip=127.0.0.77}={connection_creation_rate=5.0}"
    assert ours["strict-nothing"] == ours["missing-user"] == ""
    assert ours["duplicate-user"] == ours["ip-with-user"] == \
        "error org.apache.kafka.common.errors.InvalidRequestException"
    assert ours["unknown-type"] == "error org.apache.kafka.common.errors.UnsupportedVersionException"


# -- Kafka stays in charge (last: it kills brokers) --------------------------------------------


def _kafka_controller(zk) -> int | None:
    try:
        return json.loads(zk.get(layout.CONTROLLER)[0])["brokerid"]
    except NoNodeError:  # between two controllers
        return None


def _tokensvc_controller(zk) -> int | None:
    try:
        return layout.decode_controller(zk.get(layout.BESIDE_KAFKA.controller)[0])
    except NoNodeError:  # between two controllers
        return None


def test_kafka_stays_in_charge_of_kafka(cluster: LocalCluster, zk) -> None:
    assert _kafka_controller(zk) in KAFKA_IDS
    assert sorted(int(i) for i in zk.get_children(layout.BROKER_IDS)) == KAFKA_IDS
    assert sorted(int(i) for i in zk.get_children(layout.BESIDE_KAFKA.broker_ids)) == TOKENSVC_IDS
    kafka = _kafka(cluster)
    topic = _unique("two-replicas")
    _tool("kafka-topics.sh", "--bootstrap-server", kafka, "--command-config", _props(cluster),
          "--create", "--topic", topic, "--partitions", "4", "--replication-factor", "2")
    described = _tool("kafka-topics.sh", "--bootstrap-server", kafka, "--command-config",
                      _props(cluster), "--describe", "--topic", topic)
    replicas = {int(r) for group in re.findall(r"Replicas: ([\d,]+)", described)
                for r in group.split(",")}
    assert replicas == set(KAFKA_IDS)

    # A kill of tokensvc's controller changes nothing of Kafka's.
    kafka_controller = _kafka_controller(zk)
    tokensvc_controller = _tokensvc_controller(zk)
    assert tokensvc_controller in TOKENSVC_IDS
    cluster.kill_broker(tokensvc_controller)
    assert poll_until(lambda: _tokensvc_controller(zk) not in (None, tokensvc_controller),
                      timeout=40)
    assert _kafka_controller(zk) == kafka_controller
    assert sorted(int(i) for i in zk.get_children(layout.BROKER_IDS)) == KAFKA_IDS
    cluster.start_broker(tokensvc_controller)

    # A kill of Kafka's controller: the other Kafka broker takes over, never a tokensvc one.
    victim = next(b for b in cluster.kafka_brokers() if b.broker_id == kafka_controller)
    victim.kill()
    assert poll_until(lambda: _kafka_controller(zk) in [i for i in KAFKA_IDS
                                                        if i != kafka_controller], timeout=60)
    assert sorted(int(i) for i in zk.get_children(layout.BROKER_IDS)) in (
        KAFKA_IDS, [i for i in KAFKA_IDS if i != kafka_controller])
    victim.start()
    assert sorted(int(i) for i in zk.get_children(layout.BROKER_IDS)) == KAFKA_IDS
    assert _kafka_controller(zk) in KAFKA_IDS
    assert sorted(int(i) for i in zk.get_children(layout.BESIDE_KAFKA.broker_ids)) == TOKENSVC_IDS
    # Topics still get leaders and Kafka replicas.
    topic = _unique("after-kills")
    _tool("kafka-topics.sh", "--bootstrap-server", kafka, "--command-config", _props(cluster),
          "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "2")
    described = _tool("kafka-topics.sh", "--bootstrap-server", kafka, "--command-config",
                      _props(cluster), "--describe", "--topic", topic)
    leaders = {int(x) for x in re.findall(r"Leader: (-?\d+)", described)}
    assert leaders and leaders <= set(KAFKA_IDS)
