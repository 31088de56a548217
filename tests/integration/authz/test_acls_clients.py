"""ACLs managed by clients we did not write (confluent-kafka, kafka-python) and by
`tokensvc acls`, against one LocalCluster of two real broker processes.

Writes reach the controller directly or forwarded; DescribeAcls on any broker waits until
that broker has applied the ACL changes ZooKeeper holds, so a listing right after a create
sees it whichever broker each request reaches.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding as CkBinding
from confluent_kafka.admin import AclBindingFilter as CkFilter
from confluent_kafka.admin import AclOperation as CkOp
from confluent_kafka.admin import AclPermissionType as CkPermission
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ResourcePatternType as CkPattern
from confluent_kafka.admin import ResourceType as CkType
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpType
from kafka.errors import ClusterAuthorizationFailedError, NoError

from cli.acls_cmd import acls
from tests.support.local_cluster import ClusterFactory, user_config, wait_served_everywhere
from tokensvc.cluster import LocalCluster
from zk.credential_store import bootstrap_user

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: ClusterFactory) -> LocalCluster:
    running = module_cluster_factory(brokers=2)
    bootstrap_user(running.zk_settings(), "alice", "alice-secret", iterations=4096)
    # Written straight to ZooKeeper: each broker serves alice once it has followed the
    # change, and her clients may log in on either.
    wait_served_everywhere(running, user_config("alice", "alice-secret"))
    return running


@pytest.fixture(scope="module")
def alice_props(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("alice")) / "alice.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config={SCRAM} required username="alice" password="alice-secret";\n',
        encoding="utf-8",
    )
    return str(path)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- confluent-kafka -----------------------------------------------------------------------


def confluent(cluster: LocalCluster, user: str = "admin", password: str | None = None):
    return ConfluentAdmin({
        "bootstrap.servers": cluster.info["bootstrap_servers"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password or cluster.info["admin"]["password"],
        "log_level": 0,
    })


def ck_tuple(b: CkBinding) -> tuple:
    return (b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host,
            b.operation.name, b.permission_type.name)


def ck_filter(principal: str) -> CkFilter:
    return CkFilter(CkType.ANY, None, CkPattern.ANY, principal, None, CkOp.ANY, CkPermission.ANY)


def test_confluent_admin_creates_describes_and_deletes_acls(cluster):
    principal = f"User:{unique('ck')}"
    name = unique("orders")
    bindings = [
        CkBinding(CkType.TOPIC, name, CkPattern.LITERAL, principal, "*", CkOp.READ,
                  CkPermission.ALLOW),
        CkBinding(CkType.GROUP, "billing-", CkPattern.PREFIXED, principal, "10.0.0.1",
                  CkOp.READ, CkPermission.DENY),
        CkBinding(CkType.BROKER, "kafka-cluster", CkPattern.LITERAL, principal, "*",
                  CkOp.DESCRIBE, CkPermission.ALLOW),
    ]
    admin = confluent(cluster)
    for future in admin.create_acls(bindings, request_timeout=15).values():
        assert future.result(timeout=30) is None
    expected = {ck_tuple(b) for b in bindings}
    found = admin.describe_acls(ck_filter(principal), request_timeout=15).result(timeout=30)
    assert {ck_tuple(b) for b in found} == expected
    deleted = admin.delete_acls([ck_filter(principal)], request_timeout=15)
    assert {ck_tuple(b) for f in deleted.values() for b in f.result(timeout=30)} == expected
    after = admin.describe_acls(ck_filter(principal), request_timeout=15).result(timeout=30)
    assert after == []


def test_confluent_invalid_binding_fails_with_invalid_request(cluster):
    bad = CkBinding(CkType.BROKER, "not-the-cluster", CkPattern.LITERAL, "User:x", "*",
                    CkOp.ALTER, CkPermission.ALLOW)
    admin = confluent(cluster)
    (future,) = admin.create_acls([bad], request_timeout=15).values()
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    assert info.value.args[0].code() == ConfluentError.INVALID_REQUEST


def test_confluent_user_without_cluster_alter_is_refused(cluster):
    admin = confluent(cluster, "alice", "alice-secret")
    binding = CkBinding(CkType.TOPIC, unique("t"), CkPattern.LITERAL, "User:alice", "*",
                        CkOp.READ, CkPermission.ALLOW)
    (future,) = admin.create_acls([binding], request_timeout=15).values()
    with pytest.raises(KafkaException) as created:
        future.result(timeout=30)
    assert created.value.args[0].code() == ConfluentError.CLUSTER_AUTHORIZATION_FAILED
    # librdkafka reads DescribeAcls' top-level ErrorCode but never reports it: a refused
    # listing arrives as an empty one (kafka-python raises; see the kafka-python test).
    listed = admin.describe_acls(ck_filter("User:alice"), request_timeout=15)
    assert listed.result(timeout=30) == []


# --- kafka-python --------------------------------------------------------------------------


def kafka_python(cluster: LocalCluster, user: str = "admin", password: str | None = None):
    return KafkaAdminClient(
        bootstrap_servers=cluster.info["bootstrap_servers"].split(","),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=user,
        sasl_plain_password=password or cluster.info["admin"]["password"],
        request_timeout_ms=10_000,
    )


def kp_tuple(acl: ACL) -> tuple:
    p = acl.resource_pattern
    return (p.resource_type.name, p.resource_name, p.pattern_type.name, acl.principal, acl.host,
            acl.operation.name, acl.permission_type.name)


def kp_filter(principal: str) -> ACLFilter:
    return ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY,
                     ResourcePatternFilter(KpType.ANY, None, ACLResourcePatternType.ANY))


def test_kafka_python_admin_manages_token_acls(cluster):
    principal = f"User:{unique('kp')}"
    acls_to_create = [
        ACL(principal, "*", ACLOperation.CREATE_TOKENS, ACLPermissionType.ALLOW,
            ResourcePattern(KpType.USER, "User:svc-", ACLResourcePatternType.PREFIXED)),
        ACL(principal, "*", ACLOperation.DESCRIBE_TOKENS, ACLPermissionType.ALLOW,
            ResourcePattern(KpType.USER, "User:bob", ACLResourcePatternType.LITERAL)),
        ACL(principal, "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
            ResourcePattern(KpType.DELEGATION_TOKEN, "Zl0YT9kvSLaHtdxp5pMVbA",
                            ACLResourcePatternType.LITERAL)),
    ]
    admin = kafka_python(cluster)
    try:
        created = admin.create_acls(acls_to_create)
        assert created["failed"] == []
        assert len(created["succeeded"]) == 3
        found, error = admin.describe_acls(kp_filter(principal))
        assert error is NoError
        expected = {kp_tuple(a) for a in acls_to_create}
        assert {kp_tuple(a) for a in found} == expected
        ((_filter, deleted, error),) = admin.delete_acls([kp_filter(principal)])
        assert error is NoError
        assert {kp_tuple(a) for a in deleted} == expected
        assert admin.describe_acls(kp_filter(principal))[0] == []
    finally:
        admin.close()


def test_kafka_python_user_without_cluster_alter_is_refused(cluster):
    admin = kafka_python(cluster, "alice", "alice-secret")
    try:
        acl = ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                  ResourcePattern(KpType.TOPIC, unique("t"), ACLResourcePatternType.LITERAL))
        assert admin.create_acls([acl])["failed"] == [ClusterAuthorizationFailedError]
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(kp_filter("User:alice"))
    finally:
        admin.close()


# --- tokensvc acls -------------------------------------------------------------------------


def run(cluster: LocalCluster, *args: str, props: str | None = None,
        stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(
        acls,
        ["--bootstrap-server", cluster.info["bootstrap_servers"],
         "--command-config", props or cluster.info["admin"]["properties"], *args],
        input=stdin,
    )
    return result.exit_code, result.output


def entries_listed(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip().startswith("(")]


def test_cli_adds_lists_and_removes_acls(cluster):
    name = unique("payments")
    code, out = run(cluster, "--add", "--allow-principal", "User:alice",
                    "--allow-principal", "User:bob", "--operation", "Read",
                    "--operation", "Describe", "--topic", name)
    assert code == 0, out
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={name}, " \
           "patternType=LITERAL)`" in out
    assert len(entries_listed(out)) == 4
    code, out = run(cluster, "--list", "--topic", name)
    assert code == 0, out
    assert entries_listed(out) == [
        f"(principal=User:{who}, host=*, operation={op}, permissionType=ALLOW)"
        for who in ("alice", "bob") for op in ("READ", "DESCRIBE")
    ]
    code, out = run(cluster, "--list", "--topic", name, "--principal", "User:bob")
    assert code == 0, out
    assert "ACLs for principal `User:bob`" in out
    assert len(entries_listed(out)) == 2
    code, out = run(cluster, "--remove", "--force", "--topic", name,
                    "--allow-principal", "User:alice", "--operation", "Read")
    assert code == 0, out
    assert "Removed 1 ACL(s)." in out
    code, out = run(cluster, "--remove", "--force", "--topic", name)
    assert code == 0, out
    assert "Removed 3 ACL(s)." in out
    assert entries_listed(run(cluster, "--list", "--topic", name)[1]) == []


def test_cli_deny_with_hosts_and_token_resources(cluster):
    owner = f"User:{unique('owner')}"
    code, out = run(cluster, "--add", "--deny-principal", "User:mallory", "--deny-host",
                    "10.0.0.9", "--allow-principal", "User:ops", "--operation",
                    "CreateTokens", "--user-principal", owner)
    assert code == 0, out
    code, out = run(cluster, "--list", "--user-principal", owner)
    assert entries_listed(out) == [
        "(principal=User:mallory, host=10.0.0.9, operation=CREATE_TOKENS, permissionType=DENY)",
        "(principal=User:ops, host=*, operation=CREATE_TOKENS, permissionType=ALLOW)",
    ]
    token_id = unique("token")
    code, out = run(cluster, "--add", "--allow-principal", "User:monitor", "--operation",
                    "Describe", "--delegation-token", token_id)
    assert code == 0, out
    assert f"resourceType=DELEGATION_TOKEN, name={token_id}" in out


def test_cli_match_lists_every_pattern_that_applies_to_a_name(cluster):
    prefix = unique("eu") + "."
    assert run(cluster, "--add", "--allow-principal", "User:a", "--operation", "Read",
               "--topic", prefix, "--resource-pattern-type", "prefixed")[0] == 0
    assert run(cluster, "--add", "--allow-principal", "User:b", "--operation", "Write",
               "--topic", prefix + "orders")[0] == 0
    code, out = run(cluster, "--list", "--topic", prefix + "orders",
                    "--resource-pattern-type", "match")
    assert code == 0, out
    assert f"name={prefix}, patternType=PREFIXED" in out
    assert f"name={prefix}orders, patternType=LITERAL" in out
    literal_only = run(cluster, "--list", "--topic", prefix + "orders")[1]
    assert "PREFIXED" not in literal_only


def test_cli_remove_asks_first_unless_forced(cluster):
    name = unique("kept")
    assert run(cluster, "--add", "--allow-principal", "User:a", "--topic", name)[0] == 0
    code, out = run(cluster, "--remove", "--topic", name, stdin="n\n")
    assert code == 1
    assert "Are you sure you want to remove the ACLs matching" in out
    assert entries_listed(run(cluster, "--list", "--topic", name)[1]) == [
        "(principal=User:a, host=*, operation=ALL, permissionType=ALLOW)"]
    code, out = run(cluster, "--remove", "--topic", name, stdin="y\n")
    assert code == 0, out
    assert "Removed 1 ACL(s)." in out


def test_cli_refused_by_the_broker_exits_1_with_one_line(cluster, alice_props):
    code, out = run(cluster, "--add", "--allow-principal", "User:alice", "--topic", "t",
                    props=alice_props)
    assert code == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in out or "not authorized" in out.lower()
    assert "Traceback" not in out


@pytest.mark.parametrize("args, message", [
    ((), "give exactly one of --add, --remove, --list"),
    (("--add", "--list", "--topic", "t"), "give exactly one of"),
    (("--add", "--topic", "t"), "--add needs --allow-principal or --deny-principal"),
    (("--add", "--allow-principal", "User:a"), "--add needs a resource"),
    (("--remove", "--force"), "--remove needs a resource"),
    (("--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
      "match"), "literal or prefixed"),
    (("--list", "--operation", "Read"), "--operation cannot be used with --list"),
    (("--add", "--principal", "User:a", "--topic", "t"), "--principal cannot be used with --add"),
    (("--add", "--allow-host", "10.0.0.1", "--deny-principal", "User:a", "--topic", "t"),
     "--allow-host needs --allow-principal"),
    (("--add", "--allow-principal", "alice", "--topic", "t"), "is not a principal"),
    (("--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"),
     "unknown AclOperation"),
    (("--add", "--allow-principal", "User:a", "--operation", "Read", "--cluster"),
     "Cluster resources support only the operations"),
    (("--remove", "--operation", "Read", "--topic", "t"), "--operation with --remove needs"),
    (("--list", "--resource-pattern-type", "wild"), "Invalid value for '--resource-pattern-type'"),
])
def test_cli_usage_errors_exit_2_before_any_connection(args, message):
    result = CliRunner().invoke(acls, ["--bootstrap-server", "127.0.0.1:1", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
