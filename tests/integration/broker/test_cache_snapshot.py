"""A broker restarts from its token cache snapshot (token.cache.snapshot.dir) on the real
ZooKeeper, and refuses a snapshot it must not use.

* Tokens created, renewed and deleted while the broker was down: it starts from its
  snapshot, reads only those tokens again, and serves exactly ZooKeeper's tokens (the
  deleted one refused at login and never in its cache, even during the load; the new
  one accepted).
* A corrupted, a truncated (three lengths), a back-dated (its notifications purged
  since) and a foreign (other ZooKeeper data) snapshot, and a good one after a token
  znode was deleted by hand without a notification: each is detected, counted and
  logged, and the broker loads every token from ZooKeeper.
* The bounded-staleness gate holds during the load: with an early-start listener open,
  a token login waits while the snapshot is being loaded and succeeds once it has been
  caught up.
* A token that passed its max lifetime while the broker was down (nobody swept it) is
  swept by the restarted broker as controller: the snapshot's tokens are in the cache's
  expiry index like any other.
"""

from __future__ import annotations

import base64
import logging
import threading
import time

import pytest

from tests.support.client import WireClient
from tests.support.inproc import (
    InProcessBroker,
    bootstrap_user,
    broker_properties,
    wait_for_controller,
    zk_client,
)
from tests.support.wait import poll_until, raising, retry
from tokensvc.core.config import BrokerConfig
from tokensvc.protocol.api import ApiKey
from tokensvc.snapshot.files import SNAPSHOT_FILE
from tokensvc.snapshot.format import decode, encode
from zk import layout
from zk.token_store import TokenStore

DAY_MS = 86_400_000


def _users(connect: str) -> None:
    for user, password in [("admin", "admin-secret"), ("broker", "broker-secret"),
                           ("alice", "alice-secret")]:
        bootstrap_user(connect, user, password)


def _config(broker_id: int, connect: str, snapshot_dir=None, **extra: str) -> BrokerConfig:
    if snapshot_dir is not None:
        extra["token.cache.snapshot.dir"] = str(snapshot_dir)
    return BrokerConfig.from_properties(broker_properties(broker_id, connect, **extra))


def _ok(response: dict) -> dict:
    assert response["ErrorCode"] == 0, response
    return response


def _create(broker: InProcessBroker, count: int) -> list[dict]:
    with WireClient(broker.address(), "alice", "alice-secret") as alice:
        return [_ok(alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                  {"Renewers": [], "MaxLifetimeMs": -1}))
                for _ in range(count)]


def _token_login(broker: InProcessBroker, created: dict) -> None:
    WireClient(broker.address(), created["TokenId"],
               base64.b64encode(created["Hmac"]).decode(), token=True).close()


def _zookeeper_tokens(connect: str) -> dict:
    with zk_client(connect) as client:
        return {info.token_id: info for info in TokenStore(client).load_all()}


def _cache(broker: InProcessBroker) -> dict:
    return {info.token_id: info for info in broker.broker.local.cache.infos()}


def _loads(broker: InProcessBroker, result: str) -> float:
    return broker.broker.local.metrics.registry.get_sample_value(
        "tokensvc_cache_snapshot_loads_total", {"result": result})


def _holds(broker: InProcessBroker, tokens: list[dict]) -> bool:
    ids = {t["TokenId"] for t in tokens}
    return ids <= set(_cache(broker))


@pytest.fixture
def other(zk_connect):
    """Broker 2, the controller: it takes the writes while broker 1 is down."""
    _users(zk_connect)
    broker = InProcessBroker(_config(2, zk_connect)).start()
    wait_for_controller([broker])
    yield broker
    broker.stop()


def _started(config: BrokerConfig, **kw) -> InProcessBroker:
    return InProcessBroker(config, **kw).start()


