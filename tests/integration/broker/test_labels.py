"""Token labels on 3 real brokers: create, describe and revoke by label, and refusals.

- 200 labelled tokens (four jobs, two teams); ``--describe --label`` returns exactly the
  matching tokens on every broker (several labels: all must match), with their labels in
  the table and in ``--output json``;
- ``--expire --label job=x --wait-all-brokers`` through a non-controller: the count and
  the ids in the answer, 0 logins possible with those tokens on any broker (our client and
  librdkafka's, through confluent-kafka), the other tokens still log in; the revocation
  is audited with reason ``revoked_by_label``, the selector and the labels;
- a dry run by label lists and changes nothing; a principal who may not revoke one of the
  selected tokens is refused and nothing changes;
- bad labels (too many, key too long or of other characters, value too long or empty,
  a key given twice) are refused with INVALID_REQUEST naming the label, through the
  controller and through a non-controller, and ZooKeeper holds no new token znode;
- renewal keeps the labels; the labels survive in the znode JSON next to Kafka's fields.
"""

from __future__ import annotations

import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.delegation_token import delegation_token
from tests.support.local_cluster import ClusterFactory, admin_client, wait_served_everywhere
from tests.support.tokens import token_client_config, token_logs_in
from tests.support.wait import poll_until
from tokensvc.admin import AdminClient, AdminError, TokenDescription
from tokensvc.admin.connection import BrokerConnection
from tokensvc.client_config import ClientConfig, load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.protocol import decode_response
from zk.client import open_client

pytestmark = pytest.mark.heavy(minutes=3)  # 200 labelled tokens on 3 brokers
JOBS = ("etl-nightly", "ingest", "compact", "report")


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(brokers=3, users=[("mallory", "SCRAM-SHA-512", "mallory-pw")])


def _admin(cluster: LocalCluster, address: str | None = None,
           config: ClientConfig | None = None) -> AdminClient:
    return admin_client(cluster, address=address, config=config, timeout_s=20)


def _addresses(cluster: LocalCluster) -> list[str]:
    return [b["listeners"]["SASL_PLAINTEXT"] for b in cluster.info["brokers"]]


def _controller_and_other(cluster: LocalCluster) -> tuple[str, str]:
    with _admin(cluster) as admin:
        controller = admin.describe_cluster().controller_id
    by_id = {b["id"]: b["listeners"]["SASL_PLAINTEXT"] for b in cluster.info["brokers"]}
    other = next(address for broker_id, address in by_id.items() if broker_id != controller)
    return by_id[controller], other


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(delegation_token, list(args))
    return result.exit_code, result.output


def _logs_in(address: str, token: TokenDescription) -> bool:
    return token_logs_in(address, token, "labels-test")


def _librdkafka_logs_in(address: str, token: TokenDescription) -> bool:
    """A token login by librdkafka (confluent-kafka, default settings): it cannot send
    SCRAM extensions, so it logs in with the token id as user name (implicit token login).
    True once it reads metadata; False once it reports an authentication failure."""
    from confluent_kafka import KafkaError as RdKafkaError
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient as ConfluentAdmin

    errors: list = []
    admin = ConfluentAdmin({
        "bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": token.token_id,
        "sasl.password": token.hmac_b64, "log_level": 0, "error_cb": errors.append,
    })
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(KafkaException):  # raised while refused
                if admin.list_topics(timeout=1).brokers:
                    return True
            admin.poll(0.2)  # serves error_cb
            if any(e.code() == RdKafkaError._AUTHENTICATION for e in errors):
                return False
        raise AssertionError(f"librdkafka neither logged in nor was refused: {errors}")
    finally:
        del admin


def _create_labelled(cluster: LocalCluster, count: int) -> dict[str, TokenDescription]:
    """``count`` tokens: job cycles through JOBS, team alternates payments/search, and every
    fifth token also has tier=gold."""

    def labels_of(i: int) -> dict[str, str]:
        labels = {"job": JOBS[i % len(JOBS)], "team": "payments" if i % 2 == 0 else "search"}
        if i % 5 == 0:
            labels["tier"] = "gold"
        return labels

    def batch(indexes: list[int]) -> list[TokenDescription]:
        with _admin(cluster) as admin:
            return [admin.create_token(owner="User:svc-etl", labels=labels_of(i))
                    for i in indexes]

    workers = 8
    with ThreadPoolExecutor(workers) as pool:
        parts = pool.map(batch, [list(range(w, count, workers)) for w in range(workers)])
        tokens = [t for part in parts for t in part]
    return {t.token_id: t for t in tokens}


