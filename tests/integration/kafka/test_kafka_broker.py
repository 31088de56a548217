"""Real Apache Kafka 3.9 brokers (ZooKeeper mode) started by tokensvc's code, and Kafka's
own tools against them.

One module-scoped local cluster: the managed ZooKeeper, secured as always (TLS only,
client certificates, SASL, ACLs), its admin user written by tokensvc's code, and two
Kafka brokers (ids 101 and 102) with the brokers' ZooKeeper identity; no tokensvc broker
runs (until tokensvc shares a ZooKeeper with Kafka, its controller election and
registry would stand in Kafka's way). Each test then checks a result with tokensvc's own
code: the ZooKeeper layout (token and credential znodes Kafka wrote), its admin client
(logins on the Kafka brokers).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import socket
import subprocess
import time
from pathlib import Path

import pytest

from cli.cluster_cmd import usage_text
from tests.support.local_cluster import user_config
from tests.support.wait import poll_until
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
from tokensvc.client_config import load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.core.keys import key_id, token_hmac
from tokensvc.core.labels import validate
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.kafka import KafkaBroker, KafkaStartError, run_tool
from tokensvc.scram.formatter import ScramMechanism, derive_credential
from zk import layout
from zk.acl_store import AclStore
from zk.credential_store import CredentialStore
from zk.token_store import TokenStore

KAFKA_IDS = [101, 102]
TOOL_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, kafka_jvm: None) -> LocalCluster:
    began = time.monotonic()
    with LocalCluster.up(tmp_path_factory.mktemp("kafka-cluster"), brokers=0, kafka_brokers=2,
                         die_with_parent=True, timeout=180) as local:
        print(f"ZooKeeper and 2 Kafka brokers up in {time.monotonic() - began:.1f}s")
        yield local


def _admin_args(cluster: LocalCluster) -> list[str]:
    return ["--bootstrap-server", cluster.info["kafka"]["bootstrap_servers"],
            "--command-config", cluster.info["admin"]["properties"]]


def _tool(script: str, *args: str, stdin: str | None = None) -> str:
    result = run_tool(script, list(args), timeout=TOOL_TIMEOUT_S, stdin=stdin)
    assert result.returncode == 0, f"{script} exited {result.returncode}: {result.stderr[-3000:]}"
    return result.stdout


def test_only_the_kafka_brokers_are_registered_and_one_is_controller(cluster: LocalCluster,
                                                                     zk) -> None:
    assert sorted(int(i) for i in zk.get_children(layout.BROKER_IDS)) == KAFKA_IDS
    controller = json.loads(zk.get(layout.CONTROLLER)[0])
    assert controller["brokerid"] in KAFKA_IDS
    recorded = cluster.info["kafka"]
    assert [b["id"] for b in recorded["brokers"]] == KAFKA_IDS
    assert recorded["bootstrap_servers"] == ",".join(b["listener"] for b in recorded["brokers"])
    assert sorted(cluster.kafka_pids()) == sorted(b["pid"] for b in recorded["brokers"])
    for entry in recorded["brokers"]:
        assert "started (kafka.server.KafkaServer)" in Path(entry["log"]).read_text()


def test_another_process_finds_the_kafka_brokers_to_stop(cluster: LocalCluster) -> None:
    # `tokensvc cluster down` opens cluster.json: it must see the Kafka brokers running.
    assert sorted(LocalCluster.open(cluster.directory).kafka_pids()) == sorted(cluster.kafka_pids())
    assert len(cluster.kafka_pids()) == 2


def test_kafka_sets_the_brokers_acl_on_what_it_creates(zk) -> None:
    # zookeeper.set.acl=true with the brokers' SASL identity: Kafka's znodes are the
    # brokers' to write, and world-readable like tokensvc's.
    acls, _ = zk.get_acls(layout.BROKER_IDS)
    schemes = {(acl.id.scheme, acl.perms) for acl in acls}
    assert ("sasl", 31) in schemes
    assert ("world", 1) in schemes


def test_a_topic_with_two_replicas_is_on_both_kafka_brokers(cluster: LocalCluster) -> None:
    _tool("kafka-topics.sh", *_admin_args(cluster), "--create", "--topic", "two-replicas",
          "--partitions", "2", "--replication-factor", "2")
    described = _tool("kafka-topics.sh", *_admin_args(cluster), "--describe",
                      "--topic", "two-replicas")
    replicas = re.findall(r"Replicas: ([\d,]+)", described)
    assert len(replicas) == 2, described
    assert all(sorted(int(r) for r in found.split(",")) == KAFKA_IDS for found in replicas)


def test_kafka_delegation_tokens_create_writes_a_token_tokensvc_reads(cluster: LocalCluster,
                                                                     zk) -> None:
    out = _tool("kafka-delegation-tokens.sh", *_admin_args(cluster), "--create",
                "--max-life-time-period", "-1", "--renewer-principal", "User:alice")
    token_id = re.search(r"Created delegation token with tokenId : (\S+)", out).group(1)
    data = zk.get(layout.token_path(token_id))[0]
    token = layout.decode_token(data)
    assert token.token_id == token_id
    assert str(token.owner) == "User:admin"
    assert [str(r) for r in token.renewers] == ["User:alice"]
    # Byte for byte what tokensvc writes for the same token, and its notification too.
    assert layout.encode_token(token) == data
    notes = [zk.get(f"{layout.TOKEN_CHANGES}/{c}")[0] for c in zk.get_children(layout.TOKEN_CHANGES)
             if re.fullmatch(r"token_change_[0-9]{10}", c)]
    assert layout.encode_token_change(token_id) in notes


def test_kafka_configs_creates_a_scram_user_who_logs_in_on_kafka(cluster: LocalCluster,
                                                                 zk) -> None:
    _tool("kafka-configs.sh", *_admin_args(cluster), "--alter", "--entity-type", "users",
          "--entity-name", "alice", "--add-config", "SCRAM-SHA-512=[password=alice-secret]")
    assert ScramMechanism.SCRAM_SHA_512 in CredentialStore(zk).get("alice")
    bootstrap = cluster.info["kafka"]["bootstrap_servers"]
    with AdminClient(bootstrap, user_config("alice", "alice-secret"), timeout_s=30) as alice:
        assert sorted(n.broker_id for n in alice.describe_cluster().brokers) == KAFKA_IDS
    with AdminClient(bootstrap, user_config("alice", "wrong"), timeout_s=10) as intruder, \
            pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED|[Aa]uthentication"):
        intruder.describe_cluster()


def _printed_commands(text: str) -> list[str]:
    """The shell commands of the usage text's produce-and-consume part (continuation
    lines joined)."""
    part = text.split("Produce and consume on them with a delegation token", 1)[1]
    part = part.split("\n\n", 1)[0].replace("\\\n", " ")
    return [line.strip() for line in part.splitlines()[2:] if line.strip()]


def test_the_printed_produce_and_consume_work_with_the_token(cluster: LocalCluster) -> None:
    # What `./dev run --kafka-brokers N` prints, run as printed: Kafka's console tools
    # from the cluster's kafka-bin/, logged in with the token of kafka-token.properties.
    config = load_client_config(cluster.info["kafka"]["token_properties"])
    assert config.token_auth
    with AdminClient(cluster.info["kafka"]["bootstrap_servers"], config,
                     timeout_s=30) as token_session:
        described = token_session.describe_cluster()
    assert sorted(n.broker_id for n in described.brokers) == KAFKA_IDS
    produce, consume = _printed_commands(usage_text(cluster.info, cluster.directory))
    assert produce.startswith("echo hello | ") and "kafka-console-producer.sh" in produce
    produced = subprocess.run(["bash", "-c", produce], capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT_S, check=False)
    assert produced.returncode == 0, produced.stderr[-3000:]
    consumed = subprocess.run(["bash", "-c", f"{consume} --timeout-ms 60000"],
                              capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              check=False)
    assert consumed.returncode == 0, consumed.stderr[-3000:]
    assert consumed.stdout.splitlines() == ["hello"]


def test_a_broker_that_cannot_bind_says_so_and_where_to_look(cluster: LocalCluster,
                                                            tmp_path: Path) -> None:
    admin = cluster.info["admin"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = KafkaBroker(tmp_path / "kafka-109", 109, cluster.zk_settings(),
                             admin=(admin["username"], admin["password"]), secret_key="k",
                             port=taken.getsockname()[1])
        with pytest.raises(KafkaStartError, match="exited with status 1 before it was ready; "
                                                  f"see {broker.log_path}"):
            broker.start(timeout=120)
    assert broker.pid is None
    assert "Address already in use" in broker.log_path.read_text() + broker.output_path.read_text()


def _secret_key(cluster: LocalCluster) -> str:
    config = Path(cluster.info["kafka"]["brokers"][0]["config"]).read_text(encoding="utf-8")
    return re.search(r"^delegation\.token\.secret\.key=(.*)$", config, re.MULTILINE).group(1)


def test_a_kafka_renewal_of_a_token_tokensvc_wrote_keeps_its_labels_apart(
        cluster: LocalCluster, zk) -> None:
    """Issue #50: a token tokensvc wrote with labels (its key id and labels also kept in
    /tokensvc/token_labels/<id>), renewed with Kafka's own kafka-delegation-tokens.sh on a
    Kafka broker: Kafka rewrites the znode with its seven fields, and tokensvc's read of
    it still has the labels and key id, with Kafka's new expiry."""
    key = _secret_key(cluster)
    store = TokenStore(zk, beside_kafka=True)
    store.ensure_paths()
    now = int(time.time() * 1000)
    admin = KafkaPrincipal.user("admin")
    token = TokenInformation(
        base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode(), admin, admin,
        (), now, now + 3_600_000, now + 7 * 86_400_000, key_id(key),
        validate({"job": "renewed-by-kafka"}.items()))
    store.create(token)
    hmac = base64.b64encode(token_hmac(key, token.token_id)).decode()
    outputs: list[str] = []

    def kafka_renews() -> bool:  # once the Kafka broker asked has followed the create
        result = run_tool("kafka-delegation-tokens.sh", [
            *_admin_args(cluster), "--renew", "--hmac", hmac, "--renew-time-period", "7200000"],
            timeout=TOOL_TIMEOUT_S)
        outputs.append(result.stdout + result.stderr)
        return result.returncode == 0 and "Completed renew operation" in result.stdout

    assert poll_until(kafka_renews, timeout=120, interval=1), outputs[-1][-3000:]
    znode = json.loads(zk.get(layout.token_path(token.token_id))[0])
    assert "labels" not in znode and "keyId" not in znode  # Kafka's seven fields
    assert znode["expiryTimestamp"] > token.expiry_timestamp
    read = TokenStore(zk, beside_kafka=True).get(token.token_id)
    assert read.labels == token.labels and read.key_id == token.key_id
    assert read.expiry_timestamp == znode["expiryTimestamp"]