def test_restart_from_the_snapshot_serves_exactly_zookeepers_tokens(zk_connect, other, tmp_path):
    config = _config(1, zk_connect, tmp_path / "snapshots")
    first = _started(config)
    assert first.broker.parts.token_sync.snapshot_result == "unused"
    assert _loads(first, "missing") == 1
    kept, renewed, deleted = _create(other, 3)
    assert poll_until(lambda: _holds(first, [kept, renewed, deleted]), 10)
    first.stop()
    assert (tmp_path / "snapshots" / SNAPSHOT_FILE).stat().st_size > 0

    # While broker 1 is down: one token created, one renewed, one deleted.
    (created,) = _create(other, 1)
    with WireClient(other.address(), "alice", "alice-secret") as alice:
        _ok(alice.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                          {"Hmac": renewed["Hmac"], "RenewPeriodMs": 3 * DAY_MS}))
        _ok(alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                          {"Hmac": deleted["Hmac"], "ExpiryTimePeriodMs": -1}))

    seen: list[str] = []

    def listen(broker) -> None:
        broker.local.cache.add_batch_listener(lambda up, _gone: seen.extend(i.token_id for i in up))

    restarted = _started(config, prepare=listen)
    try:
        assert restarted.broker.parts.token_sync.snapshot_result == "loaded"
        assert _loads(restarted, "loaded") == 1
        truth = _zookeeper_tokens(zk_connect)
        assert _cache(restarted) == truth
        assert deleted["TokenId"] not in truth
        assert truth[renewed["TokenId"]].expiry_timestamp > renewed["ExpiryTimestampMs"]
        # The deleted token never reached the cache, not even during the load.
        assert deleted["TokenId"] not in seen
        _token_login(restarted, created)
        _token_login(restarted, kept)
        _token_login(restarted, renewed)
        raising(lambda: _token_login(restarted, deleted))
    finally:
        restarted.stop()


def test_a_snapshot_copies_the_cache_only_when_it_changed(zk_connect, other, tmp_path):
    # Copying a million tokens costs 20-50 ms (in slices): the writer asks the sync's
    # position first, and copies only when the cache followed a change since its file.
    directory = tmp_path / "snapshots"
    first = _started(_config(1, zk_connect, directory))
    try:
        cache = first.broker.local.cache
        copies: list[int] = []
        real = cache.infos_in_slices

        def counted():
            copies.append(1)
            return real()

        cache.infos_in_slices = counted
        writer = first.broker._snapshot_writer
        writer.write_now()  # the cache as it is now, on disk (unless it already was)
        copies.clear()
        assert writer.write_now() is False
        assert copies == []
        (created,) = _create(other, 1)
        assert poll_until(lambda: cache.info(created["TokenId"]) is not None, 10)
        assert writer.write_now() is True
        assert copies == [1]
        written = decode((directory / SNAPSHOT_FILE).read_bytes())
        assert created["TokenId"] in {t.token_id for t in written.tokens}
    finally:
        first.stop()


def _restart_with(config, data: bytes, path) -> InProcessBroker:
    path.write_bytes(data)
    return _started(config)