def _described_ids(cluster: LocalCluster, address: str, owner: str) -> set[str]:
    """The ids of ``owner``'s tokens as the broker at ``address`` describes them."""
    with _admin(cluster, address) as admin:
        return {t.token_id for t in admin.describe_tokens(owners=[owner])}


def _audit_events(cluster: LocalCluster) -> list[dict]:
    events = []
    for path in Path(cluster.info["audit_dir"]).rglob("*.jsonl"):
        events.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return events


def _token_znodes(cluster: LocalCluster) -> set[str]:
    zk = open_client(cluster.zk_settings())
    try:
        return set(zk.get_children("/delegation_token/tokens"))
    finally:
        zk.stop()
        zk.close()


def test_describe_and_revoke_by_label_over_200_tokens_on_every_broker(
    cluster: LocalCluster,
) -> None:
    tokens = _create_labelled(cluster, 200)
    assert len(tokens) == 200
    assert all(dict(t.labels)["job"] in JOBS for t in tokens.values())
    properties = cluster.info["admin"]["properties"]
    # Created through whichever broker each client reached: every broker describes all
    # 200 once it has followed the creates (read-your-writes holds only on the broker
    # that answered), and the revocation below selects from its own broker's cache.
    for address in _addresses(cluster):
        assert poll_until(lambda a=address: _described_ids(cluster, a, "User:svc-etl")
                          >= set(tokens), timeout=20, interval=0.2), address

    def matching(**selector: str) -> set[str]:
        return {t.token_id for t in tokens.values() if selector.items() <= dict(t.labels).items()}

    selectors = [{"job": "etl-nightly"}, {"job": "ingest", "team": "payments"},
                 {"tier": "gold", "team": "search"}, {"job": "nobody"}]
    for address in _addresses(cluster):
        for selector in selectors:
            label_args = [a for k, v in selector.items() for a in ("--label", f"{k}={v}")]
            code, output = _cli("--bootstrap-server", address, "--command-config", properties,
                                "--describe", *label_args, "--output", "json")
            assert code == 0, output
            shown = json.loads(output)["tokens"]
            assert {t["token_id"] for t in shown} == matching(**selector), (address, selector)
            assert all(selector.items() <= t["labels"].items() for t in shown)
        # The table has a LABELS column with each token's labels.
        code, output = _cli("--bootstrap-server", address, "--command-config", properties,
                            "--describe", "--label", "job=compact")
        assert code == 0, output
        assert "LABELS" in output.splitlines()[2]
        assert output.count("job=compact") == len(matching(job="compact")) == 50

    # A dry run lists the job's tokens and changes nothing.
    _controller, other = _controller_and_other(cluster)
    code, output = _cli("--bootstrap-server", other, "--command-config", properties,
                        "--expire", "--label", "job=report", "--dry-run", "--output", "json")
    assert code == 0, output
    assert json.loads(output)["count"] == 50 and json.loads(output)["dry_run"] is True
    assert len(tokens) == len(_token_znodes(cluster) & set(tokens))

    # Revoke one job through a non-controller, waiting for every broker.
    started = time.monotonic()
    code, output = _cli("--bootstrap-server", other, "--command-config", properties,
                        "--expire", "--label", "job=etl-nightly", "--wait-all-brokers",
                        "--output", "json")
    took = time.monotonic() - started
    assert code == 0, output
    answer = json.loads(output)
    revoked_ids = matching(job="etl-nightly")
    assert answer["count"] == 50 == len(revoked_ids)
    assert {r["token_id"] for r in answer["revoked"]} == revoked_ids
    assert answer["created_after"] == [] and len(answer["brokers"]) == 3
    revoked = [tokens[i] for i in sorted(revoked_ids)]
    kept = [t for t in tokens.values() if t.token_id not in revoked_ids]
    for address in _addresses(cluster):
        assert not any(_logs_in(address, t) for t in revoked)
        assert all(_logs_in(address, t) for t in kept[::10])
        assert not _librdkafka_logs_in(address, revoked[0])
        assert _librdkafka_logs_in(address, kept[0])
        with _admin(cluster, address) as admin:
            assert admin.describe_tokens(labels={"job": "etl-nightly"}) == []
            assert len(admin.describe_tokens(labels={"job": "ingest"})) == 50
    assert not (_token_znodes(cluster) & revoked_ids)
    print(f"revoked 50 of 200 labelled tokens by label, refused on 3 brokers, in {took:.2f} s")

    def audited() -> bool:
        found = [e for e in _audit_events(cluster)
                 if e.get("action") == "revoke" and e.get("reason") == "revoked_by_label"
                 and e.get("outcome") == "success"]
        return ({e["token_id"] for e in found} >= revoked_ids
                and all(e["selector"] == {"job": "etl-nightly"} for e in found)
                and all(e["labels"]["job"] == "etl-nightly" for e in found))

    assert poll_until(audited, timeout=5.0)