def test_a_scram_user_tokensvc_writes_keeps_the_quota_kafka_configs_wrote(
        cluster: LocalCluster, zk) -> None:
    """Issue #50: tokensvc's credential write is a read-modify-write of the user's config
    znode, so the quota Kafka's kafka-configs.sh set in it survives; the user logs in on
    the Kafka brokers with the credential tokensvc wrote."""
    _tool("kafka-configs.sh", *_admin_args(cluster), "--alter", "--entity-type", "users",
          "--entity-name", "bob", "--add-config", "producer_byte_rate=1024")
    CredentialStore(zk).upsert("bob", ScramMechanism.SCRAM_SHA_512,
                               derive_credential("bob-secret", ScramMechanism.SCRAM_SHA_512, 4096))
    described = _tool("kafka-configs.sh", *_admin_args(cluster), "--describe", "--entity-type",
                      "users", "--entity-name", "bob")
    assert "producer_byte_rate=1024" in described, described
    bootstrap = cluster.info["kafka"]["bootstrap_servers"]

    def logs_in() -> bool:  # once the Kafka brokers followed /config/changes
        try:
            with AdminClient(bootstrap, user_config("bob", "bob-secret"), timeout_s=10) as bob:
                return sorted(n.broker_id for n in bob.describe_cluster().brokers) == KAFKA_IDS
        except Exception:  # noqa: BLE001 - refused until the broker has the credential
            return False

    assert poll_until(logs_in, timeout=30, interval=0.5)