def test_a_damaged_back_dated_or_foreign_snapshot_is_refused(zk_connect, other, tmp_path,
                                                             caplog):
    directory = tmp_path / "snapshots"
    path = directory / SNAPSHOT_FILE
    config = _config(1, zk_connect, directory)
    broker = _started(config)
    before = _create(other, 3)
    assert poll_until(lambda: _holds(broker, before), 10)
    broker.stop()
    old = path.read_bytes()

    broker = _started(config)
    assert broker.broker.parts.token_sync.snapshot_result == "loaded"
    gone = before[0]
    after = _create(other, 2)
    with WireClient(other.address(), "alice", "alice-secret") as alice:
        _ok(alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                          {"Hmac": gone["Hmac"], "ExpiryTimePeriodMs": -1}))
    assert poll_until(lambda: _holds(broker, after) and gone["TokenId"] not in _cache(broker), 10)
    broker.stop()
    good = path.read_bytes()
    snapshot = decode(good)

    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x01
    foreign = encode(snapshot.sequence, {**snapshot.identity, "tokens_czxid": 1},
                     snapshot.tokens, snapshot.written_ms)
    cases = [
        ("corrupted", bytes(flipped), "invalid", "checksum"),
        ("empty", b"", "invalid", "empty"),
        ("cut in half", good[: len(good) // 2], "invalid", "checksum"),
        ("one byte short", good[:-1], "invalid", "checksum"),
        ("from other ZooKeeper data", foreign, "identity", "tokens_czxid"),
    ]
    # Back-dated: the snapshot from before the last changes, once the notifications after
    # it are purged (the controller's purge, as if 15 minutes had passed).
    purge_at = int(time.time() * 1000) + DAY_MS
    cases.append(("back-dated", old, "purged", "purged"))
    # Then the snapshot the last stop left (it reflects the purge mark, so it is usable),
    # once a token znode was deleted by hand, without a notification: the count differs.
    by_hand = after[1]
    cases.append(("a token deleted by hand", None, "mismatch", "without a change notification"))

    for name, data, result, why in cases:
        if name == "back-dated":
            assert other.broker.parts.token_sync.purge(purge_at) > 0
        if name == "a token deleted by hand":
            with zk_client(zk_connect) as client:
                client.delete(layout.token_path(by_hand["TokenId"]))
        caplog.clear()
        with caplog.at_level(logging.INFO, "tokensvc.snapshot"):
            broker = _restart_with(config, data, path) if data is not None else _started(config)
        try:
            assert broker.broker.local.snapshot_file.last_result == result, name
            assert _loads(broker, result) == 1, name
            refusals = [r.getMessage() for r in caplog.records
                        if r.name == "tokensvc.snapshot" and r.levelno == logging.WARNING]
            assert len(refusals) == 1 and why in refusals[0], (name, refusals)
            assert _cache(broker) == _zookeeper_tokens(zk_connect), name
            assert gone["TokenId"] not in _cache(broker)
            raising(lambda b=broker: _token_login(b, gone))
            _token_login(broker, after[0])
            if name == "a token deleted by hand":
                assert by_hand["TokenId"] not in _cache(broker)
                raising(lambda b=broker: _token_login(b, by_hand))
        finally:
            broker.stop()


def test_no_token_login_is_served_until_the_snapshot_is_caught_up(zk_connect, other, tmp_path):
    config = _config(1, zk_connect, tmp_path / "snapshots",
                     **{"early.start.listeners": "SASL_PLAINTEXT"})
    broker = _started(config)
    (token,) = _create(other, 1)
    assert poll_until(lambda: _holds(broker, [token]), 10)
    broker.stop()

    entered, release = threading.Event(), threading.Event()

    def hold(b) -> None:
        load = b.local.snapshot_file.load

        def held():
            entered.set()
            release.wait(20)
            return load()

        b.local.snapshot_file.load = held

    restarted = InProcessBroker(config, prepare=hold)
    starting = threading.Thread(target=restarted.start, daemon=True)
    starting.start()
    try:
        assert entered.wait(10)
        # The early listener is open; the snapshot is being loaded.
        gate = restarted.broker.parts.freshness
        assert not gate.fresh()
        assert len(restarted.broker.local.cache) == 0
        outcome: dict = {}

        def login() -> None:
            try:
                _token_login(restarted, token)
                outcome["ok"] = True
            except Exception as exc:  # noqa: BLE001 - reported below
                outcome["error"] = exc

        attempt = threading.Thread(target=login, daemon=True)
        attempt.start()
        assert poll_until(lambda: gate.catch_ups >= 1, 10)  # the login waits at the gate
        assert not outcome and not gate.fresh()
        release.set()
        attempt.join(20)
        assert outcome == {"ok": True}
        starting.join(20)
        assert restarted.broker.parts.token_sync.snapshot_result == "loaded"
        retry(lambda: _token_login(restarted, token), 5, errors=(Exception,))
    finally:
        release.set()
        starting.join(20)
        restarted.stop()


def test_a_token_that_expired_while_the_broker_was_down_is_swept_after_the_restart(
        zk_connect, tmp_path):
    """Alone (no other broker sweeps while it is down), the broker restarts from its
    snapshot holding a token past its max lifetime; as controller it sweeps it."""
    _users(zk_connect)
    config = _config(1, zk_connect, tmp_path / "snapshots",
                     **{"delegation.token.expiry.check.interval.ms": "200"})
    broker = _started(config)
    wait_for_controller([broker])
    with WireClient(broker.address(), "alice", "alice-secret") as alice:
        short = _ok(alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                  {"Renewers": [], "MaxLifetimeMs": 1500}))
        lasting = _ok(alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                    {"Renewers": [], "MaxLifetimeMs": -1}))
    broker.stop()
    assert short["TokenId"] in _zookeeper_tokens(zk_connect)
    # Down until the short token is past its max lifetime (the clock, not a guess).
    assert poll_until(lambda: time.time() * 1000 > short["MaxTimestampMs"] + 50, 5)

    restarted = _started(config)
    try:
        assert restarted.broker.local.snapshot_file.last_result == "loaded"
        assert poll_until(lambda: short["TokenId"] not in _zookeeper_tokens(zk_connect)
                          and short["TokenId"] not in _cache(restarted), 10)
        raising(lambda: _token_login(restarted, short))
        _token_login(restarted, lasting)
        assert _cache(restarted) == _zookeeper_tokens(zk_connect)
    finally:
        restarted.stop()
