"""Security rules seen from hostile clients, on two in-process brokers (real sockets, real
ZooKeeper): one is the controller, the other forwards writes to it.

* No token request (create, renew, expire, describe) is served over a token-authenticated
  session or a PLAINTEXT listener, on either broker (the forwarding broker refuses before
  forwarding), and nothing changes in ZooKeeper.
* A user who is neither owner nor renewer can neither renew nor expire a token, directly
  or through the forwarding broker.
* Every failed login -- wrong password, unknown user, a user name that looks like
  base64 of 64 bytes, wrong token HMAC, unknown token, expired token -- is answered the
  same way (SASL_AUTHENTICATION_FAILED, one message) only after
  ``connection.failed.authentication.delay.ms``, and is audited with its real reason;
  names that are neither a user nor a token only as keyed fingerprints.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.client import WireClient
from tests.support.inproc import (
    InProcessBroker,
    chroot_with_users,
    controller,
    follower,
    running_brokers,
    zk_client,
)
from tests.support.wait import retry as eventually
from tokensvc.audit.events import name_fingerprint
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey
from zk.token_store import TokenStore

DELAY_MS = 300
PASSWORDS = {"admin": "admin-secret", "broker": "broker-secret", "alice": "alice-secret",
             "bob": "bob-secret", "mallory": "mallory-secret"}


@pytest.fixture(scope="module")
def env(zookeeper, tmp_path_factory) -> Iterator[dict]:
    connect = chroot_with_users(zookeeper.connect, "hostile-security", list(PASSWORDS.items()))
    audit = tmp_path_factory.mktemp("audit")
    with running_brokers(connect, (1, 2), audit_log_dir=str(audit),
                         connection_failed_authentication_delay_ms=str(DELAY_MS)) as brokers, \
            zk_client(connect) as zk:
        yield {
            "controller": controller(brokers),
            "forwarder": follower(brokers),
            "store": TokenStore(zk),
            "audit": audit,
        }


def _password(created: dict) -> str:
    return base64.b64encode(created["Hmac"]).decode("ascii")


def _create(broker: InProcessBroker, user: str, **body) -> dict:
    with WireClient(broker.address(), user, PASSWORDS[user]) as client:
        created = client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                 {"Renewers": [], "MaxLifetimeMs": -1, **body})
    assert created["ErrorCode"] == 0
    return created


def _wait_known(broker: InProcessBroker, created: dict) -> None:
    """Wait until ``broker`` has followed the token's create (answered by the controller):
    a request or login naming the token there is judged by that broker's own cache."""
    def known() -> None:
        assert broker.broker.local.cache.info(created["TokenId"]) is not None, (
            f"broker {broker.broker.broker_id} does not have token {created['TokenId']} yet")

    eventually(known, 10)


def _token_session(broker: InProcessBroker, created: dict) -> WireClient:
    return eventually(lambda: WireClient(broker.address(), created["TokenId"],
                                         _password(created), token=True))


def _token_requests(created: dict) -> list[tuple[str, int, int, dict]]:
    return [
        ("create", ApiKey.CREATE_DELEGATION_TOKEN, 3, {"Renewers": [], "MaxLifetimeMs": -1}),
        ("renew", ApiKey.RENEW_DELEGATION_TOKEN, 2, {"Hmac": created["Hmac"], "RenewPeriodMs": 3_600_000}),
        ("expire", ApiKey.EXPIRE_DELEGATION_TOKEN, 2, {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1}),
        ("describe", ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None}),
    ]


# -- token sessions and PLAINTEXT ---------------------------------------------------------------


