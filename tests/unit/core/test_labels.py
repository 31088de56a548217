"""Token labels without I/O: the rules, the znode field, the wire tags, the cache's label
index, the snapshot format, the describe encoder, audit events and the watch's label
directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tokensvc.audit.events import build_event, token_event
from tokensvc.broker.context import CommittedToken, committed_token_fields, committed_token_of
from tokensvc.broker.describe import _Encoder
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import FakeClock
from tokensvc.core.errors import Errors
from tokensvc.core.keys import MasterKeys
from tokensvc.core.labels import (
    MAX_LABELS,
    LabelError,
    format_labels,
    matches,
    parse_label,
    validate,
)
from tokensvc.core.manager import TokenManager
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import DelegationToken, TokenInformation
from tokensvc.protocol import (
    ApiKey,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tokensvc.snapshot.format import decode, encode
from zk.layout import LayoutError, decode_token, decode_tokens, encode_token

ALICE = KafkaPrincipal("User", "alice")


def _info(token_id: str, labels: object = ()) -> TokenInformation:
    return TokenInformation(token_id, ALICE, ALICE, (), 1, 2, 3, "", validate(labels))


# --- the rules ------------------------------------------------------------------------


def test_a_valid_set_is_sorted_by_key_and_shared() -> None:
    first = validate({"team": "payments", "job": "etl-nightly"})
    again = validate([("job", "etl-nightly"), ("team", "payments")])
    assert first == (("job", "etl-nightly"), ("team", "payments"))
    assert first is again and first[0] is again[0]


@pytest.mark.parametrize("labels,message", [
    ({f"k{i}": "v" for i in range(MAX_LABELS + 1)}, "17 labels given, at most 16"),
    ({"": "v"}, "label key '' is not 1-63"),
    ({"k" * 64: "v"}, "is not 1-63 characters"),
    ({"Job": "v"}, "'Job' is not"),
    ({"job:x": "v"}, "'job:x' is not"),
    ({"job": ""}, "label 'job' has an empty value"),
    ({"job": "v" * 256}, "a value of 256 characters (at most 255)"),
    ({"job": "a\x1bb"}, "control character"),
    ({"job": "a\u0085b"}, "control character"),
    ({"job": "\ud800"}, "not UTF-8 text"),
    ([("job", "a"), ("job", "b")], "label 'job' is given twice"),
    ([("job",)], "not a (key, value) pair"),
])
def test_a_broken_rule_is_invalid_request_naming_the_label(labels, message) -> None:
    with pytest.raises(LabelError) as refused:
        validate(labels)
    assert refused.value.error == Errors.INVALID_REQUEST
    assert message in refused.value.message


def test_limits_are_inclusive() -> None:
    labels = validate({f"k{i:02d}": "é" * 255 for i in range(MAX_LABELS)})
    assert len(labels) == MAX_LABELS
    assert validate({"a" * 63: "v"})[0][0] == "a" * 63
    assert validate({"team/sub.key_x-1": "v"})


def test_a_selector_matches_when_every_label_is_on_the_token() -> None:
    token = validate({"job": "etl", "team": "payments"})
    assert matches(token, ())
    assert matches(token, validate({"job": "etl"}))
    assert matches(token, validate({"job": "etl", "team": "payments"}))
    assert not matches(token, validate({"job": "etl", "team": "search"}))
    assert not matches((), validate({"job": "etl"}))


def test_text_form_parses_and_quotes_what_could_forge_a_column() -> None:
    assert parse_label("job=a=b") == ("job", "a=b")
    with pytest.raises(ValueError, match="use key=value"):
        parse_label("job")
    assert format_labels(validate({"job": "etl-nightly", "team": 'a, "b"'})) == \
        'job=etl-nightly,team="a, \\"b\\""'


def test_manager_creates_with_labels_and_renewal_keeps_them() -> None:
    clock = FakeClock(1_000)
    manager = TokenManager(MasterKeys("k"), max_lifetime_ms=10_000, renew_period_ms=1_000,
                           clock=clock)
    token = manager.create(ALICE, ALICE, [], -1, {"job": "etl"})
    assert token.info.labels == (("job", "etl"),)
    renewed = manager.renew(token, ALICE, 5_000)
    assert renewed.labels == token.info.labels and renewed.expiry_timestamp == 6_000
    with pytest.raises(LabelError):
        manager.create(ALICE, ALICE, [], -1, {"JOB": "x"})
    shown = manager.describe([token, manager.create(ALICE, ALICE, [], -1)], ALICE, None,
                             lambda _: False, validate({"job": "etl"}))
    assert [t.info.token_id for t in shown] == [token.info.token_id]


# --- ZooKeeper ---------------------------------------------------------------------------


def test_an_unlabelled_znode_is_byte_identical_and_labels_are_an_object() -> None:
    plain = encode_token(_info("t1"))
    assert b"labels" not in plain
    assert plain == (b'{"issueTimestamp":1,"renewers":[],"tokenRequester":"User%3Aalice",'
                     b'"tokenId":"t1","owner":"User%3Aalice","expiryTimestamp":2,'
                     b'"maxTimestamp":3,"version":3}')
    labelled = _info("t2", {"team": "pay<ments>", "job": "é"})
    data = encode_token(labelled)
    assert json.loads(data)["labels"] == {"job": "é", "team": "pay<ments>"}
    assert decode_token(data) == labelled
    tokens, failed = decode_tokens([("t1", plain), ("t2", data)] * 3)
    assert failed == [] and tokens[1] == labelled and tokens[1].labels is tokens[3].labels


def test_a_znode_with_bad_labels_does_not_decode() -> None:
    data = json.loads(encode_token(_info("t3")))
    for bad in ([], {"Job": "x"}, {"job": 1}):
        data["labels"] = bad
        with pytest.raises(LayoutError, match="labels"):
            decode_token(json.dumps(data).encode())


# --- wire ------------------------------------------------------------------------------


def test_create_labels_are_tag_0_and_absent_without_labels() -> None:
    header = RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 3, 1, "c")
    body = {"OwnerPrincipalType": None, "OwnerPrincipalName": None, "Renewers": [],
            "MaxLifetimeMs": -1}
    plain = encode_request(header, body)
    labelled = encode_request(header, {**body, "Labels": [{"Key": "job", "Value": "x"}]})
    labels = b"\x02" + b"\x04job" + b"\x02x" + b"\x00"  # 1 element: key, value, no tags
    assert labelled == plain[:-1] + b"\x01" + b"\x00" + bytes([len(labels)]) + labels
    assert decode_request(labelled)[1]["Labels"] == [{"Key": "job", "Value": "x"}]


def test_describe_encoder_adds_the_labels_tag_only_when_asked() -> None:
    """The hand-written encoder's element is exactly the schema codec's, with the Labels
    tag when asked for and Kafka's bytes otherwise."""
    keys = MasterKeys("k")
    info = _info("t1", {"job": "x"})
    token = DelegationToken(info, keys.hmac("t1", ""))
    header = RequestHeader(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, 9, None)
    for include in (False, True):
        element = _Encoder(3, include).element(token)
        labels = [{"Key": "job", "Value": "x"}] if include else []
        body = {"ErrorCode": 0, "ThrottleTimeMs": 0, "Tokens": [{
            "PrincipalType": "User", "PrincipalName": "alice",
            "TokenRequesterPrincipalType": "User", "TokenRequesterPrincipalName": "alice",
            "IssueTimestamp": 1, "ExpiryTimestamp": 2, "MaxTimestamp": 3, "TokenId": "t1",
            "Hmac": token.hmac, "Renewers": [], "Labels": labels}]}
        reference = encode_response(header, body)
        # correlation id, header tags, error code, array length 1, the element, throttle, tags
        assert reference == (b"\x00\x00\x00\x09\x00\x00\x00\x02" + element
                             + b"\x00\x00\x00\x00\x00")
        decoded = decode_response(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, reference)[1]
        assert decoded["Tokens"][0]["Labels"] == labels
    assert _Encoder(1, True).element(token) == _Encoder(1, False).element(token)


