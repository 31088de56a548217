"""tokensvc's token tools against a real Apache Kafka 3.9 broker (ZooKeeper mode): the
``kafka-delegation-token`` command and the Python AdminClient create, renew, expire and
describe tokens through the Kafka broker, which writes them to ZooKeeper and validates
them itself. What only tokensvc brokers do (labels, revocation without the HMAC) fails
against Kafka with a clear error and leaves no token behind.

The command runs in-process through click's CliRunner with a ``--command-config`` file,
as an operator would run it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.delegation_token import delegation_token
from tests.support.kafka_under_test import KafkaUnderTest as KafkaBroker
from tokensvc.admin.client import AdminClient
from tokensvc.admin.results import AdminError
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal

DAY_MS = 24 * 3600 * 1000  # Kafka's default delegation.token.expiry.time.ms
WEEK_MS = 7 * DAY_MS  # Kafka's default delegation.token.max.lifetime.ms
SLACK_MS = 60_000  # the broker's clock against this process's, and the time a call takes


@pytest.fixture(scope="module")
def command_config(kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kafka-tools") / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{kafka_broker.admin_user}" password="{kafka_broker.admin_password}";\n')
    return path


def cli_json(broker: KafkaBroker, config: Path, *args: str) -> dict:
    result = CliRunner().invoke(delegation_token, [
        "--bootstrap-server", broker.bootstrap, "--command-config", str(config),
        "--timeout", "30", *args, "--output", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def now_ms() -> int:
    return int(time.time() * 1000)


def test_admin_client_creates_renews_expires_and_describes_tokens_on_kafka(
    kafka_broker: KafkaBroker, kafka_admin: AdminClient
) -> None:
    before = now_ms()
    token = kafka_admin.create_token(renewers=["User:renewer"], max_lifetime_ms=2 * DAY_MS)

    admin = KafkaPrincipal("User", kafka_broker.admin_user)
    assert len(token.token_id) == 22 and len(token.hmac) == 64
    assert token.owner == admin and token.requester == admin
    assert token.renewers == (KafkaPrincipal("User", "renewer"),)
    assert before - SLACK_MS <= token.issue_ms <= now_ms() + SLACK_MS
    assert token.max_ms == token.issue_ms + 2 * DAY_MS
    assert token.expiry_ms == token.issue_ms + DAY_MS
    described = kafka_admin.find_token(token.hmac)
    assert described is not None
    assert (described.token_id, described.owner, described.renewers, described.expiry_ms,
            described.max_ms) == (token.token_id, token.owner, token.renewers,
                                  token.expiry_ms, token.max_ms)
    assert described.labels == ()

    renewed = kafka_admin.renew_token(token.hmac, 3 * DAY_MS)
    assert renewed == token.max_ms  # the renewal is capped at the max lifetime
    renewed = kafka_admin.renew_token(token.hmac, 3600_000)
    assert now_ms() + 3600_000 - SLACK_MS <= renewed <= now_ms() + 3600_000 + SLACK_MS
    assert kafka_admin.find_token(token.hmac).expiry_ms == renewed

    expiry = kafka_admin.expire_token(token.hmac, 600_000)
    assert now_ms() + 600_000 - SLACK_MS <= expiry <= now_ms() + 600_000 + SLACK_MS
    assert kafka_admin.find_token(token.hmac).expiry_ms == expiry

    kafka_admin.expire_token(token.hmac, -1)
    assert kafka_admin.find_token(token.hmac) is None
    with pytest.raises(AdminError) as gone:
        kafka_admin.renew_token(token.hmac)
    assert gone.value.error == Errors.DELEGATION_TOKEN_NOT_FOUND


def test_admin_client_describes_by_owner_on_kafka(kafka_broker: KafkaBroker,
                                                  kafka_admin: AdminClient) -> None:
    token = kafka_admin.create_token()

    mine = kafka_admin.describe_tokens(owners=[f"User:{kafka_broker.admin_user}"])
    others = kafka_admin.describe_tokens(owners=["User:nobody"])

    assert token.token_id in {t.token_id for t in mine}
    assert others == []
    kafka_admin.expire_token(token.hmac, -1)


def test_tokensvc_extensions_fail_clearly_on_kafka_and_leave_no_token(
    kafka_admin: AdminClient
) -> None:
    before = {t.token_id for t in kafka_admin.describe_tokens()}

    with pytest.raises(AdminError) as labelled:
        kafka_admin.create_token(labels={"job": "etl"})
    with pytest.raises(AdminError) as revoke:
        kafka_admin.revoke_tokens(owner="User:nobody")

    assert labelled.value.error == Errors.UNSUPPORTED_VERSION
    assert "ignored the labels" in str(labelled.value)
    assert revoke.value.error == Errors.UNSUPPORTED_VERSION
    assert "--hmac" in str(revoke.value)
    assert {t.token_id for t in kafka_admin.describe_tokens()} == before


def test_kafka_delegation_token_command_manages_a_token_on_kafka(
    kafka_broker: KafkaBroker, command_config: Path, kafka_admin: AdminClient
) -> None:
    created = cli_json(kafka_broker, command_config, "--create",
                       "--renewer-principal", "User:renewer",
                       "--max-life-time-period", str(WEEK_MS), "--wait-all-brokers")
    token_id, hmac = created["token_id"], created["hmac"]
    assert created["owner"] == f"User:{kafka_broker.admin_user}"
    assert created["renewers"] == ["User:renewer"]

    listed = cli_json(kafka_broker, command_config, "--describe")["tokens"]
    assert [t["token_id"] for t in listed if t["hmac"] == hmac] == [token_id]

    renewed = cli_json(kafka_broker, command_config, "--renew", "--hmac", hmac,
                       "--renew-time-period", "7200000")
    assert renewed["operation"] == "renew"
    assert abs(renewed["expiry_timestamp_ms"] - (now_ms() + 7200_000)) <= SLACK_MS
    described = next(t for t in kafka_admin.describe_tokens() if t.token_id == token_id)
    assert described.expiry_ms == renewed["expiry_timestamp_ms"]

    expired = cli_json(kafka_broker, command_config, "--expire", "--hmac", hmac,
                       "--expiry-time-period", "-1", "--wait-all-brokers")
    assert expired["operation"] == "expire"
    listed = cli_json(kafka_broker, command_config, "--describe")["tokens"]
    assert token_id not in {t["token_id"] for t in listed}
