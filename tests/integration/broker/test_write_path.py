"""The write path on a 3-broker cluster (real sockets, real ZooKeeper), talking to the brokers
that are NOT the controller:

* read-your-writes on the answering broker: create then login, renew then describe,
  expire then login -- 1,000 times each;
* exactly-once: a renew, an expire, an ACL write and a credential write whose commit answer
  is lost on the controller (the commit went through; the caller saw a connection loss) are
  answered with the first outcome and applied once;
* Envelope only from brokers (#21): a session logged in with an admin-owned token cannot
  mint tokens through an Envelope on any broker, naming User:admin or User:alice.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Self

import pytest
from kazoo.exceptions import NoNodeError

from tests.support.client import WireClient, open_channel, token_logs_in
from tests.support.inproc import (
    chroot_with_users,
    controller,
    followers,
    running_brokers,
    zk_client,
)
from tests.support.wait import retry
from tokensvc.broker.writes.channel import BrokerChannel
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import RequestHeader, encode_request
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.principal_serde import serialize_principal
from tokensvc.scram.formatter import ScramMechanism
from zk import layout
from zk.credential_store import CHANGES_PATH
from zk.errors import StoreUnavailable

ROUNDS = 1_000
CONCURRENCY = 8
USERS = [("admin", "admin-secret"), ("broker", "broker-secret"), ("alice", "alice-secret"),
         ("bob", "bob-secret"), ("carol", "carol-secret")]


@pytest.fixture(scope="module")
def zk_chroot(zookeeper):
    return chroot_with_users(zookeeper.connect, "write-path", USERS)


@pytest.fixture(scope="module")
def cluster(zk_chroot):
    with running_brokers(zk_chroot, (1, 2, 3), connection_failed_authentication_delay_ms="0") as brokers:
        yield brokers


@pytest.fixture(scope="module")
def zk(zk_chroot):
    with zk_client(zk_chroot) as client:
        yield client


# --- async helpers: many requests without a thread per connection --------------------------


async def _rounds(work, rounds: int = ROUNDS) -> list:
    """Run ``work(i)`` for i in range(rounds), CONCURRENCY at a time; results in order."""
    results: list = [None] * rounds
    queue = iter(range(rounds))

    async def worker() -> None:
        for i in queue:
            results[i] = await work(i)

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return results


# --- read-your-writes --------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _follower_sessions(cluster, username: str,
                             password: str) -> AsyncIterator[tuple[list, list[BrokerChannel]]]:
    """``username`` logged in on every non-controller: (their addresses, the sessions)."""
    targets = [b.address() for b in followers(cluster)]
    sessions = [await open_channel(a, username, password, client_id="write-path") for a in targets]
    try:
        yield targets, sessions
    finally:
        for s in sessions:
            await s.close()


async def _create(session: BrokerChannel) -> dict:
    return await session.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                 {"Renewers": [], "MaxLifetimeMs": -1}, timeout=15)


def test_create_then_login_on_the_same_non_controller_succeeds_every_time(cluster):
    async def main() -> list[bool]:
        async with _follower_sessions(cluster, "alice", "alice-secret") as (targets, sessions):

            async def one(i: int) -> bool:
                at = i % len(targets)
                created = await _create(sessions[at])
                assert created["ErrorCode"] == 0, created
                return await token_logs_in(targets[at], created["TokenId"], created["Hmac"],
                                           client_id="write-path")

            return await _rounds(one)

    results = asyncio.run(main())
    assert sum(results) == ROUNDS, f"{ROUNDS - sum(results)} of {ROUNDS} logins refused"


def test_renew_then_describe_on_the_same_non_controller_shows_the_new_expiry(cluster):
    async def main() -> list[bool]:
        async with _follower_sessions(cluster, "bob", "bob-secret") as (targets, sessions):
            tokens = [await _create(sessions[i % 2]) for i in range(10)]
            locks = [asyncio.Lock() for _ in tokens]

            async def one(i: int) -> bool:
                at, t = i % len(targets), i % len(tokens)
                async with locks[t]:  # renews of one token in order: each must be visible
                    renewed = await sessions[at].request(
                        ApiKey.RENEW_DELEGATION_TOKEN, 2, {"Hmac": tokens[t]["Hmac"], "RenewPeriodMs": 3_600_000 + i},
                        timeout=15)
                    assert renewed["ErrorCode"] == 0, renewed
                    described = await sessions[at].request(
                        ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": [{"PrincipalType": "User", "PrincipalName": "bob"}]},
                        timeout=15)
                shown = {d["TokenId"]: d["ExpiryTimestamp"] for d in described["Tokens"]}
                return shown.get(tokens[t]["TokenId"]) == renewed["ExpiryTimestampMs"]

            return await _rounds(one)

    results = asyncio.run(main())
    assert sum(results) == ROUNDS, f"{ROUNDS - sum(results)} of {ROUNDS} describes were stale"


def test_expire_then_login_on_the_same_non_controller_is_refused_every_time(cluster):
    async def main() -> list[bool]:
        async with _follower_sessions(cluster, "carol", "carol-secret") as (targets, sessions):

            async def one(i: int) -> bool:
                at = i % len(targets)
                created = await _create(sessions[at])
                assert created["ErrorCode"] == 0, created
                expired = await sessions[at].request(
                    ApiKey.EXPIRE_DELEGATION_TOKEN, 2, {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1}, timeout=15)
                assert expired["ErrorCode"] == 0, expired
                return await token_logs_in(targets[at], created["TokenId"], created["Hmac"],
                                           client_id="write-path")

            return await _rounds(one)

    results = asyncio.run(main())
    assert sum(results) == 0, f"{sum(results)} of {ROUNDS} revoked tokens still logged in"


# --- exactly-once after a lost commit answer ---------------------------------------------------


class LoseOneAnswer:
    """Wraps a store write on the controller (for tokens: the group commit's
    ``commit_many``): the first call commits for real, then raises the ConnectionLoss-style
    StoreUnavailable a lost answer produces; later calls pass."""

    def __init__(self, target, name: str) -> None:
        self.target, self.name = target, name
        self.original = getattr(target, name)
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        result = self.original(*args, **kwargs)
        if self.calls == 1:
            raise StoreUnavailable("injected: connection lost after the commit")
        return result

    def __enter__(self) -> Self:
        setattr(self.target, self.name, self)
        return self

    def __exit__(self, *exc: object) -> None:
        delattr(self.target, self.name)


def _changes(zk, path: str) -> int:
    return len(zk.get_children(path))


def _token_changes(zk, token_id: str) -> int:
    """Change notifications about ``token_id`` (the controller may purge old ones of
    other tokens meanwhile, so the root's size is not a measure)."""
    root = layout.TOKEN_CHANGES
    return sum(1 for c in zk.get_children(root)
               if (zk.exists(f"{root}/{c}") and _payload(zk, f"{root}/{c}") == token_id))


def _payload(zk, path: str) -> str | None:
    try:
        return zk.get(path)[0].decode()
    except NoNodeError:
        return None


def test_a_renew_and_an_expire_whose_commit_answer_was_lost_apply_once(cluster, zk):
    ctl, (fwd, _) = controller(cluster), followers(cluster)
    with WireClient(fwd.address(), "alice", "alice-secret") as alice:
        created = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                {"Renewers": [], "MaxLifetimeMs": -1})
        token_id = created["TokenId"]
        before = _token_changes(zk, token_id)
        with LoseOneAnswer(ctl.broker.parts.token_store, "commit_many") as lossy:
            renewed = alice.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                    {"Hmac": created["Hmac"], "RenewPeriodMs": 7_200_000})
        assert renewed["ErrorCode"] == 0
        assert lossy.calls == 1  # the retry found the record: the renew ran once
        assert _token_changes(zk, token_id) == before + 1
        stored = layout.decode_token(zk.get(layout.token_path(created["TokenId"]))[0])
        assert stored.expiry_timestamp == renewed["ExpiryTimestampMs"]
        described = alice.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
        assert {d["TokenId"]: d["ExpiryTimestamp"] for d in described["Tokens"]}[
            created["TokenId"]] == renewed["ExpiryTimestampMs"]

        before = _token_changes(zk, token_id)
        with LoseOneAnswer(ctl.broker.parts.token_store, "commit_many") as lossy:
            expired = alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                    {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1})
        assert expired["ErrorCode"] == 0  # not DELEGATION_TOKEN_NOT_FOUND
        assert lossy.calls == 1
        assert _token_changes(zk, token_id) == before + 1
        assert zk.exists(layout.token_path(created["TokenId"])) is None
    assert ctl.broker.parts.ledger.retried_unknown >= 2


