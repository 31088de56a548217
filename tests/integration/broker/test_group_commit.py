"""Group commit and envelopes in flight, on real sockets and a real ZooKeeper.

* Many envelopes on ONE inter-broker connection run at once on the controller: each is
  answered with its own response (matched by correlation id), and they are committed in
  fewer ZooKeeper transactions than writes.
* One write of a batch that fails (its request key is already recorded: a retry wrongly
  marked first) does not fail the others: it is answered with its first outcome, the
  others create their own tokens.
* Many concurrent creates and renews through a non-controller all succeed, each applied
  once, and each create is served by the answering broker when it answers.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.support.client import open_channel, token_logs_in
from tests.support.inproc import (
    chroot_with_users,
    controller,
    follower,
    running_brokers,
    zk_client,
)
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import RequestHeader, decode_response, encode_request
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.principal_serde import serialize_principal
from zk.requests import RequestRecords
from zk.token_store import TokenStore

USERS = [("admin", "admin-secret"), ("broker", "broker-secret"), ("alice", "alice-secret")]
ALICE = KafkaPrincipal.user("alice")


@pytest.fixture(scope="module")
def zk_chroot(zookeeper):
    return chroot_with_users(zookeeper.connect, "group-commit", USERS)


@pytest.fixture(scope="module")
def cluster(zk_chroot):
    with running_brokers(zk_chroot, (1, 2)) as brokers:
        yield brokers


@pytest.fixture(scope="module")
def zk(zk_chroot):
    with zk_client(zk_chroot) as client:
        yield client


def _create_envelope(correlation_id: int, key: str) -> dict:
    inner = encode_request(RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                         correlation_id, "original-client"),
                           {"Renewers": [], "MaxLifetimeMs": -1})
    return {"RequestData": inner, "RequestPrincipal": serialize_principal(ALICE),
            "ClientHostAddress": bytes([127, 0, 0, 1]), "RequestKey": key,
            "FirstAttempt": True}


def _inner(response: dict) -> tuple[int, dict]:
    assert response["ErrorCode"] == 0, response
    return decode_response(ApiKey.CREATE_DELEGATION_TOKEN, 3, bytes(response["ResponseData"]))


def test_envelopes_on_one_connection_run_together_and_each_gets_its_own_answer(cluster, zk):
    ctl = controller(cluster)
    group = ctl.broker.parts.group_commit
    count = 40
    keys = [uuid.uuid4().hex for _ in range(count)]

    async def main() -> list[dict]:
        peer = await open_channel(ctl.address("BROKER"), "broker", "broker-secret",
                                  mechanism="SCRAM-SHA-512", client_id="broker-9")
        try:
            return await asyncio.gather(*(
                peer.request(ApiKey.ENVELOPE, 0, _create_envelope(1000 + i, keys[i]), timeout=30)
                for i in range(count)))
        finally:
            await peer.close()

    batches, writes = group.batches, group.committed
    responses = asyncio.run(main())
    answers = [_inner(r) for r in responses]
    # Each envelope's answer carries its own inner correlation id and its own token.
    assert [corr for corr, _ in answers] == [1000 + i for i in range(count)]
    assert all(body["ErrorCode"] == 0 for _, body in answers)
    token_ids = [body["TokenId"] for _, body in answers]
    assert len(set(token_ids)) == count
    records = RequestRecords(zk)
    assert [records.get(k).outcome["token_id"] for k in keys] == token_ids
    # Committed together: 40 writes in fewer transactions than writes.
    assert group.committed - writes == count
    assert group.batches - batches < count
    # Each answer reports the version of its own notification.
    sequences = [r["CommittedVersions"][0]["Sequence"] for r in responses]
    assert len(set(sequences)) == count


def test_a_failed_write_in_a_batch_is_answered_alone_and_the_others_commit(cluster, zk):
    ctl = controller(cluster)
    store = TokenStore(zk)
    count = 12

    async def main() -> tuple[dict, list[dict]]:
        peer = await open_channel(ctl.address("BROKER"), "broker", "broker-secret",
                                  mechanism="SCRAM-SHA-512", client_id="broker-9")
        try:
            first = await peer.request(ApiKey.ENVELOPE, 0, _create_envelope(1, "repeated-key-gc"),
                                       timeout=30)
            # The same key again, wrongly marked first, amid fresh creates: its write fails
            # in the batch (the record exists); the others must not fail with it.
            keys = [uuid.uuid4().hex for _ in range(count)]
            keys[5] = "repeated-key-gc"
            rest = await asyncio.gather(*(
                peer.request(ApiKey.ENVELOPE, 0, _create_envelope(100 + i, keys[i]), timeout=30)
                for i in range(count)))
            return first, rest
        finally:
            await peer.close()

    first, rest = asyncio.run(main())
    original = _inner(first)[1]["TokenId"]
    bodies = [_inner(r)[1] for r in rest]
    assert all(b["ErrorCode"] == 0 for b in bodies)
    assert bodies[5]["TokenId"] == original  # the first outcome, not a second token
    fresh = [b["TokenId"] for i, b in enumerate(bodies) if i != 5]
    assert len(set(fresh)) == count - 1 and original not in fresh
    assert all(store.get(t) is not None for t in fresh)


def test_concurrent_creates_and_renews_through_a_non_controller_all_succeed_once(cluster, zk):
    fwd = follower(cluster)
    clients, per_client = 16, 6

    async def client() -> list[tuple[str, int, int, bool]]:
        session = await open_channel(fwd.address(), "alice", "alice-secret",
                                     client_id="broker-9")
        done = []
        try:
            for _ in range(per_client):
                created = await session.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                                {"Renewers": [], "MaxLifetimeMs": -1},
                                                timeout=30)
                assert created["ErrorCode"] == 0, created
                usable = await token_logs_in(fwd.address(), created["TokenId"], created["Hmac"],
                                             client_id="broker-9")
                renewed = await session.request(
                    ApiKey.RENEW_DELEGATION_TOKEN, 2, {"Hmac": created["Hmac"], "RenewPeriodMs": 3_600_000}, timeout=30)
                assert renewed["ErrorCode"] == 0, renewed
                done.append((created["TokenId"], created["ExpiryTimestampMs"],
                             renewed["ExpiryTimestampMs"], usable))
        finally:
            await session.close()
        return done

    async def main() -> list:
        return [d for ds in await asyncio.gather(*(client() for _ in range(clients))) for d in ds]

    done = asyncio.run(main())
    assert len(done) == clients * per_client
    assert len({token_id for token_id, *_ in done}) == len(done)
    # Read-your-writes on the answering broker: each new token logged in there at once.
    assert all(usable for *_, usable in done)
    store = TokenStore(zk)
    stored = store.get_many([token_id for token_id, *_ in done])
    # Each renew applied once, with the expiry it answered.
    assert all(stored[t] is not None and stored[t].expiry_timestamp == renewed
               for t, _created, renewed, _ in done)
