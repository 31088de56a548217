"""A client's large request body is decoded in a worker thread, never on the event loop.

Two in-process brokers (real sockets, real ZooKeeper). Every decode of a client request
body in the process is recorded with the thread it ran on (wrappers around the broker's
own decoding functions that only record). An admin sends a small request and then a
DeleteAcls of 3,000 filters (about 120 KB, past the 64 KiB bound) to the broker that is
not the controller: it decodes the body in a thread and forwards it, and the controller
decodes the same request, out of its EnvelopeRequest, in a thread too. The answer is
whole (one result per filter) and nothing was deleted.

And a request naming more than fits one ZooKeeper transaction is refused whole, at once.
"""

from __future__ import annotations

import threading
import time

from tests.support.client import WireClient
from tests.support.inproc import (
    chroot_with_users,
    controller,
    follower,
    running_brokers,
    zk_client,
)
from tokensvc.broker.handlers import envelope
from tokensvc.broker.loop.offloop import LARGE_FRAME_BYTES
from tokensvc.broker.network import connection
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey

FILTERS = 3_000


def _filter(i: int) -> dict:
    return {"ResourceTypeFilter": 2, "ResourceNameFilter": f"no-such-topic-{i:06d}",
            "PatternTypeFilter": 3, "PrincipalFilter": "User:nobody", "HostFilter": None,
            "Operation": 1, "PermissionType": 1}


def test_a_large_request_is_decoded_off_the_loop_on_both_brokers(zookeeper, monkeypatch):
    connect = chroot_with_users(zookeeper.connect, "large-off-loop",
                                [("admin", "admin-secret"), ("broker", "broker-secret")])
    decoded: list[tuple[int, int, str]] = []  # (api key, bytes, thread name)
    real_body, real_request = connection.decode_client_body, envelope.decode_client_request

    def body(header, payload, offset):
        decoded.append((header.api_key, len(payload) - offset, threading.current_thread().name))
        return real_body(header, payload, offset)

    def request(data):
        inner = real_request(data)
        decoded.append((inner[0].api_key, len(data), threading.current_thread().name))
        return inner

    with running_brokers(connect, (1, 2)) as brokers:
        leader, other = controller(brokers), follower(brokers)
        loops = {leader.thread.name, other.thread.name}
        monkeypatch.setattr(connection, "decode_client_body", body)
        monkeypatch.setattr(envelope, "decode_client_request", request)
        with WireClient(other.address(), "admin", "admin-secret") as admin:
            small = admin.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
            answer = admin.request(ApiKey.DELETE_ACLS, 3,
                                   {"Filters": [_filter(i) for i in range(FILTERS)]})
        monkeypatch.undo()

    assert small["ErrorCode"] == 0
    results = answer["FilterResults"]
    assert len(results) == FILTERS
    assert all(r["ErrorCode"] == 0 and r["MatchingAcls"] == [] for r in results)
    large = [(size, thread) for key, size, thread in decoded if key == ApiKey.DELETE_ACLS]
    # Once by the broker the client reached, once by the controller out of the envelope.
    assert len(large) == 2, decoded
    assert all(size > LARGE_FRAME_BYTES and thread not in loops for size, thread in large), large
    # A small request's body stays on the loop: a thread hop would cost more than it does.
    assert [thread for key, _, thread in decoded if key == ApiKey.DESCRIBE_CLUSTER] == [
        other.thread.name]


def test_a_request_too_large_for_one_zookeeper_transaction_is_refused_whole(zookeeper):
    """20,000 filters make a request record over what ZooKeeper takes in one request: the
    controller refuses the DeleteAcls at once (INVALID_REQUEST per filter, saying why),
    sends ZooKeeper nothing, and goes on serving; before, ZooKeeper dropped its
    connection and the client waited out request.timeout.ms (30 s) for REQUEST_TIMED_OUT."""
    connect = chroot_with_users(zookeeper.connect, "too-large",
                                [("admin", "admin-secret"), ("broker", "broker-secret")])
    with running_brokers(connect, (1,)) as brokers:
        broker = brokers[0]
        with WireClient(broker.address(), "admin", "admin-secret", timeout=25) as admin:
            started = time.monotonic()
            answer = admin.request(ApiKey.DELETE_ACLS, 3,
                                   {"Filters": [_filter(i) for i in range(20_000)]})
            refused_in = time.monotonic() - started
            after = admin.request(ApiKey.DELETE_ACLS, 3, {"Filters": [_filter(1)]})
    with zk_client(connect) as zk:
        records = zk.get_children("/delegation_token/requests")
    results = answer["FilterResults"]
    assert {(r["ErrorCode"], r["MatchingAcls"] == []) for r in results} == {
        (Errors.INVALID_REQUEST, True)}
    assert "send fewer items per request" in results[0]["ErrorMessage"]
    assert refused_in < 20, refused_in
    assert [r["ErrorCode"] for r in after["FilterResults"]] == [0]
    assert len(records) == 1  # only the small request's record was written
