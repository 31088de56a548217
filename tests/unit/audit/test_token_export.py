"""The token export codec: what ``tokensvc tokens export`` and ``audit generate`` write and
the report reads; each line round-trips, and a bad line is refused by line and field."""

from __future__ import annotations

import io
import json

import pytest

from tokensvc.audit.token_export import (
    FIELDS,
    REQUIRED,
    ExportedToken,
    TokenExportError,
    decode_token,
    encode_token,
    from_token,
    read_tokens,
    write_tokens,
)
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation

ALICE_TOKEN = ExportedToken(
    token_id="tok-alice-1", owner="User:alice", requester="User:admin",
    renewers=("User:bob", "User:carol"), issue_ms=1_704_067_200_000,
    expiry_ms=1_704_088_800_000, max_ms=1_704_153_600_000,
)


def _record(**changes: object) -> str:
    record = json.loads(encode_token(ALICE_TOKEN))
    record.update(changes)
    return json.dumps(record)


def test_a_line_is_sorted_json_with_a_newline_and_no_labels_key_without_labels() -> None:
    line = encode_token(ALICE_TOKEN)
    assert line == (
        '{"expiry_ms": 1704088800000, "issue_ms": 1704067200000, "max_ms": 1704153600000, '
        '"owner": "User:alice", "renewers": ["User:bob", "User:carol"], '
        '"requester": "User:admin", "token_id": "tok-alice-1"}\n')


def test_labels_are_an_object_with_sorted_keys() -> None:
    token = ExportedToken(**{**ALICE_TOKEN.__dict__, "labels": {"team": "pay", "job": "etl"}})
    record = json.loads(encode_token(token))
    assert record["labels"] == {"job": "etl", "team": "pay"}
    assert encode_token(token).index('"job"') < encode_token(token).index('"team"')


@pytest.mark.parametrize("labels", [
    {},
    {"job": "etl-nightly"},
    {"job": 'quote " and backslash \\'},
    {"job": "ünïcødé ☃ and 𝄞"},
    {"job": "comma, semicolon; equals=sign"},
    {"job": "=SUM(A1:A2)", "team": "+1", "x/y.z": "-at @start"},
    {"job": "line\nbreak\ttab"},
])
def test_round_trip(labels: dict[str, str]) -> None:
    token = ExportedToken(**{**ALICE_TOKEN.__dict__, "labels": labels})
    line = encode_token(token)
    assert line.endswith("\n") and "\n" not in line[:-1]
    assert line.isascii()
    assert decode_token(line) == token


def test_round_trip_of_a_token_with_no_renewers() -> None:
    token = ExportedToken(**{**ALICE_TOKEN.__dict__, "renewers": ()})
    assert decode_token(encode_token(token)) == token


def test_each_field_is_read_back_into_its_place() -> None:
    token = decode_token(_record(labels={"job": "ingest"}))
    assert token.token_id == "tok-alice-1"
    assert token.owner == "User:alice"
    assert token.requester == "User:admin"
    assert token.renewers == ("User:bob", "User:carol")
    assert token.issue_ms == 1_704_067_200_000
    assert token.expiry_ms == 1_704_088_800_000
    assert token.max_ms == 1_704_153_600_000
    assert token.labels == {"job": "ingest"}


def test_the_fields_are_those_of_a_line() -> None:
    names = [name for name, _ in FIELDS]
    assert set(json.loads(_record(labels={"job": "x"}))) == set(names)
    assert [n for n in names if n not in REQUIRED] == ["labels"]


def test_from_token_takes_zookeepers_token_without_its_key() -> None:
    info = TokenInformation(
        token_id="tok-1", owner=KafkaPrincipal.user("alice"),
        token_requester=KafkaPrincipal.user("admin"),
        renewers=(KafkaPrincipal.user("bob"),), issue_timestamp=1, expiry_timestamp=2,
        max_timestamp=3, key_id="master-key-7", labels=(("job", "etl"),),
    )
    exported = from_token(info)
    assert exported == ExportedToken("tok-1", "User:alice", "User:admin", ("User:bob",), 1, 2, 3,
                                     {"job": "etl"})
    assert "master-key-7" not in encode_token(exported)


def test_from_token_without_labels_writes_no_labels() -> None:
    info = TokenInformation("tok-2", KafkaPrincipal.user("a"), KafkaPrincipal.user("a"), (),
                            1, 2, 3)
    assert "labels" not in json.loads(encode_token(from_token(info)))


def test_unknown_fields_are_ignored() -> None:
    assert decode_token(_record(added_later="x")) == ALICE_TOKEN


def test_write_and_read_a_file_skipping_blank_lines() -> None:
    other = ExportedToken(**{**ALICE_TOKEN.__dict__, "token_id": "tok-2",
                             "labels": {"job": "a"}})
    out = io.StringIO()
    assert write_tokens([ALICE_TOKEN, other], out) == 2
    text = out.getvalue()
    assert text == encode_token(ALICE_TOKEN) + encode_token(other)
    assert list(read_tokens(io.StringIO(text + "\n  \n"))) == [ALICE_TOKEN, other]


def test_a_bad_line_is_named_by_its_number() -> None:
    lines = [encode_token(ALICE_TOKEN), "\n", "{not json\n"]
    with pytest.raises(TokenExportError, match=r"^line 3: not JSON"):
        list(read_tokens(lines))


def test_a_line_that_is_not_an_object() -> None:
    with pytest.raises(TokenExportError, match=r"^line 7: expected a JSON object"):
        decode_token("[1, 2]", 7)


@pytest.mark.parametrize("name", REQUIRED)
def test_a_missing_field_is_named(name: str) -> None:
    record = json.loads(_record())
    del record[name]
    with pytest.raises(TokenExportError, match=rf"^line 1: field '{name}' is missing$"):
        decode_token(json.dumps(record))


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("token_id", 12, "a string"),
    ("owner", None, "a string"),
    ("requester", ["User:a"], "a string"),
    ("renewers", "User:bob", "a list of strings"),
    ("renewers", ["User:bob", 3], "a list of strings"),
    ("issue_ms", "1704067200000", "an integer"),
    ("expiry_ms", 1.5, "an integer"),
    ("max_ms", True, "an integer"),
    ("labels", ["job", "etl"], "an object of strings"),
    ("labels", {"job": 1}, "an object of strings"),
])
def test_a_field_of_the_wrong_type_is_named(name: str, value: object, expected: str) -> None:
    with pytest.raises(TokenExportError, match=rf"^line 4: field '{name}': expected {expected}"):
        decode_token(_record(**{name: value}), 4)


def test_a_long_bad_value_is_shortened_in_the_message() -> None:
    with pytest.raises(TokenExportError) as caught:
        decode_token(_record(owner=["x" * 500]))
    assert len(str(caught.value)) < 120