def test_an_acl_write_and_a_credential_write_whose_commit_answer_was_lost_apply_once(cluster, zk):
    ctl, (fwd, _) = controller(cluster), followers(cluster)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    creation = {"ResourceType": 2, "ResourceName": topic, "ResourcePatternType": 3,
                "Principal": "User:bob", "Host": "*", "Operation": 3, "PermissionType": 3}
    with WireClient(fwd.address(), "admin", "admin-secret") as admin:
        before = _changes(zk, "/kafka-acl-changes")
        with LoseOneAnswer(ctl.broker.parts.acl_store, "add") as lossy:
            created = admin.request(ApiKey.CREATE_ACLS, 2, {"Creations": [creation]})
        assert [r["ErrorCode"] for r in created["Results"]] == [0]
        assert lossy.calls == 1
        assert _changes(zk, "/kafka-acl-changes") == before + 1

        user = f"dave-{uuid.uuid4().hex[:6]}"
        upsertion = {"Name": user, "Mechanism": ScramMechanism.SCRAM_SHA_256.wire_type,
                     "Iterations": 4096, "Salt": b"s" * 16, "SaltedPassword": b"p" * 32}
        before = _changes(zk, CHANGES_PATH)
        with LoseOneAnswer(ctl.broker.parts.credential_store, "alter_with_tokens") as lossy:
            altered = admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                    {"Deletions": [], "Upsertions": [upsertion]})
        assert altered["Results"] == [{"User": user, "ErrorCode": 0, "ErrorMessage": None}]
        assert lossy.calls == 1
        assert _changes(zk, CHANGES_PATH) == before + 1
        # Read-your-writes on the answering broker: its cache has the new user already.
        assert fwd.broker.local.users.credentials(user)


