"""The ZooKeeper security keys: identities, the ACL decision, JAAS client sections."""

from __future__ import annotations

import pytest

from tokensvc.core.config import BrokerConfig
from tokensvc.core.configdef import ConfigError
from tokensvc.core.zk_security import (
    ZK_CLIENT_CONFIG,
    jaas_client_section,
    parse_jaas_client_login,
    zk_security_from_values,
)

BASE = {"broker.id": "1", "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "zookeeper.connect": "h:1"}
JAAS = jaas_client_section("tokensvc", 'p"ass\\word')


def security(props: dict[str, str], jaas: str | None = None):
    return zk_security_from_values(ZK_CLIENT_CONFIG.parse(props), jaas)


def test_no_identity_means_no_acls_by_default() -> None:
    assert security({}).set_acl is False


def test_sasl_turns_acls_on_by_default() -> None:
    found = security({"zookeeper.sasl.jaas.file": "/j"}, JAAS)
    assert found.set_acl is True
    assert found.sasl.username == "tokensvc"
    assert found.sasl.password == 'p"ass\\word'


def test_client_certificate_turns_acls_on_by_default() -> None:
    found = security({"zookeeper.ssl.client.enable": "true",
                      "zookeeper.ssl.keystore.location": "/k.pem",
                      "zookeeper.ssl.truststore.location": "/ca.pem"})
    assert found.set_acl is True
    assert found.tls.keystore == "/k.pem" and found.tls.check_hostname is True


def test_tls_without_a_client_certificate_sets_no_acls() -> None:
    found = security({"zookeeper.ssl.client.enable": "true",
                      "zookeeper.ssl.truststore.location": "/ca.pem"})
    assert found.set_acl is False


def test_legacy_digest_alone_keeps_acls_off_unless_asked() -> None:
    assert security({"zookeeper.digest": "a:b"}).set_acl is False
    assert security({"zookeeper.digest": "a:b", "zookeeper.set.acl": "true"}).set_acl is True


def test_set_acl_without_identity_is_an_error_naming_the_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        security({"zookeeper.set.acl": "true"})
    text = str(caught.value)
    assert text.startswith("zookeeper.set.acl:")
    assert "zookeeper.sasl.jaas.file" in text and "zookeeper.ssl.keystore.location" in text


def test_explicit_false_wins_over_an_identity() -> None:
    assert security({"zookeeper.set.acl": "false", "zookeeper.sasl.jaas.file": "/j"},
                    JAAS).set_acl is False


def test_sasl_client_false_ignores_the_jaas_file() -> None:
    found = security({"zookeeper.sasl.client": "false", "zookeeper.sasl.jaas.file": "/j"}, JAAS)
    assert found.sasl is None and found.set_acl is False


def test_keystore_without_tls_is_refused() -> None:
    with pytest.raises(ConfigError, match="zookeeper.ssl.keystore.location: is set but"):
        security({"zookeeper.ssl.keystore.location": "/k.pem"})


def test_tls_without_truststore_is_refused() -> None:
    with pytest.raises(ConfigError, match="zookeeper.ssl.truststore.location: is required"):
        security({"zookeeper.ssl.client.enable": "true"})


TLS = {"zookeeper.ssl.client.enable": "true"}


def tls(props: dict[str, str]):
    return security({**TLS, **props}).tls


@pytest.mark.parametrize(("name", "expected"), [
    ("/s/client.jks", "JKS"), ("/s/client.p12", "PKCS12"), ("/s/client.pem", "PEM"),
    ("/s/client.key", "PEM"), ("/s/client.JKS", "PEM"), ("/s.d/client", "PEM"),
])
def test_store_type_unset_follows_the_file_name_as_zookeeper(name: str, expected: str) -> None:
    found = tls({"zookeeper.ssl.keystore.location": name, "zookeeper.ssl.truststore.location": name,
                 "zookeeper.ssl.keystore.password": "pw", "zookeeper.ssl.truststore.password": "pw"})
    assert (found.keystore_type, found.truststore_type) == (expected, expected)


def test_declared_store_types_win_over_the_name_in_any_case() -> None:
    found = tls({"zookeeper.ssl.keystore.location": "/s/client.pem",
                 "zookeeper.ssl.keystore.type": "pkcs12", "zookeeper.ssl.keystore.password": "pw",
                 "zookeeper.ssl.truststore.location": "/s/ca.p12",
                 "zookeeper.ssl.truststore.type": "Pem"})
    assert (found.keystore_type, found.truststore_type) == ("PKCS12", "PEM")
    assert found.keystore_password == "pw" and "pw" not in repr(found)


@pytest.mark.parametrize("props", [
    {"zookeeper.ssl.keystore.type": "BCFKS"},
    {"zookeeper.ssl.truststore.type": "JCEKS"},
])
def test_store_types_other_than_jks_pkcs12_pem_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=next(iter(props))):
        ZK_CLIENT_CONFIG.parse(props)


def test_a_bcfks_file_name_is_refused_naming_the_type_key() -> None:
    with pytest.raises(ConfigError, match="zookeeper.ssl.truststore.location: /ca.bcfks is a "
                                          "BCFKS store.*zookeeper.ssl.truststore.type"):
        tls({"zookeeper.ssl.truststore.location": "/ca.bcfks"})


@pytest.mark.parametrize(("store", "kind"), [("keystore", "key"), ("truststore", "trust")])
def test_jks_and_pkcs12_stores_need_their_password(store: str, kind: str) -> None:
    for name in ("/s/x.jks", "/s/x.p12"):
        props = {"zookeeper.ssl.truststore.location": "/ca.pem",
                 f"zookeeper.ssl.{store}.location": name}
        with pytest.raises(ConfigError, match=f"zookeeper.ssl.{store}.password: is required for "
                                              f"a (JKS|PKCS12) {kind} store"):
            tls(props)


