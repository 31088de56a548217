"""kafka-delegation-token end to end against a real two-broker LocalCluster.

One cluster for the module; the CLI runs in-process through click's CliRunner (real
sockets) and once as the installed console script. Token changes reach the second
broker through ZooKeeper, so reads through a new connection poll briefly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from click.testing import CliRunner

from cli.delegation_token import delegation_token, format_date
from tests.support.wait import retry
from tokensvc.admin import AdminClient, AdminError
from tokensvc.client_config import ClientConfig, load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.scram.formatter import ScramMechanism

T = TypeVar("T")
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
HOUR_MS = 3_600_000


pytestmark = pytest.mark.cluster(brokers=2)


@pytest.fixture(scope="module")
def admin_props(cluster: LocalCluster) -> str:
    return cluster.info["admin"]["properties"]


def cli(cluster: LocalCluster, props: str, *args: str,
        bootstrap: str | None = None) -> tuple[int, str]:
    """The command's exit code and output, run against ``bootstrap`` (default: every
    broker of the cluster, of which its client may reach any)."""
    result = CliRunner().invoke(
        delegation_token,
        ["--bootstrap-server", bootstrap or cluster.info["bootstrap_servers"],
         "--command-config", props, "--timeout", "10", *args],
    )
    return result.exit_code, result.output


def cli_json(cluster: LocalCluster, props: str, *args: str,
             bootstrap: str | None = None) -> dict:
    code, output = cli(cluster, props, *args, "--output", "json", bootstrap=bootstrap)
    assert code == 0, output
    return json.loads(output)


def eventually(check: Callable[[], T], timeout: float = 10.0) -> T:
    """``check()``'s value once it stops raising an AdminError or AssertionError; its
    last error after ``timeout``."""
    return retry(check, timeout, errors=(AdminError, AssertionError))


def token_properties(directory: Path, token: dict) -> str:
    path = directory / f"token-{token['token_id']}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        f'sasl.jaas.config={SCRAM} required username="{token["token_id"]}" '
        f'password="{token["hmac"]}" tokenauth=true;\n',
        encoding="utf-8",
    )
    return str(path)


def token_config(token: dict) -> ClientConfig:
    return ClientConfig(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism=ScramMechanism.SCRAM_SHA_256,
        username=token["token_id"], password=token["hmac"], token_auth=True,
    )


def described(cluster: LocalCluster, props: str, token_id: str, *args: str) -> dict:
    tokens = cli_json(cluster, props, "--describe", *args)["tokens"]
    matching = [t for t in tokens if t["token_id"] == token_id]
    assert len(matching) == 1, tokens
    return matching[0]


def test_token_life_cycle_through_the_cli(
    cluster: LocalCluster, admin_props: str, tmp_path: Path
) -> None:
    # create, with renewers and a max lifetime
    code, output = cli(cluster, admin_props, "--create", "--renewer-principal", "User:bob",
                       "--renewer-principal", "User:carol", "--max-life-time-period",
                       str(2 * HOUR_MS))
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0].startswith("Created delegation token with tokenId : ")
    token_id = lines[0].rsplit(" ", 1)[1]
    header = lines[2].split()
    assert header == ["TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE",
                      "EXPIRYDATE", "MAXDATE"]
    row = lines[3].split("  ")
    assert row[0] == token_id
    assert "[User:bob, User:carol]" in lines[3]

    token = eventually(lambda: described(cluster, admin_props, token_id))
    assert token["owner"] == token["requester"] == "User:admin"
    assert token["renewers"] == ["User:bob", "User:carol"]
    assert token["max_timestamp_ms"] - token["issue_timestamp_ms"] == 2 * HOUR_MS
    assert token["hmac"] in output

    # the new token logs in (SCRAM with tokenauth=true) on every broker
    for address in cluster.info["bootstrap_servers"].split(","):
        with AdminClient(address, token_config(token), timeout_s=10) as session:
            brokers = eventually(lambda s=session: s.describe_cluster()).brokers
            assert len(brokers) == 2

    # describe by owner
    assert described(cluster, admin_props, token_id, "--owner-principal", "User:admin")
    assert cli_json(cluster, admin_props, "--describe", "--owner-principal",
                    "User:nobody")["tokens"] == []
    code, output = cli(cluster, admin_props, "--describe", "--owner-principal", "User:admin")
    assert code == 0 and "Total number of tokens : " in output and token_id in output

    # renew: the new expiry is shown and described
    code, output = cli(cluster, admin_props, "--renew", "--hmac", token["hmac"],
                       "--renew-time-period", str(HOUR_MS // 2))
    assert code == 0, output
    assert output.startswith("Completed renew operation. New expiry date : ")
    renewed = cli_json(cluster, admin_props, "--renew", "--hmac", token["hmac"],
                       "--renew-time-period", str(HOUR_MS // 2))
    assert renewed["operation"] == "renew"
    assert renewed["expiry_date"] == format_date(renewed["expiry_timestamp_ms"])
    assert renewed["expiry_timestamp_ms"] < token["expiry_timestamp_ms"]
    eventually(lambda: _expiry_is(cluster, admin_props, token_id, renewed["expiry_timestamp_ms"]))

    # token requests on a token-authenticated session are refused
    code, output = cli(cluster, token_properties(tmp_path, token), "--describe")
    assert code == 1
    assert output.strip() == (
        "Error: describe tokens: token requests are not allowed on a token-authenticated, "
        "PLAINTEXT or one-way SSL connection"
    )

    # expire now; afterwards the token is gone and its login refused on every broker
    code, output = cli(cluster, admin_props, "--expire", "--hmac", token["hmac"],
                       "--expiry-time-period", "-1")
    assert code == 0, output
    assert output.startswith("Completed expire operation. New expiry date : ")
    for address in cluster.info["bootstrap_servers"].split(","):
        error = eventually(lambda a=address: _login_failure(a, token))
        assert error.error is Errors.SASL_AUTHENTICATION_FAILED
    code, output = cli(cluster, admin_props, "--renew", "--hmac", token["hmac"])
    assert (code, output.strip()) == (1, "Error: renew token: token not found")


def _expiry_is(cluster: LocalCluster, props: str, token_id: str, expiry: int) -> None:
    assert described(cluster, props, token_id)["expiry_timestamp_ms"] == expiry


def _login_failure(address: str, token: dict) -> AdminError:
    try:
        AdminClient(address, token_config(token), timeout_s=5).describe_cluster()
    except AdminError as exc:
        return exc
    raise AssertionError("token login still accepted")


def test_create_for_another_owner_and_json_output(cluster: LocalCluster, admin_props: str) -> None:
    # One broker for the create and the expire: the expire finds the token by its HMAC in
    # the answering broker's cache, which has it at once only where it was created.
    broker = cluster.info["bootstrap_servers"].split(",")[0]
    token = cli_json(cluster, admin_props, "--create", "--owner-principal", "User:alice",
                     bootstrap=broker)
    assert token["owner"] == "User:alice"
    assert token["requester"] == "User:admin"
    assert token["renewers"] == []
    assert len(token["token_id"]) == 22
    assert set(token) == {"token_id", "hmac", "owner", "requester", "renewers",
                          "issue_timestamp_ms", "expiry_timestamp_ms", "max_timestamp_ms",
                          "labels"}
    assert token["labels"] == {}
    expired = cli_json(cluster, admin_props, "--expire", "--hmac", token["hmac"],
                       "--expiry-time-period", str(HOUR_MS), bootstrap=broker)
    assert expired["operation"] == "expire"
    assert expired["expiry_timestamp_ms"] <= token["issue_timestamp_ms"] + HOUR_MS + 60_000


def test_renew_by_a_user_who_is_not_owner_or_renewer_is_refused(
    cluster: LocalCluster, admin_props: str, tmp_path: Path
) -> None:
    token = cli_json(cluster, admin_props, "--create")
    admin_config = load_client_config(admin_props)
    with AdminClient(cluster.info["bootstrap_servers"], admin_config) as admin:
        admin.upsert_user_scram_credential("mallory", "SCRAM-SHA-256", "mallory-pw")
    props = tmp_path / "mallory.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        f'sasl.jaas.config={SCRAM} required username="mallory" password="mallory-pw";\n'
    )

    def refused() -> str:
        code, output = cli(cluster, str(props), "--renew", "--hmac", token["hmac"])
        assert code == 1 and "not an owner or renewer" in output, output
        return output

    assert eventually(refused).strip() == (
        "Error: renew token: not an owner or renewer of this token"
    )


def test_installed_console_script_reports_errors_in_one_line(
    cluster: LocalCluster, admin_props: str
) -> None:
    script = Path(sys.executable).with_name("kafka-delegation-token")
    ok = subprocess.run(
        [str(script), "--bootstrap-server", cluster.info["bootstrap_servers"],
         "--command-config", admin_props, "--describe", "--output", "json"],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert isinstance(json.loads(ok.stdout)["tokens"], list)
    bad = subprocess.run(
        [str(script), "--bootstrap-server", cluster.info["bootstrap_servers"],
         "--command-config", admin_props, "--renew", "--hmac", "AAAA"],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr == "Error: renew token: token not found\n"