def test_committed_tokens_carry_labels_between_brokers() -> None:
    info = _info("t1", {"job": "x", "team": "y"})
    back = committed_token_of(committed_token_fields(CommittedToken("t1", 5, info)))
    assert back.info == info and back.info.labels is info.labels


# --- the cache ---------------------------------------------------------------------------


def test_the_label_index_follows_upserts_removals_and_resyncs() -> None:
    cache = TokenCache(MasterKeys("k"))
    cache.replace_all([_info("a", {"job": "x"}), _info("b", {"job": "x", "team": "t"}),
                       _info("c")])
    assert cache.ids_labelled(validate({"job": "x"})) == {"a", "b"}
    assert cache.ids_labelled(validate({"team": "t"})) == {"b"}
    cache.upsert(_info("d", {"job": "x"}))
    cache.remove("a")
    assert cache.ids_labelled(validate({"job": "x"})) == {"b", "d"}
    cache.replace_all([_info("b", {"job": "x", "team": "t"})])
    assert cache.ids_labelled(validate({"job": "x"})) == {"b"}
    cache.remove("b")
    assert cache.ids_labelled(validate({"job": "x"})) == set()
    assert cache._by_labels == {}


def test_a_label_set_costs_each_token_one_pointer() -> None:
    labels = validate({f"key{i}": "v" * 32 for i in range(4)})
    infos = [_info(f"t{i}", dict(labels)) for i in range(100)]
    assert all(i.labels is infos[0].labels for i in infos)
    unlabelled = sys.getsizeof(_info("x"))
    assert sys.getsizeof(infos[0]) == unlabelled


