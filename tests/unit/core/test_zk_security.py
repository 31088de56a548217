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


def test_jks_stores_are_refused() -> None:
    with pytest.raises(ConfigError, match="zookeeper.ssl.keystore.type"):
        ZK_CLIENT_CONFIG.parse({"zookeeper.ssl.keystore.type": "JKS"})


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
