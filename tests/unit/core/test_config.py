"""The broker table: defaults, every key, per-key validation, unknown keys, KIP-48 lifetimes.

Pure: properties go in as a mapping, nothing is read from disk (the file side is
tests/unit/core/test_config_loader.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tokensvc.core.clock import FakeClock
from tokensvc.core.config import (
    BROKER_CONFIG,
    KNOWN_KEYS,
    BrokerConfig,
    ConfigError,
    Listener,
)
from tokensvc.core.kafka_keys import KAFKA_BROKER_KEYS
from tokensvc.core.keys import MasterKeys, key_id
from tokensvc.core.manager import TokenManager
from tokensvc.core.principal import KafkaPrincipal

BASE = {
    "broker.id": "1",
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9092",
    "zookeeper.connect": "127.0.0.1:2181/tokensvc",
    "delegation.token.secret.key": "the-master-key",
}


def props_with(**overrides: str | None) -> dict[str, str]:
    props = dict(BASE)
    for key, value in overrides.items():
        name = key.replace("__", ".")
        if value is None:
            props.pop(name, None)
        else:
            props[name] = value
    return props


def build(resolved: dict[str, str] | None = None, **overrides: str | None) -> BrokerConfig:
    return BrokerConfig.from_properties(props_with(**overrides), resolved=resolved)


def refused(key: str, resolved: dict[str, str] | None = None, **overrides: str | None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        build(resolved, **overrides)
    assert caught.value.key == key
    assert key in str(caught.value)
    return caught.value


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
    assert c.zookeeper_max_staleness_ms == 3000
    assert c.delegation_token_implicit_login_enable is True
    assert c.sasl_scram_accept_repeated_client_nonce is False
    assert c.delegation_token_session_alter_access_enable is False
    assert c.request_timeout_ms == 30_000
    assert c.metrics_listener is None
    assert c.cluster_id is None


# -- every key -------------------------------------------------------------------------------


def test_every_key_parses() -> None:
    keystore = "/etc/tokensvc/broker.pem"
    truststore = "/etc/tokensvc/ca.pem"
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
        ssl__keystore__location=keystore,
        ssl__key__password="pem-pass",
        ssl__truststore__type="PEM",
        ssl__truststore__location=truststore,
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
        zookeeper__max__staleness__ms="-1",
        queued__max__request__bytes="4096",
        delegation__token__implicit__login__enable="false",
        sasl__scram__accept__repeated__client__nonce="true",
        delegation__token__session__alter__access__enable="true",
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
    assert c.ssl_keystore_location == keystore
    assert c.ssl_key_password == "pem-pass"
    assert c.ssl_truststore_location == truststore
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
    assert c.zookeeper_max_staleness_ms == -1
    assert c.queued_max_request_bytes == 4096
    assert c.delegation_token_implicit_login_enable is False
    assert c.sasl_scram_accept_repeated_client_nonce is True
    assert c.delegation_token_session_alter_access_enable is True


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


def test_key_read_from_a_file_at_the_edge_is_used() -> None:
    c = build(
        {"delegation.token.secret.key.file": "file-key"},
        delegation__token__secret__key=None,
        delegation__token__secret__key__file="/etc/tokensvc/master.key",
    )
    assert c.master_keys == MasterKeys("file-key")


def test_key_read_from_the_environment_at_the_edge_is_used() -> None:
    c = build(
        {"delegation.token.secret.key.env": "env-key"},
        delegation__token__secret__key=None,
        delegation__token__secret__key__env="TOKENSVC_KEY",
    )
    assert c.master_keys == MasterKeys("env-key")


def test_key_file_that_the_edge_did_not_read_is_refused() -> None:
    refused(
        "delegation.token.secret.key.file",
        delegation__token__secret__key=None,
        delegation__token__secret__key__file="/etc/tokensvc/master.key",
    )


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("delegation.token.max.lifetime", "delegation.token.max.lifetime.ms"),
        ("delegaton.token.expiry.time.ms", "delegation.token.expiry.time.ms"),
        ("zookeeper.conect", "zookeeper.connect"),
        ("Broker.Id", "broker.id"),
        ("super.user", "super.users"),
    ],
)
def test_key_close_to_a_known_key_is_refused_naming_it(typo: str, meant: str) -> None:
    error = refused(typo, **{typo.replace(".", "__"): "5"})
    assert str(error) == f"{typo}: unknown key; did you mean {meant}?"


def test_kafka_server_properties_keys_are_ignored_not_refused() -> None:
    kafka = {
        "log.dirs": "/tmp/kafka-logs",
        "num.partitions": "1",
        "num.network.threads": "3",
        "offsets.topic.replication.factor": "1",
        "ssl.keystore.password": "jks-secret",
        "broker.session.timeout.ms": "9000",
        "queued.max.requests": "500",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "x",
        "my.own.setting": "value",
    }
    props = {**BASE, **kafka}
    assert BROKER_CONFIG.ignored_keys(props) == sorted(kafka)
    assert BrokerConfig.from_properties(props).broker_id == 1


def test_no_kafka_broker_key_is_taken_for_a_typo() -> None:
    for name in sorted(KAFKA_BROKER_KEYS - KNOWN_KEYS):
        assert BROKER_CONFIG.ignored_keys({name: "1"}) == [name]


@pytest.mark.parametrize("key", ["broker.id", "listeners", "zookeeper.connect"])
def test_required_key_missing_is_refused(key: str) -> None:
    assert "required" in str(refused(key, **{key.replace(".", "__"): None}))


@pytest.mark.parametrize("value", [",", " , ,"])
def test_listeners_set_but_naming_none_is_refused(value: str) -> None:
    # Fuzzer finding 17 (core/server_properties): "listeners = ," was an IndexError.
    assert "names no listener" in str(refused("listeners", listeners=value))


@pytest.mark.parametrize("value", ["one", "1.5", "1_000", "0x10"])
def test_non_number_is_refused(value: str) -> None:
    error = refused("request.timeout.ms", request__timeout__ms=value)
    assert str(error) == f"request.timeout.ms: {value!r} is not a number (expected a 32-bit integer)"


def test_empty_number_means_the_default() -> None:
    assert build(request__timeout__ms="  ").request_timeout_ms == 30_000


def test_negative_broker_id_is_refused() -> None:
    refused("broker.id", broker__id="-1")


def test_int32_overflow_is_refused() -> None:
    refused("max.connections.per.ip", max__connections__per__ip="2147483648")


@pytest.mark.parametrize("value", ["0", "-5"])
def test_non_positive_max_lifetime_is_refused(value: str) -> None:
    error = refused("delegation.token.max.lifetime.ms", delegation__token__max__lifetime__ms=value)
    assert str(error) == (
        f"delegation.token.max.lifetime.ms: {value} is out of range: must be at least 1"
    )


def test_max_lifetime_below_the_default_expiry_time_is_legal_and_caps_the_expiry() -> None:
    c = build(delegation__token__max__lifetime__ms="600000")
    assert (c.delegation_token_max_lifetime_ms, c.delegation_token_expiry_time_ms) == (
        600_000,
        86_400_000,
    )
    clock = FakeClock()
    manager = TokenManager(
        c.master_keys,
        max_lifetime_ms=c.delegation_token_max_lifetime_ms,
        renew_period_ms=c.delegation_token_expiry_time_ms,
        clock=clock,
    )
    alice = KafkaPrincipal.user("alice")
    info = manager.create(alice, alice, [], -1).info
    assert info.max_timestamp == info.expiry_timestamp == clock.now_ms() + 600_000


def test_staleness_accepts_minus_one_or_at_least_one() -> None:
    assert build(zookeeper__max__staleness__ms="-1").zookeeper_max_staleness_ms == -1
    assert build(zookeeper__max__staleness__ms="1").zookeeper_max_staleness_ms == 1
    for value in ("0", "-2"):
        error = refused("zookeeper.max.staleness.ms", zookeeper__max__staleness__ms=value)
        assert "must be -1 or at least 1" in str(error)


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
        {"delegation.token.secret.key.env": "env-key"},
        delegation__token__secret__key__env="K",
    )


def test_previous_keys_without_current_key_are_refused() -> None:
    refused(
        "delegation.token.secret.key.previous",
        delegation__token__secret__key="",
        delegation__token__secret__key__previous="old",
    )


def test_previous_keys_beside_kafka_are_refused_in_one_line_naming_both_keys() -> None:
    error = refused(
        "delegation.token.secret.key.previous",
        kafka__zookeeper__shared="true",
        delegation__token__secret__key__previous="old-master-key",
    )
    message = str(error)
    assert "kafka.zookeeper.shared" in message and "\n" not in message
    assert "old-master-key" not in message and "the-master-key" not in message


def test_beside_kafka_is_off_by_default_and_takes_a_boolean() -> None:
    assert build().kafka_zookeeper_shared is False
    assert build(kafka__zookeeper__shared="true").kafka_zookeeper_shared is True
    refused("kafka.zookeeper.shared", kafka__zookeeper__shared="sometimes")


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


def test_secret_values_are_never_in_a_refusal() -> None:
    for key in BROKER_CONFIG.keys.values():
        if key.secret and key.validator is not None:
            with pytest.raises(ConfigError) as caught:
                key.parse("hidden-value-without-colon")
            assert "hidden-value-without-colon" not in str(caught.value)


def test_every_attribute_is_a_declared_key() -> None:
    attributes = {f.name for f in dataclasses.fields(BrokerConfig)}
    declared = {key.attribute for key in BROKER_CONFIG.keys.values()}
    assert attributes - declared == {"master_keys", "zookeeper_security"}


def test_queued_max_request_bytes_below_socket_request_max_bytes_is_refused() -> None:
    error = refused("queued.max.request.bytes", queued__max__request__bytes="1000",
                    socket__request__max__bytes="2048")
    assert "socket.request.max.bytes" in str(error)


@pytest.mark.parametrize("value", ["0", "-2"])
def test_queued_max_request_bytes_zero_or_below_minus_one_is_refused(value: str) -> None:
    refused("queued.max.request.bytes", queued__max__request__bytes=value)


def test_queued_max_request_bytes_minus_one_means_no_cap() -> None:
    assert build(queued__max__request__bytes="-1").queued_max_request_bytes == -1


def test_oauthbearer_keys_have_kafkas_defaults() -> None:
    config = BrokerConfig.from_properties(BASE)
    assert (config.sasl_oauthbearer_sub_claim_name, config.sasl_oauthbearer_scope_claim_name,
            config.sasl_oauthbearer_clock_skew_seconds) == ("sub", "scope", 30)
    assert (config.sasl_oauthbearer_jwks_endpoint_refresh_ms,
            config.sasl_oauthbearer_jwks_endpoint_retry_backoff_ms,
            config.sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms) == (3_600_000, 100, 10_000)
    assert config.sasl_oauthbearer_expected_audience == ()
    assert "OAUTHBEARER" not in config.sasl_enabled_mechanisms


def test_oauthbearer_needs_the_mappings_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="OAUTHBEARER needs sasl.oauthbearer.principal.mappings"):
        BrokerConfig.from_properties({**BASE, "sasl.enabled.mechanisms": "OAUTHBEARER"})
    mappings = tmp_path / "m.toml"
    mappings.write_text("")
    config = BrokerConfig.from_properties({
        **BASE, "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
        "sasl.oauthbearer.principal.mappings.file": str(mappings),
        "sasl.oauthbearer.expected.audience": "a, b"})
    assert config.sasl_oauthbearer_expected_audience == ("a", "b")


def test_brokers_do_not_authenticate_to_each_other_with_oauthbearer() -> None:
    with pytest.raises(ConfigError, match="inter.broker.sasl.mechanism"):
        BrokerConfig.from_properties({**BASE, "inter.broker.sasl.mechanism": "OAUTHBEARER"})


@pytest.mark.parametrize("url", ["ftp://x/jwks", "jwks.json"])
def test_the_jwks_url_is_https_or_file(url: str) -> None:
    with pytest.raises(ConfigError, match="sasl.oauthbearer.jwks.endpoint.url"):
        BrokerConfig.from_properties({**BASE, "sasl.oauthbearer.jwks.endpoint.url": url})
