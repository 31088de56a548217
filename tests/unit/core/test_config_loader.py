"""server.properties at the edge: the one properties reader, relative paths, the key
file and the environment, notices, and every bad-input case (one line naming the file
and the key, no secret, nothing changed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.broker_cmd import broker
from tokensvc.config_loader import TOKENS_DISABLED, load_broker_config
from tokensvc.core.config import ConfigError
from tokensvc.core.keys import MasterKeys
from tokensvc.properties import parse_properties, properties_text, read_properties

MASTER = "the-master-key-never-shown"
BASE = (
    "broker.id=1\n"
    "listeners=SASL_PLAINTEXT://127.0.0.1:9092\n"
    "zookeeper.connect=127.0.0.1:2181/tokensvc\n"
)


def write(directory: Path, text: str, name: str = "server.properties") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def private(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o600)
    return path


# -- the properties reader ------------------------------------------------------------------


def test_reader_handles_every_separator_comment_continuation_and_escape() -> None:
    text = (
        "# a comment\n"
        "   ! another comment\n"
        "\n"
        "equals=1\n"
        "  colon : 2  \n"
        "blank   3\n"
        "tab\t4\n"
        "listeners = SASL_PLAINTEXT://a:1,\\\n"
        "            SASL_SSL://b:2\n"
        "tab\\tkey=x\\u0041y\\u00e9\n"
        "path=C:\\\\dir\n"
        "a\\=b\\:c=d\n"
        "even=x\\\\\n"
        "empty=\n"
    )
    assert parse_properties(text) == {
        "equals": "1",
        "colon": "2",
        "blank": "3",
        "tab": "4",
        "listeners": "SASL_PLAINTEXT://a:1,SASL_SSL://b:2",
        "tab\tkey": "xAy\u00e9",
        "path": "C:\\dir",
        "a=b:c": "d",
        "even": "x\\",
        "empty": "",
    }


def test_reader_refuses_a_duplicate_key_naming_both_lines() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_properties("# c\na=1\nb=2\\\n  3\na=4\n", "f.properties")
    assert str(caught.value) == "f.properties: a: is given twice (lines 2 and 5)"


def test_reader_refuses_a_malformed_unicode_escape_naming_the_line() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_properties("a=1\npassword=\\uZZ-secret\n", "f.properties")
    assert str(caught.value) == "f.properties: line 2: malformed \\uXXXX escape"


def test_written_properties_read_back_unchanged(tmp_path: Path) -> None:
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9092",
        "sasl.jaas.config": 'M required username="a" password="p=#!:\\\\x";',
        "odd key": " leading blank",
        "unicode": "caf\u00e9",
    }
    path = tmp_path / "x.properties"
    path.write_text(properties_text(props), encoding="utf-8")
    assert read_properties(path) == {**props, "odd key": "leading blank"}


# -- loading ---------------------------------------------------------------------------------


def test_load_reads_and_checks_a_file(tmp_path: Path) -> None:
    loaded = load_broker_config(write(tmp_path, BASE + f"delegation.token.secret.key={MASTER}\n"))
    assert loaded.config.broker_id == 1
    assert loaded.config.master_keys == MasterKeys(MASTER)
    assert loaded.notices == ()


def test_short_max_lifetime_with_the_default_expiry_time_loads(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + f"delegation.token.secret.key={MASTER}\n"
                 "delegation.token.max.lifetime.ms=600000\n")
    config = load_broker_config(path).config
    assert config.delegation_token_max_lifetime_ms == 600_000
    assert config.delegation_token_expiry_time_ms == 86_400_000


def test_relative_paths_resolve_against_the_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "etc"
    (conf / "tls").mkdir(parents=True)
    (conf / "tls" / "broker.pem").write_text("pem")
    (conf / "tls" / "ca.pem").write_text("pem")
    private(conf / "master.key", f"{MASTER}\n")
    path = write(conf, BASE + (
        "ssl.keystore.location=tls/broker.pem\n"
        "ssl.truststore.location=./tls/../tls/ca.pem\n"
        "delegation.token.secret.key.file=master.key\n"
        "audit.log.dir=audit\n"
    ))
    monkeypatch.chdir(tmp_path)
    config = load_broker_config(Path("etc") / "server.properties").config
    assert config.ssl_keystore_location == str(conf / "tls" / "broker.pem")
    assert config.ssl_truststore_location == str(conf / "tls" / "ca.pem")
    assert config.audit_log_dir == str(conf / "audit")
    assert config.master_keys == MasterKeys(MASTER)
    assert path.is_file()


def test_key_from_a_private_file(tmp_path: Path) -> None:
    key = private(tmp_path / "master.key", f"  {MASTER}\n")
    path = write(tmp_path, BASE + f"delegation.token.secret.key.file={key}\n")
    assert load_broker_config(path).config.master_keys == MasterKeys(MASTER)


def test_key_from_an_environment_variable(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "delegation.token.secret.key.env=TOKENSVC_KEY\n")
    config = load_broker_config(path, env={"TOKENSVC_KEY": MASTER}).config
    assert config.master_keys == MasterKeys(MASTER)


def test_kafka_server_properties_loads_with_one_warning_listing_names_only(tmp_path: Path) -> None:
    kafka = (
        "log.dirs=/tmp/kafka-logs\n"
        "num.partitions=1\n"
        "ssl.keystore.password=jks-store-secret\n"
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=jaas-secret\n"
    )
    path = write(tmp_path, BASE + f"delegation.token.secret.key={MASTER}\n" + kafka)
    notices = load_broker_config(path).notices
    assert notices == ((
        f"{path}: ignoring 4 key(s) tokensvc does not use: listener.name.sasl_plaintext."
        "scram-sha-512.sasl.jaas.config, log.dirs, num.partitions, ssl.keystore.password"
    ),)
    for value in ("jks-store-secret", "jaas-secret", "/tmp/kafka-logs"):
        assert value not in notices[0]


def test_empty_secret_disables_tokens_and_says_so_once(tmp_path: Path) -> None:
    loaded = load_broker_config(write(tmp_path, BASE + "delegation.token.secret.key=\n"))
    assert not loaded.config.master_keys.enabled
    assert loaded.notices == (TOKENS_DISABLED,)


# -- bad input: one line naming the file and the key, never a secret, nothing changed ---------


def _snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        str(p): (p.stat().st_mode, p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
        for p in sorted(directory.rglob("*"))
    }


def _refused(path: Path, env: dict[str, str] | None = None) -> str:
    before = _snapshot(path.parent)
    with pytest.raises(ConfigError) as caught:
        load_broker_config(path, env=env or {})
    assert _snapshot(path.parent) == before
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert MASTER not in message
    return message


def test_bad_input_non_number(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "delegation.token.expiry.time.ms=1 day\n")
    assert _refused(path) == (
        f"{path}: delegation.token.expiry.time.ms: '1 day' is not a number "
        "(expected a 64-bit integer)"
    )


def test_bad_input_negative_lifetime(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "delegation.token.max.lifetime.ms=-600000\n")
    assert _refused(path) == (
        f"{path}: delegation.token.max.lifetime.ms: -600000 is out of range: must be at least 1"
    )


def test_bad_input_duplicate_key(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + f"delegation.token.secret.key={MASTER}\n"
                 f"delegation.token.secret.key={MASTER}-2\n")
    assert _refused(path) == f"{path}: delegation.token.secret.key: is given twice (lines 4 and 5)"


def test_bad_input_typo_of_a_known_key(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "delegation.token.max.lifetime=600000\n")
    assert _refused(path) == (
        f"{path}: delegation.token.max.lifetime: unknown key; "
        "did you mean delegation.token.max.lifetime.ms?"
    )


@pytest.mark.parametrize("case", ["missing", "directory", "mode 0644", "empty", "not utf-8"])
def test_bad_input_unreadable_key_file(tmp_path: Path, case: str) -> None:
    key = tmp_path / "master.key"
    expected = {
        "missing": f"cannot read {key}: No such file or directory",
        "directory": f"cannot read {key}: Is a directory",
        "mode 0644": f"{key} has mode 0644: it must not be readable or writable by group or "
        "others (chmod 600)",
        "empty": f"{key} is empty",
        "not utf-8": f"{key} is not UTF-8 text",
    }[case]
    if case == "directory":
        key.mkdir(mode=0o700)
    elif case == "mode 0644":
        key.write_text(MASTER)
        os.chmod(key, 0o644)
    elif case == "empty":
        private(key, " \n")
    elif case == "not utf-8":
        key.write_bytes(MASTER.encode() + b"\xff\xfe")
        os.chmod(key, 0o600)
    path = write(tmp_path, BASE + "delegation.token.secret.key.file=master.key\n")
    assert _refused(path) == f"{path}: delegation.token.secret.key.file: {expected}"


def test_bad_input_unset_environment_variable(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "delegation.token.secret.key.env=NOT_SET_ANYWHERE\n")
    assert _refused(path) == (
        f"{path}: delegation.token.secret.key.env: environment variable NOT_SET_ANYWHERE "
        "is unset or empty"
    )


def test_bad_input_missing_keystore(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "ssl.keystore.location=none.pem\n")
    assert _refused(path) == (
        f"{path}: ssl.keystore.location: {tmp_path / 'none.pem'} is not a readable file"
    )


def test_bad_input_bad_secret_form_is_not_echoed(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + f"zookeeper.digest={MASTER}\n")
    assert _refused(path) == f"{path}: zookeeper.digest: must be of the form user:password"


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_broker_config(tmp_path / "absent.properties")
    assert str(caught.value) == (
        f"{tmp_path / 'absent.properties'}: cannot read the file: No such file or directory"
    )


def test_broker_command_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + f"delegation.token.secret.key={MASTER}\n"
                 "delegation.token.max.lifetime.ms=-1\n")
    result = CliRunner().invoke(broker, ["--config", str(path)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: invalid configuration: {path}: delegation.token.max.lifetime.ms: "
        "-1 is out of range: must be at least 1\n"
    )