# --- the snapshot ------------------------------------------------------------------------


def test_the_snapshot_keeps_labels_and_refuses_version_1() -> None:
    infos = [_info("a", {"job": "x"}), _info("b"), _info("c", {"job": "x"})]
    data = encode(7, {"cluster": "c"}, infos, 1)
    snapshot = decode(data)
    assert snapshot.tokens == infos
    assert snapshot.tokens[0].labels is snapshot.tokens[2].labels


# --- audit ----------------------------------------------------------------------------


def test_label_keys_are_not_judged_as_field_names_but_values_are_redacted() -> None:
    event = build_event("token", {"action": "create", "outcome": "success",
                                  "token_id": "t", "labels": {"key-owner": "secret-ish"}})
    assert event["labels"] == {"key-owner": "secret-ish"}
    assert token_event(action="revoke", outcome="success", reason="revoked_by_label",
                       selector={"job": "x"})["selector"] == {"job": "x"}


def test_the_watch_names_the_labels_of_a_flagged_token(tmp_path: Path) -> None:
    from tokensvc.audit.watch import AlertSink, TokenLabels

    spool = tmp_path / "_spool"
    spool.mkdir()
    create = json.dumps({"type": "token", "action": "create", "outcome": "success",
                         "token_id": "t1", "labels": {"job": "<b>etl</b>"}})
    (spool / "a.jsonl.000000000000000-000000000000100.chunk").write_text(
        create + "\n" + json.dumps({"type": "authentication", "token_id": "t1"}) + "\n")

    class Row(dict):
        def asDict(self) -> dict:
            return dict(self)

    class Batch:
        def collect(self) -> list[Row]:
            return [Row(rule="unknown_token", token_id="t1", owner=None, client_host="h",
                        detail="d", first_ts=1, last_ts=2, count=1, severity="high")]

    seen: list[str] = []
    sink = AlertSink(tmp_path, seen.append, TokenLabels(spool, memory=10))
    sink(Batch(), 0)
    assert json.loads(seen[0])["labels"] == {"job": "<b>etl</b>"}
    assert json.loads((tmp_path / "alerts-000000000000.jsonl").read_text())["labels"] == {
        "job": "<b>etl</b>"}


# --- the admin client against brokers that cannot carry labels --------------------------


class _FakeConnection:
    """A broker connection that answers from a script and records the requests."""

    def __init__(self, version: int, answers: dict) -> None:
        self.version = version
        self.answers = answers
        self.sent: list[tuple] = []
        self.address = "fake:9092"
        self.is_open = True
        self.request_key = None

    def version_for(self, api_key):
        return self.version

    def request(self, api_key, body, deadline, version=None):
        self.sent.append((int(api_key), body))
        return self.answers[int(api_key)]

    def session_expired(self, now):
        return False

    def close(self):
        self.is_open = False


def _admin_with(conn: _FakeConnection):
    from tokensvc.admin import AdminClient
    from tokensvc.client_config import client_config_from_properties

    admin = AdminClient("fake:9092", client_config_from_properties({}), timeout_s=1)
    admin._conn = conn
    return admin


def test_labels_on_a_version_without_tags_are_refused_before_anything_is_sent() -> None:
    from tokensvc.admin import AdminError

    conn = _FakeConnection(1, {})
    with pytest.raises(AdminError) as refused:
        _admin_with(conn).create_token(labels={"job": "x"})
    assert refused.value.error == Errors.UNSUPPORTED_VERSION
    assert "needs CreateDelegationToken v2" in refused.value.message
    with pytest.raises(AdminError):
        _admin_with(conn).describe_tokens(labels={"job": "x"})
    assert conn.sent == []


def test_a_broker_that_ignores_the_labels_gets_its_unlabelled_token_expired_again() -> None:
    from tokensvc.admin import AdminError

    created = {"ErrorCode": 0, "PrincipalType": "User", "PrincipalName": "a",
               "TokenRequesterPrincipalType": "User", "TokenRequesterPrincipalName": "a",
               "IssueTimestampMs": 1, "ExpiryTimestampMs": 2, "MaxTimestampMs": 3,
               "TokenId": "kafka-token", "Hmac": b"\x01" * 64, "ThrottleTimeMs": 0}
    conn = _FakeConnection(3, {38: created, 40: {"ErrorCode": 0, "ExpiryTimestampMs": 1,
                                                 "ThrottleTimeMs": 0}})
    with pytest.raises(AdminError) as refused:
        _admin_with(conn).create_token(labels={"job": "x"})
    assert "kafka-token" in refused.value.message and "expired again" in refused.value.message
    assert [api for api, _ in conn.sent] == [38, 40]
    assert conn.sent[1][1] == {"Hmac": b"\x01" * 64, "ExpiryTimePeriodMs": -1}