def test_pem_stores_need_no_password() -> None:
    found = tls({"zookeeper.ssl.keystore.location": "/k.pem",
                 "zookeeper.ssl.truststore.location": "/ca.pem"})
    assert found.keystore_password is None and found.truststore_password is None


@pytest.mark.parametrize(("props", "expected"), [
    ({}, ()),
    ({"zookeeper.ssl.protocol": "TLSv1.3"}, ("TLSv1.3",)),
    ({"zookeeper.ssl.protocol": "TLSv1.2"}, ("TLSv1.2",)),
    ({"zookeeper.ssl.protocol": "TLSv1.2", "zookeeper.ssl.enabled.protocols": "TLSv1.3,TLSv1.2"},
     ("TLSv1.2", "TLSv1.3")),
])
def test_tls_versions_are_the_enabled_protocols_else_the_protocol(
    props: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert tls({"zookeeper.ssl.truststore.location": "/ca.pem", **props}).protocols == expected


@pytest.mark.parametrize("props", [
    {"zookeeper.ssl.protocol": "TLSv1.1"},
    {"zookeeper.ssl.protocol": "TLS"},
    {"zookeeper.ssl.enabled.protocols": "TLSv1.2,SSLv3"},
])
def test_tls_versions_below_1_2_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=next(iter(props))):
        ZK_CLIENT_CONFIG.parse(props)


@pytest.mark.parametrize(("key", "value"), [
    ("zookeeper.ssl.cipher.suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    ("zookeeper.ssl.crl.enable", "true"),
    ("zookeeper.ssl.ocsp.enable", "true"),
])
def test_unsupported_kafka_keys_are_refused_not_ignored(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}: is not supported by tokensvc"):
        ZK_CLIENT_CONFIG.parse({key: value})


def test_revocation_checks_off_are_accepted() -> None:
    values = ZK_CLIENT_CONFIG.parse({"zookeeper.ssl.crl.enable": "false",
                                     "zookeeper.ssl.ocsp.enable": "false"})
    assert values["zookeeper.ssl.crl.enable"] is False


@pytest.mark.parametrize(("value", "checked"), [
    (None, True), ("HTTPS", True), ("https", True), ("", False), ("  ", False),
])
def test_endpoint_identification_blank_turns_host_name_checks_off_as_kafka(
    value: str | None, checked: bool
) -> None:
    props = {"zookeeper.ssl.truststore.location": "/ca.pem"}
    if value is not None:
        props["zookeeper.ssl.endpoint.identification.algorithm"] = value
    assert tls(props).check_hostname is checked


def test_the_start_line_names_the_store_types_never_a_password() -> None:
    found = security({**TLS, "zookeeper.ssl.keystore.location": "/s/client.jks",
                      "zookeeper.ssl.keystore.password": "ks-secret",
                      "zookeeper.ssl.truststore.location": "/s/ca.p12",
                      "zookeeper.ssl.truststore.password": "ts-secret"})
    line = found.describe()
    assert line.startswith("TLS with a client certificate (JKS key store, PKCS12 trust store)")
    assert "secret" not in line and "secret" not in repr(found)


def test_every_zookeeper_key_of_kafka_is_declared() -> None:
    kafka = {"zookeeper.ssl.client.enable", "zookeeper.clientCnxnSocket",
             "zookeeper.ssl.keystore.location", "zookeeper.ssl.keystore.password",
             "zookeeper.ssl.keystore.type", "zookeeper.ssl.truststore.location",
             "zookeeper.ssl.truststore.password", "zookeeper.ssl.truststore.type",
             "zookeeper.ssl.protocol", "zookeeper.ssl.enabled.protocols",
             "zookeeper.ssl.cipher.suites", "zookeeper.ssl.endpoint.identification.algorithm",
             "zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable", "zookeeper.set.acl"}
    assert kafka <= ZK_CLIENT_CONFIG.names()


def test_jaas_section_is_found_among_others() -> None:
    text = 'KafkaServer {\n  x.Y required a="b";\n};\n' + jaas_client_section("u", "p", "Zk")
    login = parse_jaas_client_login(text, "Zk")
    assert (login.username, login.password, login.mechanism) == ("u", "p", "DIGEST-MD5")


def test_jaas_errors_name_the_section_never_the_password() -> None:
    with pytest.raises(ConfigError) as missing:
        parse_jaas_client_login(JAAS, "Other")
    assert "'Other'" in str(missing.value) and "Client" in str(missing.value)
    wrong = JAAS.replace("org.apache.zookeeper.server.auth.DigestLoginModule", "com.Krb5")
    with pytest.raises(ConfigError) as module:
        parse_jaas_client_login(wrong, "Client")
    assert "DIGEST-MD5" in str(module.value) and "word" not in str(module.value)
    with pytest.raises(ConfigError, match="has no password"):
        parse_jaas_client_login(JAAS.replace('password="p\\"ass\\\\word"', ""), "Client")


def test_passwords_stay_out_of_reprs() -> None:
    found = security({"zookeeper.sasl.jaas.file": "/j", "zookeeper.digest": "d:secret-d"}, JAAS)
    assert "ass" not in repr(found) and "secret-d" not in repr(found)
    assert "ass" not in found.describe() and "secret-d" not in found.describe()


def test_broker_config_carries_the_security() -> None:
    config = BrokerConfig.from_properties(
        {**BASE, "zookeeper.sasl.jaas.file": "/j"}, resolved={"zookeeper.sasl.jaas.file": JAAS})
    assert config.zookeeper_security.set_acl is True
    with pytest.raises(ConfigError, match="zookeeper.set.acl"):
        BrokerConfig.from_properties({**BASE, "zookeeper.set.acl": "true"})