def test_a_principal_who_may_not_revoke_a_selected_token_is_refused_and_nothing_changes(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    other = _controller_and_other(cluster)[1]
    # Created through the broker mallory asks (its revocation selects from that broker's
    # cache, read-your-writes), and served by every broker before she asks: her refusal is
    # then what keeps it logging in everywhere.
    with _admin(cluster, other) as admin:
        victim = admin.create_token(owner="User:frank", labels={"job": "payroll"})
    wait_served_everywhere(cluster, token_client_config(victim))
    mallory = tmp_path / "mallory.properties"
    mallory.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="mallory" password="mallory-pw";\n')
    code, output = _cli("--bootstrap-server", other,
                        "--command-config", str(mallory), "--expire", "--label", "job=payroll")
    assert code == 1 and "DELEGATION_TOKEN_AUTHORIZATION_FAILED" in output, output
    assert all(_logs_in(a, victim) for a in _addresses(cluster))


BAD_LABELS = [
    ({f"k{i}": "v" for i in range(17)}, "17 labels given, at most 16"),
    ({"k" * 64: "v"}, "is not 1-63 characters"),
    ({"Job": "x"}, "'Job' is not 1-63 characters of [a-z0-9._/-]"),
    ({"job name": "x"}, "'job name' is not"),
    ({"job": ""}, "label 'job' has an empty value"),
    ({"job": "x" * 256}, "label 'job' has a value of 256 characters"),
    ({"job": "line\nbreak"}, "label 'job' has a control character"),
    ([("job", "a"), ("job", "b")], "label 'job' is given twice"),
]


@pytest.mark.parametrize("labels,message", BAD_LABELS,
                         ids=["too-many", "key-too-long", "key-uppercase", "key-space",
                              "empty-value", "value-too-long", "control-char", "twice"])
def test_bad_labels_are_refused_naming_the_label_and_nothing_is_written(
    cluster: LocalCluster, labels: object, message: str
) -> None:
    before = _token_znodes(cluster)
    for address in _controller_and_other(cluster):
        with _admin(cluster, address) as admin, pytest.raises(AdminError) as refused:
            admin.create_token(labels=labels)
        assert refused.value.error == Errors.INVALID_REQUEST
        assert message in str(refused.value), str(refused.value)
    assert _token_znodes(cluster) == before
    code, output = _cli("--bootstrap-server", cluster.info["bootstrap_servers"],
                        "--command-config", cluster.info["admin"]["properties"], "--create",
                        *[a for k, v in (labels.items() if isinstance(labels, dict) else labels)
                          for a in ("--label", f"{k}={v}")])
    assert code == 1 and "invalid" in output.lower() and message.split("'")[0] in output, output
    assert _token_znodes(cluster) == before


def test_a_bad_selector_is_refused_and_a_label_without_equals_is_a_usage_error(
    cluster: LocalCluster,
) -> None:
    properties = cluster.info["admin"]["properties"]
    for action in ("--describe", "--expire"):
        code, output = _cli("--bootstrap-server", cluster.info["bootstrap_servers"],
                            "--command-config", properties, action, "--label", "Job=x")
        assert code == 1 and "invalid" in output.lower() and "'Job'" in output, output
        code, output = _cli("--bootstrap-server", cluster.info["bootstrap_servers"],
                            "--command-config", properties, action, "--label", "job")
        assert code == 2 and "use key=value" in output, output


def test_renewal_keeps_the_labels_and_the_znode_carries_them_next_to_kafkas_fields(
    cluster: LocalCluster,
) -> None:
    # Through a non-controller: the create is forwarded, and the answering broker's cache
    # gets the committed token -- labels included -- from the Envelope before it answers.
    with _admin(cluster, _controller_and_other(cluster)[1]) as admin:
        token = admin.create_token(labels={"job": "renewed", "team": "payments"})
        (shown,) = admin.describe_tokens(labels={"job": "renewed"})
        assert shown.labels == token.labels and shown.token_id == token.token_id
        unlabelled = admin.create_token()
        assert token.labels == (("job", "renewed"), ("team", "payments"))
        admin.renew_token(token.hmac, 60_000)
        (shown,) = admin.describe_tokens(labels={"job": "renewed"})
        assert shown.labels == token.labels and shown.expiry_ms != token.expiry_ms
    zk = open_client(cluster.zk_settings())
    try:
        data, _ = zk.get(f"/delegation_token/tokens/{token.token_id}")
        plain, _ = zk.get(f"/delegation_token/tokens/{unlabelled.token_id}")
    finally:
        zk.stop()
        zk.close()
    znode = json.loads(data)
    assert znode["labels"] == {"job": "renewed", "team": "payments"}
    assert znode["version"] == 3 and znode["tokenId"] == token.token_id
    assert b"labels" not in plain
    print(f"znode bytes: {len(data)} with 2 labels, {len(plain)} without")


def _describe_schemas(types: object, version: int) -> object:
    """DescribeDelegationToken's response (Kafka's published field list) in a client
    library's own protocol types (kafka-python's and aiokafka's share these names)."""
    flexible = version >= 2
    string = types.CompactString("utf-8") if flexible else types.String("utf-8")
    data = types.CompactBytes if flexible else types.Bytes
    array = types.CompactArray if flexible else types.Array
    tags = (("tags", types.TaggedFields),) if flexible else ()
    requester = ((("requester_type", string), ("requester_name", string))
                 if version >= 3 else ())
    return types.Schema(
        ("error_code", types.Int16),
        ("tokens", array(
            ("principal_type", string), ("principal_name", string), *requester,
            ("issue_timestamp", types.Int64), ("expiry_timestamp", types.Int64),
            ("max_timestamp", types.Int64), ("token_id", string), ("hmac", data),
            ("renewers", array(("principal_type", string), ("principal_name", string), *tags)),
            *tags)),
        ("throttle_time_ms", types.Int32),
        *tags,
    )


def test_kafka_python_and_aiokafka_parse_every_labelled_token_of_a_describe(
    cluster: LocalCluster,
) -> None:
    """The raw DescribeDelegationToken answers of a broker holding tokens with the most
    labels allowed (16 labels of 255 characters), read by kafka-python's and aiokafka's
    own protocol decoders, for v1 (Kafka's bytes), v2 and v3 -- with the labels tag asked
    for (their decoders skip the unknown tag) and without it (Kafka's bytes). librdkafka
    (confluent-kafka) has no DescribeDelegationToken API: its side of labelled tokens is
    the token login, tested above."""
    import io
    import warnings

    import aiokafka.protocol.types as aiokafka_types

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.protocol.old.types as kafka_python_types

    widest = {f"key{i:02d}": chr(0x4E00 + i) * 255 for i in range(16)}
    address = _addresses(cluster)[0]
    # Created through the broker described below: read-your-writes.
    with _admin(cluster, address) as admin:
        made = {admin.create_token(owner="User:wide", labels=widest).token_id for _ in range(3)}
        made.add(admin.create_token(owner="User:wide").token_id)
    conn = BrokerConnection(address, load_client_config(cluster.info["admin"]["properties"]),
                            client_id="labels-parse-test")
    conn.open(time.monotonic() + 10)
    try:
        owners = [{"PrincipalType": "User", "PrincipalName": "wide"}]
        for version in (1, 2, 3):
            for include in (False, True):
                body = {"Owners": owners, "IncludeLabels": include}
                _, payload = conn._round_trip(41, version, body, time.monotonic() + 10)
                ours = decode_response(41, version, payload)[1]
                assert {t["TokenId"] for t in ours["Tokens"]} == made
                labelled = [t for t in ours["Tokens"] if t.get("Labels")]
                assert len(labelled) == (3 if include and version >= 2 else 0)
                # Skip the response header: correlation id, and tags from v2 (flexible).
                start = 4 + (1 if version >= 2 else 0)
                for name, types in (("kafka-python", kafka_python_types),
                                    ("aiokafka", aiokafka_types)):
                    stream = io.BytesIO(payload[start:])
                    decoded = _describe_schemas(types, version).decode(stream)
                    assert stream.read() == b"", (name, version, include)
                    error_code, tokens = decoded[0], decoded[1]
                    assert error_code == 0
                    token_ids = {t[7 if version >= 3 else 5] for t in tokens}
                    assert token_ids == made, (name, version, include)
    finally:
        conn.close()