# --- Envelope only from brokers (#21) ----------------------------------------------------------


def _forged_create(owner: str) -> dict:
    inner = encode_request(RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 3, 99, "forger"), {
        "OwnerPrincipalType": "User", "OwnerPrincipalName": owner,
        "Renewers": [], "MaxLifetimeMs": -1,
    })
    return {"RequestData": inner,
            "RequestPrincipal": serialize_principal(KafkaPrincipal.user(owner)),
            "ClientHostAddress": bytes([127, 0, 0, 1]), "RequestKey": uuid.uuid4().hex,
            "FirstAttempt": True}


def test_a_token_session_cannot_mint_tokens_through_an_envelope_on_any_broker(cluster, zk):
    with WireClient(followers(cluster)[0].address(), "admin", "admin-secret") as admin:
        stolen = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                               {"Renewers": [], "MaxLifetimeMs": -1})
    password = base64.b64encode(stolen["Hmac"]).decode()

    def known_everywhere() -> None:
        missing = [b.broker.broker_id for b in cluster
                   if b.broker.local.cache.info(stolen["TokenId"]) is None]
        assert not missing, f"brokers {missing} do not have the token yet"

    # Created through one broker: the others let it log in once they have followed the
    # create (read-your-writes holds only on the broker that answered).
    retry(known_everywhere, 10, errors=(AssertionError,), interval=0.02)
    tokens_before = set(zk.get_children(layout.TOKENS))
    answers = []
    for b in cluster:
        for listener in ("BROKER", "SASL_PLAINTEXT"):
            for owner in ("admin", "alice"):
                with WireClient(b.address(listener), stolen["TokenId"], password, token=True,
                                mechanism="SCRAM-SHA-256") as thief:
                    answers.append(thief.request(ApiKey.ENVELOPE, 0, _forged_create(owner)))
    assert [a["ErrorCode"] for a in answers] == [Errors.CLUSTER_AUTHORIZATION_FAILED] * 12
    assert all(a["ResponseData"] is None for a in answers)
    assert set(zk.get_children(layout.TOKENS)) == tokens_before
