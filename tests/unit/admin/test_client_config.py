"""Kafka client properties, JAAS and PEM TLS settings read into ClientConfig."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from tokensvc import devcerts
from tokensvc.client_config import (
    ClientConfig,
    ClientConfigError,
    client_config_from_properties,
    load_client_config,
    parse_jaas_config,
)
from tokensvc.core.configdef import ConfigError
from tokensvc.properties import parse_properties
from tokensvc.scram.formatter import ScramMechanism

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
SECRET = "s3cr3t-Pa55"


def sasl_props(jaas: str, **extra: str) -> dict[str, str]:
    props = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas,
    }
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return props


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> devcerts.DevCertificates:
    return devcerts.generate(tmp_path_factory.mktemp("tls"), client_name="alice")


# --- .properties -----------------------------------------------------------------------


def test_properties_skip_comments_and_accept_every_separator() -> None:
    text = "# comment\n! also a comment\n\na=1\nb : 2\nc 3\n  d=  spaced value  \n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "spaced value"}


def test_properties_backslash_continues_a_line_without_leading_blanks() -> None:
    text = (
        "sasl.jaas.config=" + SCRAM + " required \\\n"
        '    username="alice" \\\n'
        '    password="x";\n'
        "next=1\n"
    )
    props = parse_properties(text)
    assert props["sasl.jaas.config"] == SCRAM + ' required username="alice" password="x";'
    assert props["next"] == "1"


def test_properties_unescape_keys_and_values() -> None:
    props = parse_properties("my\\:key=tab\\there\\u00e9\\\\end\nlast=a\\=b\n")
    assert props == {"my:key": "tab\there\u00e9\\end", "last": "a=b"}


def test_properties_even_trailing_backslashes_do_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}


def test_properties_bad_unicode_escape_is_an_error() -> None:
    with pytest.raises(ConfigError, match="uXXXX"):
        parse_properties("a=\\uZZZZ\n")


# --- JAAS ------------------------------------------------------------------------------


def test_jaas_quoted_values_with_escapes() -> None:
    module = parse_jaas_config(
        SCRAM + r' required username="al\"ice" password="p\\w;d=x" tokenauth=true;'
    )
    assert module.login_module == SCRAM
    assert module.control_flag == "required"
    assert dict(module.options) == {
        "username": 'al"ice', "password": "p\\w;d=x", "tokenauth": "true",
    }


def test_jaas_unquoted_values_and_spacing_around_equals() -> None:
    module = parse_jaas_config(f"{SCRAM} required\n  username = alice\tpassword=x-y.z_1 ;")
    assert dict(module.options) == {"username": "alice", "password": "x-y.z_1"}


@pytest.mark.parametrize("flag", ["required", "REQUISITE", "Sufficient", "optional"])
def test_jaas_every_control_flag_is_accepted_case_insensitively(flag: str) -> None:
    assert parse_jaas_config(f'{SCRAM} {flag} username="a" password="b";').control_flag == (
        flag.lower()
    )


def test_jaas_module_without_options() -> None:
    module = parse_jaas_config(f"{SCRAM} required;")
    assert dict(module.options) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'{SCRAM} username="a" password="b";', "control flag"),
        (f'{SCRAM} mandatory username="a";', "control flag"),
        (f'{SCRAM} required username="a" password="b"', "must end with ';'"),
        (f'{SCRAM} required username="a" password;', "needs '='"),
        (f"{SCRAM} required username=;", "has no value"),
        (f'{SCRAM} required username="a" password="unterminated;', "unterminated"),
        (f'{SCRAM} required username="a";{SCRAM} required username="b";', "found 2"),
        ("", "found 0"),
        ('"quoted" required;', "class name"),
        (f"{SCRAM} required = x;", "option name"),
    ],
)
def test_jaas_syntax_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ClientConfigError, match=message):
        parse_jaas_config(text)


def test_jaas_errors_never_show_option_values() -> None:
    with pytest.raises(ClientConfigError) as info:
        parse_jaas_config(f'{SCRAM} required username="a" password="{SECRET}"')
    assert SECRET not in str(info.value)


# --- SASL ------------------------------------------------------------------------------


def test_scram_user_login() -> None:
    config = client_config_from_properties(
        sasl_props(f'{SCRAM} required username="alice" password="{SECRET}";')
    )
    assert config.security_protocol == "SASL_PLAINTEXT"
    assert config.sasl_mechanism is ScramMechanism.SCRAM_SHA_512
    assert (config.username, config.password, config.token_auth) == ("alice", SECRET, False)
    assert config.uses_sasl and not config.uses_tls


def test_tokenauth_true_selects_token_login() -> None:
    config = client_config_from_properties(
        sasl_props(f'{SCRAM} required username="tokenid" password="hmac==" tokenauth="TRUE";',
                   sasl_mechanism="SCRAM-SHA-256")
    )
    assert config.token_auth is True
    assert config.sasl_mechanism is ScramMechanism.SCRAM_SHA_256


def test_tokenauth_other_values_mean_user_login() -> None:
    config = client_config_from_properties(
        sasl_props(f'{SCRAM} required username="u" password="p" tokenauth=false;')
    )
    assert config.token_auth is False


def test_repr_hides_the_password() -> None:
    config = client_config_from_properties(
        sasl_props(f'{SCRAM} required username="alice" password="{SECRET}";')
    )
    assert SECRET not in repr(config)
    assert "alice" in repr(config)


def test_unknown_login_module_is_a_clear_error() -> None:
    props = sasl_props(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" '
        f'password="{SECRET}";'
    )
    with pytest.raises(ClientConfigError, match="PlainLoginModule.*needs .*ScramLoginModule") as info:
        client_config_from_properties(props)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("mechanism", ["PLAIN", "GSSAPI"])
def test_other_mechanisms_are_refused(mechanism: str) -> None:
    props = sasl_props(f'{SCRAM} required username="a" password="b";', sasl_mechanism=mechanism)
    with pytest.raises(ClientConfigError) as info:
        client_config_from_properties(props)
    assert str(info.value) == (
        f"sasl.mechanism: '{mechanism}' is not one of SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"
    )


def test_oauthbearer_reads_its_jwt_from_a_file_url() -> None:
    config = client_config_from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "file:/var/run/secrets/tokens/kafka%20token"})
    assert config.oauth_token_file == "/var/run/secrets/tokens/kafka token"
    assert config.sasl_mechanism is None and config.password is None


@pytest.mark.parametrize("url", [None, "ftp://idp.example/token", "file:"])
def test_oauthbearer_without_a_token_file_is_refused(url: str | None) -> None:
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}
    if url is not None:
        props["sasl.oauthbearer.token.endpoint.url"] = url
    with pytest.raises(ClientConfigError, match="sasl.oauthbearer.token.endpoint.url"):
        client_config_from_properties(props)


def test_sasl_needs_a_mechanism_and_a_jaas_config() -> None:
    with pytest.raises(ClientConfigError, match="sasl.mechanism: is required"):
        client_config_from_properties({"security.protocol": "SASL_SSL"})
    with pytest.raises(ClientConfigError, match="sasl.jaas.config: is required"):
        client_config_from_properties(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256"}
        )


def test_missing_username_or_password_is_named() -> None:
    with pytest.raises(ClientConfigError, match="username is missing"):
        client_config_from_properties(sasl_props(f'{SCRAM} required password="{SECRET}";'))
    with pytest.raises(ClientConfigError, match="password is missing"):
        client_config_from_properties(sasl_props(f'{SCRAM} required username="a";'))


def test_unknown_security_protocol_is_refused() -> None:
    with pytest.raises(ClientConfigError) as info:
        client_config_from_properties({"security.protocol": "SASL_TLS"})
    assert str(info.value) == (
        "security.protocol: 'SASL_TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
    )


def test_defaults_are_plaintext_and_thirty_seconds() -> None:
    config = client_config_from_properties({"client.id": "ops", "unrelated.key": "ignored"})
    assert config == ClientConfig(client_id="ops")
    assert config.request_timeout_ms == 30_000


@pytest.mark.parametrize("value", ["soon", "0", "-5"])
def test_request_timeout_must_be_a_positive_integer(value: str) -> None:
    with pytest.raises(ClientConfigError, match="request.timeout.ms"):
        client_config_from_properties({"request.timeout.ms": value})


def test_request_timeout_is_read() -> None:
    assert client_config_from_properties({"request.timeout.ms": "1500"}).request_timeout_ms == 1500


# --- TLS -------------------------------------------------------------------------------


def test_pem_truststore_location_gives_a_verifying_context(certs: devcerts.DevCertificates) -> None:
    config = client_config_from_properties(
        {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
         "ssl.truststore.location": str(certs.ca)}
    )
    assert config.uses_tls and not config.uses_sasl
    assert config.ca_pem == certs.ca.read_text()
    ctx = config.ssl_context()
    assert ctx.verify_mode is ssl.CERT_REQUIRED
    assert ctx.check_hostname is True
    assert len(ctx.get_ca_certs()) == 1


def test_inline_truststore_certificates(certs: devcerts.DevCertificates) -> None:
    config = client_config_from_properties(
        {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
         "ssl.truststore.certificates": certs.ca.read_text()}
    )
    assert len(config.ssl_context().get_ca_certs()) == 1


def test_empty_endpoint_identification_disables_hostname_checks(
    certs: devcerts.DevCertificates,
) -> None:
    config = client_config_from_properties(
        {"security.protocol": "SSL", "ssl.truststore.location": str(certs.ca),
         "ssl.endpoint.identification.algorithm": ""}
    )
    assert config.check_hostname is False
    assert config.ssl_context().check_hostname is False


def test_unknown_endpoint_identification_algorithm_is_refused() -> None:
    with pytest.raises(ClientConfigError, match="ssl.endpoint.identification.algorithm"):
        client_config_from_properties(
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}
        )


def test_jks_truststore_type_asks_for_pem() -> None:
    with pytest.raises(ClientConfigError, match="ssl.truststore.type: JKS is not supported.*ssl.truststore.type=PEM"):
        client_config_from_properties(
            {"security.protocol": "SSL", "ssl.truststore.type": "JKS",
             "ssl.truststore.location": "/nonexistent.jks"}
        )


def test_binary_truststore_without_type_asks_for_pem(tmp_path: Path) -> None:
    store = tmp_path / "truststore.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02binary")
    with pytest.raises(ClientConfigError, match="not PEM.*set ssl.truststore.type=PEM"):
        client_config_from_properties(
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
             "sasl.jaas.config": f'{SCRAM} required username="a" password="b";',
             "ssl.truststore.location": str(store)}
        )


def test_unreadable_truststore_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ClientConfigError, match="ssl.truststore.location: cannot read"):
        client_config_from_properties(
            {"security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "missing.pem")}
        )


def test_truststore_location_and_certificates_are_exclusive(
    certs: devcerts.DevCertificates,
) -> None:
    with pytest.raises(ClientConfigError, match="not both"):
        client_config_from_properties(
            {"security.protocol": "SSL", "ssl.truststore.location": str(certs.ca),
             "ssl.truststore.certificates": certs.ca.read_text()}
        )


def test_pem_keystore_location_loads_the_client_certificate(
    certs: devcerts.DevCertificates,
) -> None:
    assert certs.client is not None
    config = client_config_from_properties(
        {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
         "ssl.keystore.location": str(certs.client), "ssl.truststore.location": str(certs.ca)}
    )
    assert config.keystore_location == str(certs.client)
    assert "PRIVATE KEY" not in repr(config)
    assert isinstance(config.ssl_context(), ssl.SSLContext)


def test_keystore_that_cannot_be_loaded_is_a_clear_error(
    certs: devcerts.DevCertificates,
) -> None:
    assert certs.client is not None
    config = client_config_from_properties(
        {"security.protocol": "SSL", "ssl.keystore.location": str(certs.client),
         "ssl.key.password": "unused-for-a-plain-key"}
    )
    assert isinstance(config.ssl_context(), ssl.SSLContext)
    broken = ClientConfig(security_protocol="SSL", keystore_location=str(certs.ca))
    with pytest.raises(ClientConfigError, match="could not be loaded"):
        broken.ssl_context()


def test_inline_keystore_needs_both_chain_and_key(certs: devcerts.DevCertificates) -> None:
    assert certs.client is not None
    text = certs.client.read_text()
    key = text[: text.index("-----END PRIVATE KEY-----") + len("-----END PRIVATE KEY-----")]
    chain = text[len(key):]
    config = client_config_from_properties(
        {"security.protocol": "SSL", "ssl.keystore.certificate.chain": chain,
         "ssl.keystore.key": key, "ssl.truststore.certificates": certs.ca.read_text()}
    )
    assert isinstance(config.ssl_context(), ssl.SSLContext)
    with pytest.raises(ClientConfigError, match="must be set together"):
        client_config_from_properties({"security.protocol": "SSL", "ssl.keystore.key": key})


def test_keystore_without_a_key_is_refused(certs: devcerts.DevCertificates) -> None:
    with pytest.raises(ClientConfigError, match="private key and its certificate chain"):
        client_config_from_properties(
            {"security.protocol": "SSL", "ssl.keystore.location": str(certs.ca)}
        )


def test_tls_keys_are_ignored_for_plaintext(tmp_path: Path) -> None:
    config = client_config_from_properties(
        {"security.protocol": "PLAINTEXT", "ssl.truststore.type": "JKS"}
    )
    assert config.ca_pem is None


# --- files -----------------------------------------------------------------------------


def test_load_client_config_reads_a_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        f'sasl.jaas.config={SCRAM} required \\\n  username="alice" \\\n  password="{SECRET}";\n',
        encoding="utf-8",
    )
    config = load_client_config(path)
    assert (config.username, config.password) == ("alice", SECRET)


def test_load_client_config_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ClientConfigError) as info:
        load_client_config(tmp_path / "nope.properties")
    assert str(info.value) == (
        f"{tmp_path / 'nope.properties'}: cannot read the file: No such file or directory"
    )


def test_client_file_relative_paths_resolve_against_its_directory(
    tmp_path: Path, certs: devcerts.DevCertificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "ca.pem").write_text(certs.ca.read_text())
    path = conf / "client.properties"
    path.write_text("security.protocol=SSL\nssl.truststore.location=ca.pem\n")
    monkeypatch.chdir(tmp_path)
    assert load_client_config(Path("conf") / "client.properties").ca_pem == certs.ca.read_text()


def test_client_file_kafka_keys_get_one_warning_with_names_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "bootstrap.servers=kafka:9092\nssl.truststore.password=store-secret\nretries=3\n"
        "my.tool.option=x\n"
    )
    with caplog.at_level("WARNING", logger="tokensvc.client_config"):
        assert load_client_config(path) == ClientConfig()
    assert [r.getMessage() for r in caplog.records] == [
        (f"{path}: ignoring 4 key(s) tokensvc does not use: bootstrap.servers, my.tool.option, "
        "retries, ssl.truststore.password")
    ]
    assert "store-secret" not in caplog.text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("security.protocl=SASL_SSL\n", "security.protocl: unknown key; did you mean security.protocol?"),
        ("request.timeout.ms=soon\n",
         "request.timeout.ms: 'soon' is not a number (expected a 32-bit integer)"),
        ("request.timeout.ms=-5\n", "request.timeout.ms: -5 is out of range: must be at least 1"),
        ("client.id=a\nclient.id=b\n", "client.id: is given twice (lines 1 and 2)"),
        (("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
         f'sasl.jaas.config={SCRAM} required username="a" password="{SECRET}"\n'),
         "sasl.jaas.config: the entry for " + SCRAM + " must end with ';'"),
    ],
)
def test_client_file_bad_input_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "client.properties"
    path.write_text(text)
    with pytest.raises(ClientConfigError) as info:
        load_client_config(path)
    assert str(info.value) == f"{path}: {message}"
    assert SECRET not in str(info.value)


OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def test_oauthbearer_client_credentials_take_kafkas_jaas_options() -> None:
    config = client_config_from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.jaas.config": f'{OAUTH_MODULE} required clientId="etl" clientSecret="{SECRET}" '
                            'scope="kafka" ssl.truststore.location="/etc/ca.pem";'})
    grant = config.oauth_client
    assert grant is not None and config.oauth_token_file is None
    assert (grant.token_url, grant.client_id, grant.scope, grant.ca_file) == (
        "https://idp.example/token", "etl", "kafka", "/etc/ca.pem")
    assert SECRET not in repr(config)


@pytest.mark.parametrize("jaas,problem", [
    (None, "is required with a token endpoint"),
    (f'{SCRAM} required username="a" password="b";', "uses login module"),
    (f'{OAUTH_MODULE} required clientId="etl";', "clientId and clientSecret"),
])
def test_oauthbearer_client_credentials_need_an_oauth_login(jaas: str | None, problem: str) -> None:
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
             "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"}
    if jaas is not None:
        props["sasl.jaas.config"] = jaas
    with pytest.raises(ClientConfigError, match=problem):
        client_config_from_properties(props)


def test_oauthbearer_token_endpoint_over_plain_http_only_to_loopback() -> None:
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
             "sasl.oauthbearer.token.endpoint.url": "http://idp.example/token",
             "sasl.jaas.config": f'{OAUTH_MODULE} required clientId="a" clientSecret="b";'}
    with pytest.raises(ClientConfigError, match="loopback"):
        client_config_from_properties(props)
