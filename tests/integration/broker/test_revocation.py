"""Revocation without HMACs and the per-owner limit, on 3 real brokers:

- revoke by owner through a non-controller: alice has 1,000 tokens with live sessions on
  every broker, bob 10; afterwards no login with alice's tokens succeeds anywhere, her
  sessions are closed within 1 s, bob's tokens still work;
- revoke by id: unknown ids are reported and make the exit status non-zero; a principal
  without the permission is refused and nothing changes; ALL on the DelegationToken
  resource grants it;
- a dry run changes nothing;
- with delegation.token.max.per.owner=100 the 101st create is refused with POLICY_VIOLATION,
  ZooKeeper holds 100 of that owner's tokens, other owners are unaffected;
- deleting a user (confluent-kafka's alter_user_scram_credentials, through a
  non-controller) deletes her tokens in the same transaction: refused on the answering
  broker at the acknowledgement, everywhere within 1 s; her password and token sessions on
  every broker are closed within 1 s, and her session on the answering broker creates no
  token after the acknowledgement; with delegation.token.expire.with.owner=false her tokens
  keep working (her password sessions still end).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

from cli.delegation_token import delegation_token
from tests.support.local_cluster import ClusterFactory, admin_client, wait_served_everywhere
from tests.support.tokens import token_client_config, token_logs_in
from tests.support.wait import poll_until
from tokensvc.admin import AdminClient, AdminError, TokenDescription
from tokensvc.admin.connection import BrokerConnection, ConnectionLost
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.client_config import ClientConfig, client_config_from_properties
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.protocol import ApiKey

pytestmark = pytest.mark.cluster(brokers=3,
                                 users=[("mallory", "SCRAM-SHA-512", "mallory-pw")])


def _admin(cluster: LocalCluster, address: str | None = None,
           config: ClientConfig | None = None) -> AdminClient:
    return admin_client(cluster, address=address, config=config, timeout_s=20)


def _addresses(cluster: LocalCluster) -> list[str]:
    return [b["listeners"]["SASL_PLAINTEXT"] for b in cluster.info["brokers"]]


def _non_controller(cluster: LocalCluster) -> str:
    with _admin(cluster) as admin:
        controller = admin.describe_cluster().controller_id
    return next(b["listeners"]["SASL_PLAINTEXT"] for b in cluster.info["brokers"]
                if b["id"] != controller)


def _create(cluster: LocalCluster, owner: str, count: int) -> list[TokenDescription]:
    def batch(n: int) -> list[TokenDescription]:
        with _admin(cluster) as admin:
            return [admin.create_token(owner=owner) for _ in range(n)]

    workers = 8
    sizes = [count // workers + (1 if i < count % workers else 0) for i in range(workers)]
    with ThreadPoolExecutor(workers) as pool:
        return [t for part in pool.map(batch, sizes) for t in part]


def _logs_in(address: str, token: TokenDescription) -> bool:
    return token_logs_in(address, token, "revocation-test")


def _open_session(address: str, token: TokenDescription) -> BrokerConnection:
    conn = BrokerConnection(address, token_client_config(token), client_id="revocation-session")
    conn.open(time.monotonic() + 10)
    return conn


def _closed(conn: BrokerConnection) -> bool:
    try:
        conn.request(ApiKey.METADATA, {"Topics": []}, time.monotonic() + 2, 1)
    except (ConnectionLost, AdminError, OSError):
        return True
    return False


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(delegation_token, list(args))
    return result.exit_code, result.output


def test_revoke_by_owner_through_a_non_controller_refuses_every_token_everywhere(
    cluster: LocalCluster,
) -> None:
    alice = _create(cluster, "User:alice", 1_000)
    bob = _create(cluster, "User:bob", 10)
    sessions = [_open_session(address, token)
                for address in _addresses(cluster) for token in alice[:3]]
    assert not any(_closed(s) for s in sessions)
    started = time.monotonic()
    code, output = _cli("--bootstrap-server", _non_controller(cluster),
                        "--command-config", cluster.info["admin"]["properties"],
                        "--expire", "--owner-principal", "User:alice", "--wait-all-brokers",
                        "--output", "json")
    took = time.monotonic() - started
    assert code == 0, output
    answer = json.loads(output)
    assert answer["count"] == 1_000 and answer["created_after"] == []
    assert {r["token_id"] for r in answer["revoked"]} == {t.token_id for t in alice}
    assert {r["owner"] for r in answer["revoked"]} == {"User:alice"}
    assert len(answer["brokers"]) == 3
    # Every session of alice's tokens closed within 1 s of the command's return.
    assert poll_until(lambda: all(_closed(s) for s in sessions), timeout=1.0)
    for s in sessions:
        s.close()
    for address in _addresses(cluster):
        assert not any(_logs_in(address, t) for t in alice[::50])
        assert all(_logs_in(address, t) for t in bob)
    with _admin(cluster) as admin:
        assert admin.describe_tokens(owners=["User:alice"]) == []
        assert len(admin.describe_tokens(owners=["User:bob"])) == 10
    print(f"revoked 1,000 tokens, refused on 3 brokers, in {took:.2f} s")
    assert poll_until(lambda: _audited_revocations(cluster, "revoked_by_owner")
                      >= {t.token_id for t in alice}, timeout=5.0)


def test_revoke_by_id_reports_unknown_ids_with_a_non_zero_exit(cluster: LocalCluster) -> None:
    dave = _create(cluster, "User:dave", 3)
    code, output = _cli("--bootstrap-server", _non_controller(cluster),
                        "--command-config", cluster.info["admin"]["properties"],
                        "--expire", "--token-id", dave[0].token_id, "--token-id",
                        dave[1].token_id, "--token-id", "no-such-token-id", "--wait-all-brokers")
    assert code == 1
    assert "Revoked 2 token(s)" in output and "no such token: no-such-token-id" in output
    for address in _addresses(cluster):
        assert not _logs_in(address, dave[0]) and not _logs_in(address, dave[1])
        assert _logs_in(address, dave[2])


def test_dry_run_lists_and_changes_nothing(cluster: LocalCluster) -> None:
    erin = _create(cluster, "User:erin", 4)
    code, output = _cli("--bootstrap-server", cluster.info["bootstrap_servers"],
                        "--command-config", cluster.info["admin"]["properties"],
                        "--expire", "--owner-principal", "User:erin", "--dry-run",
                        "--output", "json")
    assert code == 0, output
    assert json.loads(output)["count"] == 4 and json.loads(output)["dry_run"] is True
    assert all(_logs_in(a, t) for a in _addresses(cluster) for t in erin)


def test_a_principal_without_the_permission_is_refused_and_nothing_changes(
    cluster: LocalCluster, tmp_path
) -> None:
    (frank,) = _create(cluster, "User:frank", 1)
    mallory = tmp_path / "mallory.properties"
    mallory.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="mallory" password="mallory-pw";\n')
    args = ["--bootstrap-server", _non_controller(cluster), "--command-config", str(mallory),
            "--expire", "--token-id", frank.token_id]
    code, output = _cli(*args)
    assert code == 1 and "DELEGATION_TOKEN_AUTHORIZATION_FAILED" in output, output
    code, output = _cli(*args[:4], "--expire", "--owner-principal", "User:frank")
    assert code == 1 and "DELEGATION_TOKEN_AUTHORIZATION_FAILED" in output, output
    assert all(_logs_in(a, frank) for a in _addresses(cluster))
    # ALL on the token's DelegationToken resource is the permission the docs name.
    with _admin(cluster) as admin:
        admin.create_acls([AclBinding(
            ResourcePattern(ResourceType.DELEGATION_TOKEN, frank.token_id),
            AccessControlEntry("User:mallory", "*", AclOperation.ALL, AclPermissionType.ALLOW))])
    assert poll_until(lambda: _cli(*args)[0] == 0, timeout=10)
    assert not any(_logs_in(a, frank) for a in _addresses(cluster))


@pytest.fixture(scope="module")
def limited(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(brokers=3,
                                  overrides={"delegation.token.max.per.owner": "100",
                                             "delegation.token.expire.with.owner": "false"})


def test_the_101st_token_of_an_owner_is_policy_violation_and_nothing_is_written(
    limited: LocalCluster,
) -> None:
    _create(limited, "User:gina", 100)
    with _admin(limited, _non_controller(limited)) as admin:
        with pytest.raises(AdminError) as refused:
            admin.create_token(owner="User:gina")
        assert refused.value.error == Errors.POLICY_VIOLATION
        # The 100 were created through another broker: this one serves them once their
        # notifications reach it (read-your-writes holds on the broker that answered).
        # Wait, bounded, until it holds at least 100; the refused one was never
        # committed, so it holds exactly 100.
        seen: list[int] = []
        poll_until(lambda: seen.append(len(admin.describe_tokens(owners=["User:gina"])))
                   or seen[-1] >= 100, timeout=30, interval=0.1)
        assert seen[-1] == 100, seen
        other = admin.create_token(owner="User:hank")
        assert other.owner.name == "hank"


# --- tokens and sessions end with their owner -------------------------------------------


def _user_config(user: str, password: str) -> ClientConfig:
    return client_config_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="{user}" password="{password}";'})


def _delete_with_confluent(address: str, cluster: LocalCluster, user: str) -> None:
    from confluent_kafka.admin import AdminClient as ConfluentAdmin
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

    admin = ConfluentAdmin({"bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "SCRAM-SHA-512",
                            "sasl.username": cluster.info["admin"]["username"],
                            "sasl.password": cluster.info["admin"]["password"]})
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)])
    futures[user].result(timeout=30)


def test_deleting_a_user_revokes_her_tokens_and_closes_her_sessions_everywhere(
    cluster: LocalCluster,
) -> None:
    answering = _non_controller(cluster)
    with _admin(cluster, answering) as admin:
        admin.upsert_user_scram_credential("ivy", "SCRAM-SHA-512", "ivy-pw")
    ivy = _user_config("ivy", "ivy-pw")
    # Her tokens (created by her, so they are hers), and password sessions on every broker
    # (each broker once it serves her and her first token: the writes went to one broker).
    with _admin(cluster, answering, ivy) as as_ivy:
        tokens = [as_ivy.create_token() for _ in range(5)]
    wait_served_everywhere(cluster, ivy)
    wait_served_everywhere(cluster, token_client_config(tokens[0]))
    sessions = {}
    for address in _addresses(cluster):
        conn = BrokerConnection(address, ivy, client_id="ivy-session")
        conn.open(time.monotonic() + 10)
        sessions[address] = conn
    token_sessions = [_open_session(a, tokens[0]) for a in _addresses(cluster)]
    # Through the non-controller with tokensvc's AdminClient: librdkafka sends
    # AlterUserScramCredentials to a broker of its own choosing (the controller, seen in
    # the audit), so the broker that acknowledges must be named to check it at the ack.
    with _admin(cluster, answering) as admin:
        admin.delete_user_scram_credential("ivy", "SCRAM-SHA-512")
    acked = time.monotonic()
    # On the answering broker: refused at the acknowledgement, and her session there can
    # create no token after it.
    assert not _logs_in(answering, tokens[1])
    with pytest.raises((ConnectionLost, AdminError, OSError)):
        sessions[answering].request(ApiKey.CREATE_DELEGATION_TOKEN,
                                    {"Renewers": [], "MaxLifetimeMs": -1},
                                    time.monotonic() + 5, 1)
    # Everywhere within 1 s: tokens refused, her password and token sessions closed.
    assert poll_until(lambda: all(_closed(s) for s in sessions.values())
                      and all(_closed(s) for s in token_sessions), timeout=1.0)
    assert time.monotonic() - acked < 1.5
    for address in _addresses(cluster):
        assert not any(_logs_in(address, t) for t in tokens)
    for conn in [*sessions.values(), *token_sessions]:
        conn.close()
    with _admin(cluster) as admin:
        assert admin.describe_tokens(owners=["User:ivy"]) == []
    # The deletion was forwarded by the answering broker (a forward event of its own).
    assert poll_until(lambda: _forwarded_by(cluster, answering, "AlterUserScramCredentials"),
                      timeout=5.0)
    # Each token's end is audited as a revocation, reason owner_deleted.
    assert poll_until(lambda: _audited_revocations(cluster, "owner_deleted")
                      >= {t.token_id for t in tokens}, timeout=5.0)


def _forwarded_by(cluster: LocalCluster, address: str, api: str) -> bool:
    from pathlib import Path

    broker_id = next(b["id"] for b in cluster.info["brokers"]
                     if b["listeners"]["SASL_PLAINTEXT"] == address)
    for path in Path(cluster.info["audit_dir"]).rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("type") == "forward" and event.get("broker_id") == broker_id \
                    and event.get("api") == api:
                return True
    return False


def _audited_revocations(cluster: LocalCluster, reason: str) -> set[str]:
    from pathlib import Path

    found = set()
    for path in Path(cluster.info["audit_dir"]).rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("action") == "revoke" and event.get("reason") == reason:
                found.add(event["token_id"])
    return found


def test_with_expire_with_owner_false_the_tokens_of_a_deleted_user_keep_working(
    limited: LocalCluster,
) -> None:
    first = _addresses(limited)[0]
    with _admin(limited, first) as admin:
        admin.upsert_user_scram_credential("jill", "SCRAM-SHA-512", "jill-pw")
    with _admin(limited, first, _user_config("jill", "jill-pw")) as as_jill:
        token = as_jill.create_token()
    wait_served_everywhere(limited, token_client_config(token))
    session = BrokerConnection(_addresses(limited)[0], _user_config("jill", "jill-pw"),
                               client_id="jill-session")
    session.open(time.monotonic() + 10)
    _delete_with_confluent(_non_controller(limited), limited, "jill")
    # Her own password session is closed all the same.
    assert poll_until(lambda: _closed(session), timeout=2.0)
    session.close()
    assert all(_logs_in(a, token) for a in _addresses(limited))
