"""server.properties: parsing, defaults, every key, and every refusal."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tokensvc.core.config import (
    KNOWN_KEYS,
    BrokerConfig,
    ConfigError,
    Listener,
    load_properties,
    parse_properties,
)
from tokensvc.core.keys import MasterKeys, key_id
from tokensvc.core.principal import KafkaPrincipal

BASE = {
    "broker.id": "1",
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9092",
    "zookeeper.connect": "127.0.0.1:2181/tokensvc",
    "delegation.token.secret.key": "the-master-key",
}


def build(env: dict[str, str] | None = None, **overrides: str) -> BrokerConfig:
    props = dict(BASE)
    for key, value in overrides.items():
        name = key.replace("__", ".")
        if value is None:
            props.pop(name, None)
        else:
            props[name] = value
    return BrokerConfig.from_properties(props, env or {})


def refused(key: str, env: dict[str, str] | None = None, **overrides: str | None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        build(env, **overrides)
    assert caught.value.key == key
    assert key in str(caught.value)
    return caught.value


# -- the properties file -----------------------------------------------------------------


def test_properties_comments_separators_trimming_and_continuation(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "   ! another comment\n"
        "\n"
        "broker.id=1\n"
        "  zookeeper.connect : 127.0.0.1:2181  \n"
        "listeners = SASL_PLAINTEXT://a:1,\\\n"
        "            SASL_SSL://b:2\n"
        "cluster.id   abc\n"
        "tab\\tkey=x\\u0041y\n"
        "path=C:\\\\dir\n"
        "empty=\n"
        "broker.id=2\n",
        encoding="utf-8",
    )
    props = load_properties(path)
    assert props == {
        "broker.id": "2",
        "zookeeper.connect": "127.0.0.1:2181",
        "listeners": "SASL_PLAINTEXT://a:1,SASL_SSL://b:2",
        "cluster.id": "abc",
        "tab\tkey": "xAy",
        "path": "C:\\dir",
        "empty": "",
    }


def test_properties_escaped_separator_stays_in_key() -> None:
    assert parse_properties("a\\=b=c\n") == {"a=b": "c"}


def test_even_number_of_trailing_backslashes_is_not_a_continuation() -> None:
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}


def test_missing_properties_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_properties(tmp_path / "absent.properties")


def test_load_reads_and_checks_a_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("\n".join(f"{k}={v}" for k, v in BASE.items()) + "\n")
    config = BrokerConfig.load(path, env={})
    assert config.broker_id == 1
    assert config.master_keys == MasterKeys("the-master-key")


# -- defaults ------------------------------------------------------------------------------


def test_defaults() -> None:
    c = build()
    assert c.broker_id == 1
    assert c.listeners == [Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 9092)]
    assert c.advertised_listeners is None
    assert c.inter_broker_listener_name == "SASL_PLAINTEXT"
    assert c.inter_broker_sasl_mechanism == "SCRAM-SHA-512"
    assert c.inter_broker_sasl_username is None and c.inter_broker_sasl_password is None
    assert c.zookeeper_connect == "127.0.0.1:2181/tokensvc"
    assert c.zookeeper_session_timeout_ms == 18000
    assert c.zookeeper_connection_timeout_ms == 18000
    assert c.zookeeper_digest is None
    assert c.sasl_enabled_mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert c.sasl_server_max_receive_size == 524288
    assert c.super_users == frozenset()
    assert c.allow_everyone_if_no_acl_found is False
    assert c.authorizer_class_name == ""
    assert c.early_start_listeners == ()
    assert (c.ssl_keystore_type, c.ssl_truststore_type, c.ssl_client_auth) == ("PEM", "PEM", "none")
    assert c.ssl_keystore_location is None and c.ssl_truststore_location is None
    assert c.ssl_key_password is None
    assert c.master_keys.current_id == key_id("the-master-key")
    assert c.delegation_token_max_lifetime_ms == 604_800_000
    assert c.delegation_token_expiry_time_ms == 86_400_000
    assert c.delegation_token_expiry_check_interval_ms == 3_600_000
    assert c.audit_log_dir is None
    assert c.audit_queue_size == 10_000
    assert c.audit_file_max_bytes == 67_108_864
    assert c.audit_file_rotate_ms == 3_600_000
    assert c.socket_request_max_bytes == 1_048_576
    assert c.queued_max_request_bytes == 16_777_216
    assert c.connections_max_idle_ms == 600_000
    assert c.connection_failed_authentication_delay_ms == 100
    assert c.connections_max_reauth_ms == 0
    assert c.max_connections_per_ip == 2000
    assert c.request_timeout_ms == 30_000
    assert c.metrics_listener is None
    assert c.cluster_id is None


# -- every key -------------------------------------------------------------------------------


def test_every_key_parses(tmp_path: Path) -> None:
    keystore = tmp_path / "broker.pem"
    truststore = tmp_path / "ca.pem"
    keystore.write_text("pem")
    truststore.write_text("pem")
    c = build(
        listeners="CLIENT://0.0.0.0:9093,INTERNAL://[::1]:9094,SASL_PLAINTEXT://:0",
        listener__security__protocol__map="CLIENT:SASL_SSL,INTERNAL:SASL_PLAINTEXT",
        advertised__listeners="CLIENT://broker1.example:9093",
        inter__broker__listener__name="internal",
        inter__broker__sasl__mechanism="SCRAM-SHA-256",
        inter__broker__sasl__username="broker",
        inter__broker__sasl__password="broker-secret",
        zookeeper__session__timeout__ms="6000",
        zookeeper__connection__timeout__ms="3000",
        zookeeper__digest="zkuser:zkpass",
        sasl__enabled__mechanisms="SCRAM-SHA-512",
        sasl__server__max__receive__size="4096",
        super__users="User:admin; User:ops",
        allow__everyone__if__no__acl__found="TRUE",
        authorizer__class__name="kafka.security.authorizer.AclAuthorizer",
        early__start__listeners="INTERNAL",
        ssl__keystore__type="PEM",
        ssl__keystore__location=str(keystore),
        ssl__key__password="pem-pass",
        ssl__truststore__type="PEM",
        ssl__truststore__location=str(truststore),
        ssl__client__auth="required",
        delegation__token__secret__key__previous="old-1,old-2",
        delegation__token__max__lifetime__ms="1000",
        delegation__token__expiry__time__ms="500",
        delegation__token__expiry__check__interval__ms="100",
        audit__log__dir="/var/log/tokensvc",
        audit__queue__size="5",
        audit__file__max__bytes="1024",
        audit__file__rotate__ms="60000",
        socket__request__max__bytes="2048",
        connections__max__idle__ms="1000",
        connection__failed__authentication__delay__ms="0",
        connections__max__reauth__ms="60000",
        max__connections__per__ip="10",
        request__timeout__ms="2000",
        metrics__listener="127.0.0.1:0",
        cluster__id="Qm9yaW5nQ2x1c3RlcklkAA",
    )
    assert c.listeners == [
        Listener("CLIENT", "SASL_SSL", "0.0.0.0", 9093),
        Listener("INTERNAL", "SASL_PLAINTEXT", "::1", 9094),
        Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "", 0),
    ]
    assert c.listener_security_protocol_map == {
        "CLIENT": "SASL_SSL",
        "INTERNAL": "SASL_PLAINTEXT",
    }
    assert c.advertised_listeners == [Listener("CLIENT", "SASL_SSL", "broker1.example", 9093)]
    assert c.inter_broker_listener_name == "INTERNAL"
    assert c.inter_broker_listener == Listener("INTERNAL", "SASL_PLAINTEXT", "::1", 9094)
    assert c.inter_broker_sasl_mechanism == "SCRAM-SHA-256"
    assert (c.inter_broker_sasl_username, c.inter_broker_sasl_password) == ("broker", "broker-secret")
    assert (c.zookeeper_session_timeout_ms, c.zookeeper_connection_timeout_ms) == (6000, 3000)
    assert c.zookeeper_digest == "zkuser:zkpass"
    assert c.sasl_enabled_mechanisms == ("SCRAM-SHA-512",)
    assert c.sasl_server_max_receive_size == 4096
    assert c.sasl_max_message_bytes == 4096
    assert c.super_users == {KafkaPrincipal.user("admin"), KafkaPrincipal.user("ops")}
    assert c.allow_everyone_if_no_acl_found is True
    assert c.authorizer_class_name == "kafka.security.authorizer.AclAuthorizer"
    assert c.early_start_listeners == ("INTERNAL",)
    assert c.ssl_keystore_location == str(keystore)
    assert c.ssl_key_password == "pem-pass"
    assert c.ssl_truststore_location == str(truststore)
    assert c.ssl_client_auth == "required"
    assert c.master_keys == MasterKeys("the-master-key", ["old-1", "old-2"])
    assert c.delegation_token_max_lifetime_ms == 1000
    assert c.delegation_token_expiry_time_ms == 500
    assert c.delegation_token_expiry_check_interval_ms == 100
    assert c.audit_log_dir == "/var/log/tokensvc"
    assert (c.audit_queue_size, c.audit_file_max_bytes, c.audit_file_rotate_ms) == (5, 1024, 60000)
    assert c.socket_request_max_bytes == 2048
    assert c.connections_max_idle_ms == 1000
    assert c.connection_failed_authentication_delay_ms == 0
    assert c.connections_max_reauth_ms == 60000
    assert c.max_connections_per_ip == 10
    assert c.request_timeout_ms == 2000
    assert c.metrics_listener == ("127.0.0.1", 0)
    assert c.cluster_id == "Qm9yaW5nQ2x1c3RlcklkAA"


def test_inter_broker_listener_defaults_to_first_sasl_listener() -> None:
    c = build(listeners="PLAINTEXT://h:1,SASL_SSL://h:2,SASL_PLAINTEXT://h:3",
              ssl__keystore__location=__file__)
    assert c.inter_broker_listener_name == "SASL_SSL"


def test_zookeeper_connection_timeout_defaults_to_session_timeout() -> None:
    assert build(zookeeper__session__timeout__ms="7000").zookeeper_connection_timeout_ms == 7000


def test_authorizer_accepts_tokensvc_class() -> None:
    c = build(authorizer__class__name="tokensvc.authz.AclAuthorizer")
    assert c.authorizer_class_name == "tokensvc.authz.AclAuthorizer"


def test_empty_secret_key_disables_tokens() -> None:
    assert not build(delegation__token__secret__key="").master_keys.enabled
    assert not build(delegation__token__secret__key=None).master_keys.enabled


def test_master_key_alias_is_accepted_and_may_repeat_the_same_value() -> None:
    alias_only = build(delegation__token__secret__key=None, delegation__token__master__key="k2")
    assert alias_only.master_keys == MasterKeys("k2")
    both = build(delegation__token__master__key="the-master-key")
    assert both.master_keys == MasterKeys("the-master-key")


def test_key_file_with_mode_0600_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    path.write_text("file-key\n")
    os.chmod(path, 0o600)
    c = build(delegation__token__secret__key=None, delegation__token__secret__key__file=str(path))
    assert c.master_keys == MasterKeys("file-key")


def test_key_from_environment_variable() -> None:
    c = build(
        {"TOKENSVC_KEY": "env-key"},
        delegation__token__secret__key=None,
        delegation__token__secret__key__env="TOKENSVC_KEY",
    )
    assert c.master_keys == MasterKeys("env-key")


# -- refusals ------------------------------------------------------------------------------


def test_unknown_key_is_refused_with_a_suggestion() -> None:
    error = refused("delegation.token.max.lifetime", delegation__token__max__lifetime="5")
    assert "unknown" in str(error)
    assert "delegation.token.max.lifetime.ms" in str(error)


@pytest.mark.parametrize("key", ["broker.id", "listeners", "zookeeper.connect"])
def test_required_key_missing_is_refused(key: str) -> None:
    assert "required" in str(refused(key, **{key.replace(".", "__"): None}))


@pytest.mark.parametrize("value", ["one", "1.5", "1_000", "0x10", ""])
def test_bad_int_is_refused(value: str) -> None:
    if value:
        assert "not an integer" in str(refused("request.timeout.ms", request__timeout__ms=value))
    else:
        assert build(request__timeout__ms=value).request_timeout_ms == 30_000


def test_negative_broker_id_is_refused() -> None:
    refused("broker.id", broker__id="-1")


def test_int32_overflow_is_refused() -> None:
    refused("max.connections.per.ip", max__connections__per__ip="2147483648")


@pytest.mark.parametrize("value", ["0", "-5"])
def test_non_positive_max_lifetime_is_refused(value: str) -> None:
    refused("delegation.token.max.lifetime.ms", delegation__token__max__lifetime__ms=value)


def test_expiry_time_above_max_lifetime_is_refused() -> None:
    error = refused(
        "delegation.token.expiry.time.ms",
        delegation__token__max__lifetime__ms="1000",
        delegation__token__expiry__time__ms="1001",
    )
    assert "delegation.token.max.lifetime.ms" in str(error)


def test_non_positive_expiry_check_interval_is_refused() -> None:
    refused(
        "delegation.token.expiry.check.interval.ms",
        delegation__token__expiry__check__interval__ms="0",
    )


def test_negative_auth_failure_delay_is_refused() -> None:
    refused(
        "connection.failed.authentication.delay.ms",
        connection__failed__authentication__delay__ms="-1",
    )


@pytest.mark.parametrize(
    "value",
    ["127.0.0.1:9092", "SASL_PLAINTEXT://127.0.0.1", "SASL_PLAINTEXT://h:99999", "://h:1"],
)
def test_bad_listener_is_refused(value: str) -> None:
    refused("listeners", listeners=value)


def test_unknown_listener_protocol_is_refused() -> None:
    error = refused("listeners", listeners="CLIENT://h:1")
    assert "listener.security.protocol.map" in str(error)


def test_unknown_protocol_in_protocol_map_is_refused() -> None:
    refused("listener.security.protocol.map", listener__security__protocol__map="CLIENT:SASL_TLS")


def test_duplicate_listener_name_is_refused() -> None:
    refused("listeners", listeners="SASL_PLAINTEXT://h:1,SASL_PLAINTEXT://h:2")


def test_advertised_listener_must_name_a_listener_and_a_host() -> None:
    refused("advertised.listeners", advertised__listeners="SASL_SSL://h:1")
    refused("advertised.listeners", advertised__listeners="SASL_PLAINTEXT://0.0.0.0:1")


def test_inter_broker_listener_must_exist() -> None:
    refused("inter.broker.listener.name", inter__broker__listener__name="SASL_SSL")


def test_early_start_listener_missing_is_refused() -> None:
    error = refused("early.start.listeners", early__start__listeners="SASL_PLAINTEXT,CONTROLLER")
    assert "CONTROLLER" in str(error)


def test_ssl_listener_without_keystore_is_refused() -> None:
    error = refused("ssl.keystore.location", listeners="SASL_SSL://h:9093")
    assert "SASL_SSL" in str(error)


def test_keystore_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    refused("ssl.keystore.location", ssl__keystore__location=str(tmp_path / "none.pem"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ssl.keystore.type", "JKS"),
        ("ssl.truststore.type", "PKCS12"),
        ("ssl.client.auth", "always"),
        ("inter.broker.sasl.mechanism", "PLAIN"),
        ("authorizer.class.name", "com.example.Authorizer"),
        ("allow.everyone.if.no.acl.found", "yes"),
    ],
)
def test_value_outside_its_choices_is_refused(key: str, value: str) -> None:
    refused(key, **{key.replace(".", "__"): value})


def test_sasl_mechanism_other_than_scram_is_refused() -> None:
    refused("sasl.enabled.mechanisms", sasl__enabled__mechanisms="SCRAM-SHA-256,PLAIN")


def test_empty_sasl_mechanisms_with_sasl_listener_is_refused() -> None:
    refused("sasl.enabled.mechanisms", sasl__enabled__mechanisms=" , ")


def test_bad_super_user_is_refused() -> None:
    refused("super.users", super__users="User:admin;alice")


def test_bad_metrics_listener_is_refused() -> None:
    refused("metrics.listener", metrics__listener="9100")


def test_zookeeper_digest_without_colon_is_refused_without_echoing_it() -> None:
    error = refused("zookeeper.digest", zookeeper__digest="only-a-secret")
    assert "only-a-secret" not in str(error)


def test_alias_conflict_is_refused_without_echoing_keys() -> None:
    error = refused("delegation.token.master.key", delegation__token__master__key="other-key")
    assert "other-key" not in str(error) and "the-master-key" not in str(error)


def test_two_key_sources_are_refused() -> None:
    refused(
        "delegation.token.secret.key.env",
        {"K": "env-key"},
        delegation__token__secret__key__env="K",
    )


def test_key_file_with_mode_0644_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    path.write_text("file-key-secret\n")
    os.chmod(path, 0o644)
    error = refused(
        "delegation.token.secret.key.file",
        delegation__token__secret__key=None,
        delegation__token__secret__key__file=str(path),
    )
    assert str(path) in str(error)
    assert "0644" in str(error)
    assert "file-key-secret" not in str(error)


def test_missing_or_empty_key_file_is_refused(tmp_path: Path) -> None:
    refused(
        "delegation.token.secret.key.file",
        delegation__token__secret__key=None,
        delegation__token__secret__key__file=str(tmp_path / "absent"),
    )
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    os.chmod(empty, 0o600)
    refused(
        "delegation.token.secret.key.file",
        delegation__token__secret__key=None,
        delegation__token__secret__key__file=str(empty),
    )


def test_unset_key_environment_variable_is_refused() -> None:
    error = refused(
        "delegation.token.secret.key.env",
        {},
        delegation__token__secret__key=None,
        delegation__token__secret__key__env="NOT_SET_ANYWHERE",
    )
    assert "NOT_SET_ANYWHERE" in str(error)


def test_previous_keys_without_current_key_are_refused() -> None:
    refused(
        "delegation.token.secret.key.previous",
        delegation__token__secret__key="",
        delegation__token__secret__key__previous="old",
    )


# -- secrets stay secret ---------------------------------------------------------------------


def test_repr_never_shows_secrets() -> None:
    c = build(
        inter__broker__sasl__password="ib-password",
        zookeeper__digest="zk:zk-password",
        ssl__key__password="pem-password",
        delegation__token__secret__key__previous="old-master-key",
    )
    text = repr(c)
    for secret in ("the-master-key", "old-master-key", "ib-password", "zk-password", "pem-password"):
        assert secret not in text
    assert key_id("the-master-key") in text


def test_docs_table_lists_every_key() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "broker.md").read_text()
    documented = set(re.findall(r"^\| `([a-z.]+)` \|", doc, flags=re.MULTILINE))
    assert documented == KNOWN_KEYS


def test_queued_max_request_bytes_below_socket_request_max_bytes_is_refused() -> None:
    error = refused("queued.max.request.bytes", queued__max__request__bytes="1000",
                    socket__request__max__bytes="2048")
    assert "socket.request.max.bytes" in str(error)


@pytest.mark.parametrize("value", ["0", "-2"])
def test_queued_max_request_bytes_zero_or_below_minus_one_is_refused(value: str) -> None:
    refused("queued.max.request.bytes", queued__max__request__bytes=value)


def test_queued_max_request_bytes_minus_one_means_no_cap() -> None:
    assert build(queued__max__request__bytes="-1").queued_max_request_bytes == -1