@pytest.mark.parametrize("role", ["controller", "forwarder"])
@pytest.mark.parametrize("channel", ["token session", "PLAINTEXT"])
def test_no_token_request_is_served_over_a_token_session_or_plaintext(
    env: dict, role: str, channel: str
) -> None:
    broker = env[role]
    created = _create(env["controller"], "alice")
    before = env["store"].get(created["TokenId"])
    if channel == "token session":
        client = _token_session(broker, created)
    else:
        client = WireClient(broker.address("PLAINTEXT"), security_protocol="PLAINTEXT")
    with client:
        answers = {name: client.request(key, version, body)
                   for name, key, version, body in _token_requests(created)}
    assert {name: a["ErrorCode"] for name, a in answers.items()} == dict.fromkeys(
        answers, Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    assert answers["describe"]["Tokens"] == []
    assert env["store"].get(created["TokenId"]) == before


# -- renewers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["controller", "forwarder"])
def test_a_user_who_is_neither_owner_nor_renewer_can_neither_renew_nor_expire(
    env: dict, role: str
) -> None:
    created = _create(env["controller"], "alice",
                      Renewers=[{"PrincipalType": "User", "PrincipalName": "bob"}])
    before = env["store"].get(created["TokenId"])
    # The broker looks the HMAC up in its own cache: DELEGATION_TOKEN_NOT_FOUND, whoever
    # asks, until it has followed the create.
    _wait_known(env[role], created)
    with eventually(lambda: WireClient(env[role].address(), "mallory", PASSWORDS["mallory"])
                    ) as mallory:
        renew = mallory.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                {"Hmac": created["Hmac"], "RenewPeriodMs": 10**9})
        expire = mallory.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                 {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1})
    assert renew["ErrorCode"] == Errors.DELEGATION_TOKEN_OWNER_MISMATCH
    assert expire["ErrorCode"] == Errors.DELEGATION_TOKEN_OWNER_MISMATCH
    assert env["store"].get(created["TokenId"]) == before
    with WireClient(env[role].address(), "bob", PASSWORDS["bob"]) as bob:
        renewed = eventually(lambda: _ok(bob.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                                     {"Hmac": created["Hmac"],
                                                              "RenewPeriodMs": 60_000})))
    assert renewed["ExpiryTimestampMs"] > 0


def _ok(response: dict) -> dict:
    assert response["ErrorCode"] == 0, response
    return response


# -- failed logins ------------------------------------------------------------------------------


def _failed_login(address: tuple[str, int], username: str, password: str, token: bool
                  ) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(ConnectionError) as refused:
        WireClient(address, username, password, token=token)
    return str(refused.value), time.monotonic() - started


def _audited_failures(audit: Path) -> list[dict]:
    events = []
    for path in sorted(audit.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["type"] == "authentication" and event["outcome"] == "failure":
                events.append(event)
    return events


def test_every_failed_login_is_delayed_answered_alike_and_audited_with_its_reason(
    env: dict,
) -> None:
    broker = env["forwarder"]
    alice_token = _create(env["controller"], "alice")
    short = _create(env["controller"], "alice", MaxLifetimeMs=1)
    eventually(lambda: _token_session(broker, alice_token).close())
    # Until the forwarder has followed its create, the short token's login fails as
    # unknown_token, not expired_token.
    _wait_known(broker, short)
    time.sleep(0.05)  # the 1 ms token is past its max lifetime; the hourly sweep has not run
    base64_name = base64.b64encode(bytes(range(64))).decode("ascii")
    attempts = {
        "wrong password": ("alice", "not-her-password", False, "bad_proof"),
        "unknown user": ("nobody", "whatever", False, "unknown_user"),
        "user name like an hmac": (base64_name, "whatever", False, "unknown_user"),
        "wrong token hmac": (alice_token["TokenId"], base64.b64encode(b"x" * 64).decode(), True,
                             "bad_proof"),
        "unknown token": ("AAAAAAAAAAAAAAAAAAAAAA", _password(alice_token), True,
                          "unknown_token"),
        "expired token": (short["TokenId"], _password(short), True, "expired_token"),
    }
    results = {name: _failed_login(broker.address(), user, password, token)
               for name, (user, password, token, _) in attempts.items()}

    messages = {message for message, _ in results.values()}
    assert len(messages) == 1 and "Authentication failed" in messages.pop()
    too_fast = {name: round(s, 3) for name, (_, s) in results.items() if s < DELAY_MS / 1000 * 0.9}
    assert too_fast == {}

    def audited() -> dict[str, str]:
        """name of the attempt -> reason of the last failure audited for its user name."""
        last = {event["username"]: event["reason"] for event in _audited_failures(env["audit"])}
        # A name that is no user and no token is audited as its keyed fingerprint: it may
        # be a secret typed in the wrong field (an HMAC-like value, a password).
        names = {user: name for name, (user, _, _, _) in attempts.items()}
        for unknown in ("nobody", base64_name, "AAAAAAAAAAAAAAAAAAAAAA"):
            assert unknown not in last
            names[name_fingerprint(broker.broker.local.audit_fingerprint_key, unknown)] = names.pop(unknown)
        found = {names[user]: reason for user, reason in last.items() if user in names}
        assert set(found) == set(attempts)
        return found

    reasons = eventually(audited)
    assert reasons == {name: reason for name, (_, _, _, reason) in attempts.items()}
