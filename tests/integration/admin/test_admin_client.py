"""AdminClient against a real two-broker LocalCluster with TLS (SASL_SSL and SASL_PLAINTEXT).

The cluster is started once for the module. Writes go through the controller and reach
the other broker through ZooKeeper watches, so checks that read through another
connection poll briefly (``eventually``) instead of assuming instant propagation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support.wait import retry
from tokensvc.admin import AdminClient, AdminError, BrokerUnreachableError
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
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.jvm import free_port
from tokensvc.scram.formatter import ScramMechanism

T = TypeVar("T")
SHA512 = ScramMechanism.SCRAM_SHA_512


pytestmark = pytest.mark.cluster(brokers=2, tls=True)


@pytest.fixture(scope="module")
def admin_config(cluster: LocalCluster) -> ClientConfig:
    return load_client_config(cluster.info["admin"]["properties"])


@pytest.fixture(scope="module")
def tls_bootstrap(cluster: LocalCluster) -> str:
    return cluster.info["tls"]["bootstrap_servers"]


@pytest.fixture(scope="module")
def admin(tls_bootstrap: str, admin_config: ClientConfig) -> Iterator[AdminClient]:
    with AdminClient(tls_bootstrap, admin_config, timeout_s=15) as client:
        yield client


@pytest.fixture(scope="module")
def users(admin: AdminClient, cluster: LocalCluster, admin_config: ClientConfig) -> dict[str, str]:
    """alice and bob, created through AlterUserScramCredentials and able to log in."""
    passwords = {"alice": "alice-pw", "bob": "bob-pw"}
    for user, password in passwords.items():
        admin.upsert_user_scram_credential(user, SHA512, password, iterations=4096)
    for user, password in passwords.items():
        eventually(lambda u=user, p=password: user_client(cluster, admin_config, u, p)
                   .describe_cluster())
    return passwords


def eventually(check: Callable[[], T], timeout: float = 10.0) -> T:
    """``check()``'s value once it stops raising an AdminError or AssertionError; its
    last error after ``timeout``."""
    return retry(check, timeout, errors=(AdminError, AssertionError))


def failure_of(call: Callable[[], object]) -> AdminError:
    """The AdminError ``call`` raises; AssertionError (so ``eventually`` retries) if none."""
    try:
        call()
    except AdminError as exc:
        return exc
    raise AssertionError("the call succeeded")


def user_client(
    cluster: LocalCluster, admin_config: ClientConfig, user: str, password: str, **kw: Any
) -> AdminClient:
    config = ClientConfig(
        security_protocol="SASL_SSL", sasl_mechanism=SHA512, username=user, password=password,
        ca_pem=admin_config.ca_pem, **kw,
    )
    return AdminClient(cluster.info["tls"]["bootstrap_servers"], config, timeout_s=5)


def plaintext_config(user: str, password: str, token: bool = False) -> ClientConfig:
    return ClientConfig(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism=SHA512, username=user,
        password=password, token_auth=token,
    )


# --- cluster and connections -------------------------------------------------------------


def test_describe_cluster_over_sasl_ssl_lists_both_brokers(
    admin: AdminClient, cluster: LocalCluster
) -> None:
    # Brokers learn of each other through their /brokers/ids watches, so right after
    # start-up the answering broker may not list its peer yet (as in Kafka).
    def both_listed():
        found = admin.describe_cluster(include_authorized_operations=True)
        assert {b.broker_id for b in found.brokers} == {1, 2}, found.brokers
        return found

    description = eventually(both_listed, timeout=30)
    assert description.controller_id in (1, 2)
    assert description.cluster_id
    assert description.authorized_operations is not None
    assert {AclOperation.DESCRIBE, AclOperation.ALTER} <= description.authorized_operations
    assert admin.connected_to in cluster.info["tls"]["bootstrap_servers"].split(",")


def test_authorized_operations_are_omitted_unless_asked(admin: AdminClient) -> None:
    assert admin.describe_cluster().authorized_operations is None


def test_sasl_plaintext_listener_works_with_the_same_credentials(
    cluster: LocalCluster,
) -> None:
    password = cluster.info["admin"]["password"]
    with AdminClient(cluster.info["bootstrap_servers"], plaintext_config("admin", password)) as c:
        assert len(c.describe_cluster().brokers) == 2


def test_dead_bootstrap_address_fails_over_to_the_next(
    cluster: LocalCluster, admin_config: ClientConfig
) -> None:
    dead = f"127.0.0.1:{free_port('127.0.0.1')}"
    live = cluster.info["tls"]["bootstrap_servers"].split(",")[1]
    with AdminClient([dead, live], admin_config, timeout_s=5) as client:
        client.describe_cluster()
        assert client.connected_to == live


def test_no_reachable_broker_names_every_address_and_the_timeout(
    admin_config: ClientConfig,
) -> None:
    dead = [f"127.0.0.1:{free_port('127.0.0.1')}" for _ in range(2)]
    with pytest.raises(BrokerUnreachableError) as info:
        AdminClient(dead, admin_config, timeout_s=0.5).describe_cluster()
    assert "within 0.5s" in info.value.message
    for address in dead:
        assert f"{address} (connection refused)" in info.value.message


def test_wrong_password_is_an_authentication_error_without_the_password(
    cluster: LocalCluster, admin_config: ClientConfig
) -> None:
    with pytest.raises(AdminError) as info:
        user_client(cluster, admin_config, "admin", "not-the-password").describe_cluster()
    assert info.value.error is Errors.SASL_AUTHENTICATION_FAILED
    assert "user 'admin'" in info.value.message
    assert "not-the-password" not in str(info.value)


def test_untrusted_broker_certificate_is_reported(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    from tokensvc import devcerts

    other_ca = devcerts.generate(tmp_path).ca.read_text()
    config = ClientConfig(
        security_protocol="SASL_SSL", sasl_mechanism=SHA512, username="admin",
        password=cluster.info["admin"]["password"], ca_pem=other_ca,
    )
    with pytest.raises(AdminError) as info:
        AdminClient(cluster.info["tls"]["bootstrap_servers"], config, timeout_s=5).describe_cluster()
    assert "not trusted" in info.value.message


# --- SCRAM users -------------------------------------------------------------------------


def test_upserted_users_are_described_with_mechanism_and_iterations(
    admin: AdminClient, users: dict[str, str]
) -> None:
    described = eventually(lambda: _described_users(admin, ["alice", "bob"]))
    assert [(c.mechanism, c.iterations) for c in described["alice"]] == [(SHA512, 4096)]


def _described_users(admin: AdminClient, names: list[str]) -> dict:
    described = admin.describe_user_scram_credentials(names)
    assert set(described) == set(names)
    return described


def test_describe_of_an_unknown_user_is_resource_not_found(admin: AdminClient) -> None:
    with pytest.raises(AdminError) as info:
        admin.describe_user_scram_credentials(["nobody-here"])
    assert info.value.error is Errors.RESOURCE_NOT_FOUND
    assert "nobody-here" in info.value.message


def test_deleted_credential_can_no_longer_log_in(
    admin: AdminClient, cluster: LocalCluster, admin_config: ClientConfig
) -> None:
    admin.upsert_user_scram_credential("carol", "SCRAM-SHA-512", "carol-pw")
    eventually(lambda: user_client(cluster, admin_config, "carol", "carol-pw").describe_cluster())
    admin.delete_user_scram_credential("carol", "SCRAM-SHA-512")
    error = eventually(lambda: failure_of(
        lambda: user_client(cluster, admin_config, "carol", "carol-pw").describe_cluster()
    ))
    assert error.error is Errors.SASL_AUTHENTICATION_FAILED


# --- tokens --------------------------------------------------------------------------------


def test_create_token_for_another_owner_records_the_requester(
    admin: AdminClient, users: dict[str, str]
) -> None:
    token = admin.create_token(renewers=["User:bob"], owner="User:alice", max_lifetime_ms=3_600_000)
    assert token.owner == KafkaPrincipal.user("alice")
    assert token.requester == KafkaPrincipal.user("admin")
    assert token.renewers == (KafkaPrincipal.user("bob"),)
    assert token.max_ms - token.issue_ms == 3_600_000
    assert len(token.token_id) == 22 and len(token.hmac) == 64
    described = eventually(lambda: _only(admin.describe_tokens(owners=["User:alice"]), token.token_id))
    assert described == token


def _only(tokens: list, token_id: str) -> Any:
    matching = [t for t in tokens if t.token_id == token_id]
    assert len(matching) == 1
    return matching[0]


def test_token_login_acts_as_the_owner_and_may_not_manage_tokens(
    admin: AdminClient, cluster: LocalCluster, users: dict[str, str]
) -> None:
    token = admin.create_token(owner="User:alice")
    config = plaintext_config(token.token_id, token.hmac_b64, token=True)
    with AdminClient(cluster.info["bootstrap_servers"], config, timeout_s=5) as session:
        operations = eventually(
            lambda: session.describe_cluster(include_authorized_operations=True)
        ).authorized_operations
        assert operations == frozenset()  # alice, not the super user who created it
        with pytest.raises(AdminError) as info:
            session.create_token()
        assert info.value.error is Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        assert "token-authenticated" in info.value.message


def test_renewer_can_renew_and_others_get_owner_mismatch(
    admin: AdminClient, cluster: LocalCluster, admin_config: ClientConfig, users: dict[str, str]
) -> None:
    token = admin.create_token(renewers=["User:bob"], owner="User:alice")
    with user_client(cluster, admin_config, "bob", users["bob"]) as bob:
        expiry = eventually(lambda: bob.renew_token(token.hmac, 60_000))
        assert token.issue_ms < expiry <= token.max_ms
    with user_client(cluster, admin_config, "carol-never", "x") as stranger:
        with pytest.raises(AdminError) as auth:
            stranger.renew_token(token.hmac)
        assert auth.value.error is Errors.SASL_AUTHENTICATION_FAILED
    admin.upsert_user_scram_credential("dave", SHA512, "dave-pw")
    with user_client(cluster, admin_config, "dave", "dave-pw") as dave:
        error = eventually(lambda: _owner_mismatch(failure_of(lambda: dave.renew_token(token.hmac))))
    assert "not an owner or renewer of this token" in error.message


def _owner_mismatch(error: AdminError) -> AdminError:
    assert error.error is Errors.DELEGATION_TOKEN_OWNER_MISMATCH, error
    return error


def test_expired_token_is_not_found_and_can_no_longer_log_in(
    admin: AdminClient, cluster: LocalCluster
) -> None:
    token = admin.create_token()
    admin.expire_token(token.hmac, -1)
    with pytest.raises(AdminError) as info:
        admin.renew_token(token.hmac)
    assert info.value.error is Errors.DELEGATION_TOKEN_NOT_FOUND
    assert info.value.message == "renew token: token not found"
    config = plaintext_config(token.token_id, token.hmac_b64, token=True)
    for address in cluster.info["bootstrap_servers"].split(","):
        login = eventually(lambda address=address: failure_of(
            AdminClient(address, config, timeout_s=5).describe_cluster
        ))
        assert login.error is Errors.SASL_AUTHENTICATION_FAILED


def test_renew_with_an_unknown_hmac_is_token_not_found(admin: AdminClient) -> None:
    with pytest.raises(AdminError) as info:
        admin.renew_token(b"\x00" * 64)
    assert info.value.error is Errors.DELEGATION_TOKEN_NOT_FOUND


# --- ACLs ----------------------------------------------------------------------------------


@pytest.fixture
def acl_admin(tls_bootstrap: str, admin_config: ClientConfig) -> Iterator[AdminClient]:
    with AdminClient(tls_bootstrap, admin_config, timeout_s=5) as client:
        yield client


def test_acls_round_trip_create_describe_delete(acl_admin: AdminClient) -> None:
    binding = AclBinding(
        ResourcePattern(ResourceType.USER, "erin"),
        AccessControlEntry("User:frank", "*", AclOperation.CREATE_TOKENS, AclPermissionType.ALLOW),
    )
    acl_admin.create_acls([binding])
    only_frank = AclBindingFilter.of(principal="User:frank")
    assert eventually(lambda: _acls(acl_admin, only_frank, [binding])) == [binding]
    results = acl_admin.delete_acls([AclBindingFilter.exact(binding)])
    assert [r.deleted for r in results] == [(binding,)]
    assert eventually(lambda: _acls(acl_admin, only_frank, [])) == []


def _acls(admin: AdminClient, acl_filter: AclBindingFilter, expected: list) -> list:
    found = admin.describe_acls(acl_filter)
    assert found == expected
    return found


def test_invalid_acl_is_refused_with_the_binding_named(acl_admin: AdminClient) -> None:
    bad = AclBinding(
        ResourcePattern(ResourceType.CLUSTER, "not-the-cluster"),
        AccessControlEntry("User:frank", "*", AclOperation.ALTER, AclPermissionType.ALLOW),
    )
    with pytest.raises(AdminError) as info:
        acl_admin.create_acls([bad])
    assert info.value.error is Errors.INVALID_REQUEST
    assert "create ACL User:frank Allow Alter from * on Cluster:Literal:not-the-cluster" in (
        info.value.message
    )
    assert "kafka-cluster" in info.value.message
