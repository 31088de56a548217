"""The ZooKeeper client says which session timeout it was granted (issue #20, item 2).

Real ZooKeeper started by the project's code; the granted value is checked against the
server's own view of the session (the ``cons`` four-letter word).
"""

from __future__ import annotations

import logging
import re

import pytest

from zk.client import ZkSettings, negotiated_session_timeout_ms, open_client
from zk.server import ManagedZooKeeper, four_letter_word

# No managed or production ZooKeeper grants an hour: the server caps it.
BEYOND_ANY_MAX_MS = 3_600_000


def _server_timeout_ms(zookeeper: ManagedZooKeeper, session_id: int) -> int:
    """The timeout ZooKeeper itself holds for the session (``to=`` in ``cons``)."""
    reply = four_letter_word(zookeeper.host, zookeeper.client_port, "cons")
    for line in reply.splitlines():
        if f"sid=0x{session_id:x}" in line:
            return int(re.search(r"\bto=(\d+)", line).group(1))
    raise AssertionError(f"session 0x{session_id:x} not in cons: {reply!r}")


def _open(zk_connect: str, session_timeout_ms: int):
    return open_client(ZkSettings(zk_connect, session_timeout_ms=session_timeout_ms))


def test_a_capped_session_timeout_is_logged_as_a_warning_with_the_granted_value(
        zookeeper: ManagedZooKeeper, zk_connect: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="zk.client"):
        client = _open(zk_connect, BEYOND_ANY_MAX_MS)
    try:
        granted = _server_timeout_ms(zookeeper, client.client_id[0])
        assert granted < BEYOND_ANY_MAX_MS
        assert negotiated_session_timeout_ms(client) == granted
        warnings = [r for r in caplog.records if r.name == "zk.client"
                    and r.levelno == logging.WARNING]
        assert len(warnings) == 1
        message = warnings[0].getMessage()
        assert f"{granted} ms" in message and f"{BEYOND_ANY_MAX_MS} ms" in message
    finally:
        client.stop()
        client.close()


def test_a_granted_session_timeout_is_logged_at_info_without_a_warning(
        zookeeper: ManagedZooKeeper, zk_connect: str, caplog: pytest.LogCaptureFixture) -> None:
    asked = 4 * zookeeper.tick_ms  # inside [2, 20] ticks: every server grants it as asked
    with caplog.at_level(logging.INFO, logger="zk.client"):
        client = _open(zk_connect, asked)
    try:
        assert _server_timeout_ms(zookeeper, client.client_id[0]) == asked
        assert negotiated_session_timeout_ms(client) == asked
        records = [r for r in caplog.records if r.name == "zk.client"]
        assert [r.levelno for r in records] == [logging.INFO]
        assert f"{asked} ms negotiated (configured {asked} ms)" in records[0].getMessage()
    finally:
        client.stop()
        client.close()
