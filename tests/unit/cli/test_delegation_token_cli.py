"""kafka-delegation-token usage errors: exit 2 with click's message, before any connection.

Every case uses an address nothing listens on: a usage error must be reported without
trying to connect (a connection attempt would exit 1, not 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.delegation_token import delegation_token, format_date, token_table
from tokensvc.admin import TokenDescription
from tokensvc.core.principal import KafkaPrincipal

NOWHERE = "127.0.0.1:1"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(delegation_token, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Missing option '--bootstrap-server'"),
        (["--bootstrap-server", NOWHERE], "exactly one of --create, --renew, --expire, --describe"),
        (["--bootstrap-server", NOWHERE], "(given: none)"),
        (["--bootstrap-server", NOWHERE, "--create", "--describe"], "(given: --create, --describe)"),
        (["--bootstrap-server", NOWHERE, "--renew"], "--renew needs --hmac"),
        (["--bootstrap-server", NOWHERE, "--expire"], "--expire needs --hmac"),
        (["--bootstrap-server", NOWHERE, "--create", "--renewer-principal", "alice"],
         "'alice' is not a principal: use Type:name"),
        (["--bootstrap-server", NOWHERE, "--describe", "--owner-principal", "User:"],
         "'User:' is not a principal"),
        (["--bootstrap-server", NOWHERE, "--describe", "--output", "yaml"],
         "'yaml' is not one of 'text', 'json'"),
        (["--bootstrap-server", NOWHERE, "--create", "--max-life-time-period", "1h"],
         "'1h' is not a valid integer"),
        (["--bootstrap-server", NOWHERE, "--renew", "--hmac", "AAAA", "--renew-time-period", "x"],
         "'x' is not a valid integer"),
        (["--bootstrap-server", NOWHERE, "--describe", "--timeout", "0"], "--timeout"),
        (["--bootstrap-server", NOWHERE, "--renew", "--hmac", "not base64!"],
         "not a base64 HMAC"),
        (["--bootstrap-server", NOWHERE, "--create", "--owner-principal", "User:a",
          "--owner-principal", "User:b"], "--create takes at most one --owner-principal"),
        (["--bootstrap-server", NOWHERE, "--describe", "--hmac", "AAAA"],
         "--hmac cannot be used with --describe"),
        (["--bootstrap-server", NOWHERE, "--renew", "--hmac", "AAAA", "--renewer-principal",
          "User:bob"], "--renewer-principal cannot be used with --renew"),
        (["--bootstrap-server", NOWHERE, "--expire", "--hmac", "AAAA", "--renew-time-period",
          "5"], "--renew-time-period cannot be used with --expire"),
        (["--bootstrap-server", NOWHERE, "--create", "--bogus"], "No such option '--bogus'"),
        (["--bootstrap-server", "localhost", "--describe"],
         "bootstrap server 'localhost' is not host:port"),
        (["--bootstrap-server", "h:1,h:x", "--describe"], "bootstrap server 'h:x' is not host:port"),
    ],
)
def test_usage_errors_exit_2_with_a_message(args: list[str], message: str) -> None:
    code, output = run(*args)
    assert code == 2, output
    assert message in output
    assert "Traceback" not in output


def test_missing_command_config_file_is_reported_without_traceback(tmp_path: Path) -> None:
    code, output = run("--bootstrap-server", NOWHERE, "--describe",
                       "--command-config", str(tmp_path / "missing.properties"))
    assert code == 1
    assert (f"--command-config: {tmp_path / 'missing.properties'}: cannot read the file: "
            "No such file or directory") in output
    assert "Traceback" not in output


def test_invalid_command_config_names_the_key_not_the_password(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="a" password="hunter2";\n'
    )
    code, output = run("--bootstrap-server", NOWHERE, "--describe", "--command-config", str(path))
    assert code == 1
    assert f"{path}: sasl.mechanism: 'PLAIN' is not one of SCRAM-SHA-256, SCRAM-SHA-512" in output
    assert "hunter2" not in output


def test_unreachable_broker_names_the_address_and_the_timeout() -> None:
    code, output = run("--bootstrap-server", NOWHERE, "--describe", "--timeout", "0.5")
    assert code == 1
    assert output.startswith("Error: could not connect to any bootstrap server within 0.5s")
    assert "127.0.0.1:1 (connection refused)" in output
    assert len(output.strip().splitlines()) == 1


def test_help_lists_every_kafka_option() -> None:
    code, output = run("--help")
    assert code == 0
    for option in ("--bootstrap-server", "--command-config", "--create", "--renew", "--expire",
                   "--describe", "--renewer-principal", "--owner-principal",
                   "--max-life-time-period", "--hmac", "--renew-time-period",
                   "--expiry-time-period", "--output", "--timeout"):
        assert option in output


# --- rendering (pure) ------------------------------------------------------------------


def token(token_id: str, renewers: tuple[KafkaPrincipal, ...] = ()) -> TokenDescription:
    return TokenDescription(
        token_id=token_id,
        hmac=b"\x01\x02\x03",
        owner=KafkaPrincipal.user("alice"),
        requester=KafkaPrincipal.user("admin"),
        renewers=renewers,
        issue_ms=1_700_000_000_000,
        expiry_ms=1_700_086_400_000,
        max_ms=1_700_604_800_000,
    )


def test_dates_are_utc_to_the_second() -> None:
    assert format_date(1_700_000_000_123) == "2023-11-14T22:13:20Z"


def test_token_table_has_kafkas_columns_and_one_row_per_token() -> None:
    table = token_table([token("t1", (KafkaPrincipal.user("bob"),)), token("t2")]).splitlines()
    assert table[0].split() == ["TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS",
                                "ISSUEDATE", "EXPIRYDATE", "MAXDATE"]
    assert table[1].split() == ["t1", "AQID", "User:alice", "User:admin", "[User:bob]",
                                "2023-11-14T22:13:20Z", "2023-11-15T22:13:20Z",
                                "2023-11-21T22:13:20Z"]
    assert table[2].split()[4] == "[]"
    # columns line up: every row starts its HMAC cell at the same offset
    assert len({row.index("AQID") for row in table[1:]}) == 1


def test_token_json_round_trips() -> None:
    data = json.loads(json.dumps(token("t1").to_json()))
    assert data["hmac"] == "AQID"
    assert data["owner"] == "User:alice"
    assert data["expiry_timestamp_ms"] == 1_700_086_400_000
