"""Znodes a buggy tool or an operator wrote, found by the fuzz harnesses of tests/fuzz/zk:
each decoder refuses them with its own declared error (or skips them, where it is
documented to), never a RecursionError, an OverflowError or a plain ValueError that
would end a broker's cold start or a sync thread."""

from __future__ import annotations

import pytest

from tokensvc.authz.acl import PatternType
from zk import layout, notifications, requests
from zk.acl_store import AclDataError, decode_acls, decode_change
from zk.credential_store import decode_change_user, decode_user_config, sequence_of
from zk.errors import StoreError
from zk.layout import LayoutError

DEEP = b"[" * 100_000
HUGE_INT = b"1" * 5_000
TOKEN = (b'{"version":3,"owner":"User%3Aa","tokenRequester":"User%3Aa","renewers":[],'
         b'"issueTimestamp":1,"maxTimestamp":3,"expiryTimestamp":2,"tokenId":"t"}')


@pytest.mark.parametrize("data", [DEEP, b'{"version":' + HUGE_INT + b"}"],
                         ids=["nested", "huge-int"])
def test_token_znode_nested_too_deep_or_with_a_huge_integer_is_a_layout_error(data):
    with pytest.raises(LayoutError):
        layout.decode_token(data)


def test_bulk_decode_skips_a_nested_znode_and_keeps_its_neighbours():
    tokens, failed = layout.decode_tokens([("t", TOKEN), ("bad", DEEP)])
    assert [t.token_id for t in tokens] == ["t"]
    assert [token_id for token_id, _ in failed] == ["bad"]


def test_bulk_decode_skips_a_znode_with_a_huge_integer_and_keeps_its_neighbours():
    tokens, failed = layout.decode_tokens([("t", TOKEN), ("bad", HUGE_INT)])
    assert [t.token_id for t in tokens] == ["t"]
    assert [token_id for token_id, _ in failed] == ["bad"]


def test_broker_registration_with_a_non_ascii_digit_port_is_a_layout_error():
    data = '{"version":5,"endpoints":["PLAINTEXT://h:\u00b2"]}'.encode()
    with pytest.raises(LayoutError, match="NAME://host:port"):
        layout.decode_broker(1, data)


def test_broker_registration_with_an_infinite_timestamp_is_a_layout_error():
    data = b'{"version":1,"host":"h","port":1,"timestamp":Infinity}'
    with pytest.raises(LayoutError, match="timestamp"):
        layout.decode_broker(1, data)


@pytest.mark.parametrize("name", ["token_change_\u00b2", "token_change_" + "0" * 8 + "\u00b2" * 2,
                                  "token_change_" + "\u00b2" * 10])
def test_token_change_name_with_non_ascii_digits_has_no_sequence(name):
    assert layout.token_change_sequence(name) is None
    assert not layout.is_token_change_name(name)


def test_config_change_name_with_non_ascii_digits_has_no_sequence():
    assert sequence_of("config_change_\u00b2") is None


def test_acl_znode_and_change_nested_too_deep_are_acl_data_errors():
    with pytest.raises(AclDataError):
        decode_acls(DEEP)
    with pytest.raises(AclDataError):
        decode_change(DEEP, PatternType.PREFIXED)


def test_user_znode_nested_too_deep_is_a_store_error_and_its_change_is_skipped():
    with pytest.raises(StoreError):
        decode_user_config(DEEP)
    assert decode_change_user(DEEP) is None


@pytest.mark.parametrize("data", [DEEP, b'{"purged_through": Infinity}', b"[1]"])
def test_unreadable_purge_mark_reads_as_never_purged(data):
    assert notifications.purge_mark_of(data) == -1


@pytest.mark.parametrize("data", [DEEP, b'{"api": Infinity}', b"[1]", b""])
def test_unreadable_request_record_is_a_store_error(data):
    with pytest.raises(StoreError, match="does not decode"):
        requests.decode_record("k", data)


LONE = TOKEN.replace(b'"owner":"User%3Aa"', b'"owner":"User%3Aa\\ud800"')
PAIR = TOKEN.replace(b'"owner":"User%3Aa"', b'"owner":"User%3Aa\\ud83d\\ude00"')


def test_token_znode_with_a_lone_surrogate_escape_is_a_layout_error():
    with pytest.raises(LayoutError, match="lone surrogate"):
        layout.decode_token(LONE)
    tokens, failed = layout.decode_tokens([("t", LONE)])
    assert tokens == [] and [token_id for token_id, _ in failed] == ["t"]


def test_token_znode_with_an_escaped_surrogate_pair_is_read_and_written_again():
    token = layout.decode_token(PAIR)
    assert token.owner.name == "a\U0001f600"
    assert layout.decode_token(layout.encode_token(token)) == token
    assert layout.decode_tokens([("t", PAIR)])[0] == [token]


def test_acl_znode_with_a_lone_surrogate_escape_is_an_acl_data_error():
    data = (b'{"version":1,"acls":[{"principal":"User:\\udc00","host":"*",'
            b'"operation":"Read","permissionType":"Allow"}]}')
    with pytest.raises(AclDataError, match="lone surrogate"):
        decode_acls(data)


@pytest.mark.parametrize("labels", [b'{"job":["etl"]}', b'{"job":{"a":"b"}}'])
def test_bulk_decode_skips_a_znode_whose_label_value_is_no_text(labels):
    bad = TOKEN[:-1] + b',"labels":' + labels + b"}"
    with pytest.raises(LayoutError):
        layout.decode_token(bad)
    good = TOKEN.replace(b'"tokenId":"t"', b'"tokenId":"u"')
    tokens, failed = layout.decode_tokens([("u", good), ("t", bad)])
    assert [t.token_id for t in tokens] == ["u"]
    assert [token_id for token_id, _ in failed] == ["t"]
