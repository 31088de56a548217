"""Change notifications and their names: token changes
(``/delegation_token/token_changes/token_change_<seq>``), user config changes
(``/config/changes/config_change_<seq>``, Kafka's ConfigEntityChangeNotification), and
the sequence numbers read from the names, a notification root's purge mark
(``{"purged_through": N}``) and the request records beside them
(``/delegation_token/requests/<key>``).

Properties: only LayoutError escapes the token-change decoder and StoreError the
request-record decoder; the user-change decoder, the purge-mark reader and the name
readers never raise; the sequence of a ZooKeeper sequential name gives that name back.
"""

from __future__ import annotations

from zk import layout
from zk.credential_store import decode_change_user, sequence_of
from zk.errors import StoreError
from zk.layout import LayoutError
from zk.notifications import purge_mark_of
from zk.requests import decode_record, record_op

ERRORS = (LayoutError, StoreError)
DICTIONARY = "json.dict"


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    kind, rest = data[0] % 5, data[1:]
    if kind == 0:
        token_id = layout.decode_token_change(rest)
        assert layout.decode_token_change(layout.encode_token_change(token_id)) == token_id
    elif kind == 1:
        user = decode_change_user(rest)
        assert user is None or isinstance(user, str)
    elif kind == 3:
        assert isinstance(purge_mark_of(rest), int)
    elif kind == 4:
        record = decode_record("k", rest)
        if isinstance(record.outcome, (str, int, type(None))) and -2**31 <= record.api < 2**31:
            assert decode_record("k", record_op("k", record.api, record.outcome).data) == record
    else:
        name = rest.decode("utf-8", "replace")
        sequence = layout.token_change_sequence(name)
        if layout.is_token_change_name(name):
            assert sequence is not None
            assert layout.token_change_name(sequence) == name, "name round trip differs"
        config_sequence = sequence_of(name)
        assert config_sequence is None or config_sequence >= 0


def seeds() -> dict[str, bytes]:
    """As Kafka 3.9 writes them (token ids UTF-8; config changes ConfigEntityChange
    version 2; sequential names of ten digits)."""
    return {
        "kafka-token-change": b"\x00Zl0YT9kvSLaHtdxp5pMVbA",
        "kafka-user-change": b'\x01{"version":2,"entity_path":"users/alice"}',
        "kafka-client-change": b'\x01{"version":2,"entity_path":"users/alice/clients/app"}',
        "kafka-token-change-name": b"\x02token_change_0000000042",
        "kafka-config-change-name": b"\x02config_change_0000000007",
        "tokensvc-purge-mark": b'\x03{"purged_through": 41}',
        "tokensvc-request-record": b'\x04{"api":38,"outcome":0}',
    }