def test_acls_tokensvc_writes_reach_kafkas_acl_authorizer_through_its_notifications(
        cluster: LocalCluster, zk) -> None:
    """Issue #50: the ACL znodes (Kafka 3.9's bytes) and change notifications (Kafka's
    prefixes and payloads, literal and prefixed) tokensvc writes are what a Kafka broker's
    AclAuthorizer loads: kafka-acls.sh --list on a Kafka broker shows them, and no longer
    once tokensvc removed them."""
    store = AclStore(zk)
    entry = AccessControlEntry("User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW)
    bindings = [AclBinding(ResourcePattern(ResourceType.TOPIC, "zk-written", PatternType.LITERAL),
                           entry),
                AclBinding(ResourcePattern(ResourceType.GROUP, "zk-written.",
                                           PatternType.PREFIXED), entry)]
    store.add(bindings)

    outputs: list[str] = []

    def listed() -> str:
        outputs.append(_tool("kafka-acls.sh", *_admin_args(cluster), "--list", "--principal",
                             "User:carol"))
        return outputs[-1]

    def shows_both() -> bool:
        out = listed()
        return ("name=zk-written, patternType=LITERAL" in out
                and "name=zk-written., patternType=PREFIXED" in out)

    assert poll_until(shows_both, timeout=60, interval=1), outputs[-1]
    assert "principal=User:carol, host=*, operation=READ, permissionType=ALLOW" in outputs[-1]
    store.remove([AclBindingFilter.of(name="zk-written"), AclBindingFilter.of(name="zk-written.")])
    assert poll_until(lambda: "zk-written" not in listed(), timeout=60, interval=1), outputs[-1]
