"""EnvelopeForwarder with a fake channel, fake followers and a fake clock: what it sends,
how it retries, and that it answers only once this broker serves the write."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import ClassVar

from tokensvc.broker.context import (
    CommittedToken,
    RequestContext,
    committed_token_fields,
)
from tokensvc.broker.handlers.tokens import RENEW_DELEGATION_TOKEN
from tokensvc.broker.writes.forwarding import EnvelopeForwarder
from tokensvc.core.clock import FakeClock
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.protocol import RequestHeader, decode_response, encode_request, encode_response
from tokensvc.protocol.api import ApiKey

HEADER = RequestHeader(ApiKey.RENEW_DELEGATION_TOKEN, 2, 5, "cli")
PAYLOAD = encode_request(HEADER, {"Hmac": b"h", "RenewPeriodMs": 1})
ANSWER = encode_response(HEADER, {"ErrorCode": 0, "ExpiryTimestampMs": 123, "ThrottleTimeMs": 0})


class TimedOut:
    """A script step: the request times out after the channel read ``answered`` other
    responses meanwhile."""

    def __init__(self, answered: int) -> None:
        self.answered = answered


class FakeChannel:
    """Answers from a script: each item is an exception to raise, a TimedOut, or an
    envelope body."""

    sent: ClassVar[list[dict]] = []
    script: ClassVar[list] = []
    opened: ClassVar[list[FakeChannel]] = []

    def __init__(self, host, port, **kwargs) -> None:
        self.closed = False
        self.received = 0
        FakeChannel.opened.append(self)

    async def connect(self, timeout: float) -> None:
        return None

    async def request(self, api_key, version, body, *, client_id, timeout):
        FakeChannel.sent.append(dict(body))
        step = FakeChannel.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, TimedOut):
            self.received += step.answered
            raise TimeoutError("no answer in time")
        self.received += 1
        return step

    async def close(self) -> None:
        self.closed = True


def _config(timeout_ms: int = 5_000):
    return SimpleNamespace(
        broker_id=2, request_timeout_ms=timeout_ms, inter_broker_listener_name="BROKER",
        ssl_truststore_location=None, inter_broker_sasl_mechanism="SCRAM-SHA-512",
        inter_broker_sasl_username="broker", inter_broker_sasl_password="pw",
    )


def _ctx() -> RequestContext:
    return RequestContext(HEADER, KafkaPrincipal.user("alice"), "SASL_PLAINTEXT",
                          "SASL_PLAINTEXT", "127.0.0.1", 5000, PAYLOAD)


class Harness:
    def __init__(self, script: list, *, reach_result: bool = True, timeout_ms: int = 5_000,
                 apply_token=None):
        FakeChannel.sent = []
        FakeChannel.script = list(script)
        FakeChannel.opened = []
        self.clock = FakeClock(0)
        self.reached: list[list] = []
        self.audit: list[dict] = []

        async def reach(versions, timeout_s):
            self.reached.append(list(versions))
            return reach_result

        async def sleep(seconds):
            self.clock.advance(int(seconds * 1000))

        async def apply_locally(ctx, body):
            raise AssertionError("not the controller")

        self.forwarder = EnvelopeForwarder(
            _config(timeout_ms),
            controller_id=lambda: 1,
            is_controller=lambda: False,
            endpoint=lambda bid, name: ("SASL_PLAINTEXT", "127.0.0.1", 9),
            apply_locally=apply_locally,
            reach=reach,
            apply_token=apply_token,
            audit=lambda kind, **f: self.audit.append(f),
            count=lambda client_id: None,
            channel_factory=FakeChannel,
            monotonic=lambda: self.clock.now_ms() / 1000.0,
            sleep=sleep,
        )

    def forward(self) -> tuple[dict, int]:
        encoded, error = asyncio.run(self.forwarder.forward(_ctx(), RENEW_DELEGATION_TOKEN))
        return decode_response(ApiKey.RENEW_DELEGATION_TOKEN, 2, encoded)[1], error


def _ok(versions):
    return {"ResponseData": ANSWER, "ErrorCode": 0,
            "CommittedVersions": [{"Root": r, "Sequence": s} for r, s in versions]}


def test_the_request_key_rides_in_the_tagged_field_and_the_client_id_is_plain():
    h = Harness([_ok([("tokens", 7)])])
    answer, error = h.forward()
    assert (answer["ExpiryTimestampMs"], error) == (123, 0)
    (sent,) = FakeChannel.sent
    assert len(sent["RequestKey"]) == 32 and sent["FirstAttempt"] is True
    assert sent["RequestData"] == PAYLOAD


def test_it_answers_only_after_this_broker_applied_the_committed_versions():
    h = Harness([_ok([("tokens", 7), ("acls", 3)])])
    h.forward()
    assert h.reached == [[("tokens", 7), ("acls", 3)]]


def test_committed_token_states_go_into_the_cache_and_need_no_wait():
    renewed = TokenInformation("tok-1", KafkaPrincipal.user("alice"),
                               KafkaPrincipal.user("bob"), (KafkaPrincipal.user("carol"),),
                               10, 123, 999, "kid")
    applied: list = []

    def apply_token(token_id, info, sequence):
        applied.append((token_id, info, sequence))
        return token_id == "tok-1"  # tok-2's is refused (a load runs): wait for it

    response = _ok([("tokens", 7), ("tokens", 8), ("acls", 3)])
    response["CommittedTokens"] = [
        committed_token_fields(CommittedToken("tok-1", 7, renewed)),
        committed_token_fields(CommittedToken("tok-2", 8, None)),
    ]
    h = Harness([response], apply_token=apply_token)
    _answer, error = h.forward()
    assert error == 0
    assert applied == [("tok-1", renewed, 7), ("tok-2", None, 8)]
    assert h.reached == [[("tokens", 8), ("acls", 3)]]


def test_a_malformed_committed_token_falls_back_to_waiting():
    response = _ok([("tokens", 7)])
    response["CommittedTokens"] = [{"TokenId": "tok-1"}]
    h = Harness([response], apply_token=lambda *a: True)
    h.forward()
    assert h.reached == [[("tokens", 7)]]


def test_a_broker_that_cannot_catch_up_answers_request_timed_out():
    h = Harness([_ok([("tokens", 7)])], reach_result=False)
    answer, error = h.forward()
    assert error == Errors.REQUEST_TIMED_OUT == answer["ErrorCode"]


def test_retries_keep_the_request_key_and_only_the_first_is_marked_first():
    h = Harness([ConnectionError("lost"), _ok([])])
    _, error = h.forward()
    assert error == 0
    first, retry = FakeChannel.sent
    assert first["RequestKey"] == retry["RequestKey"]
    assert (first["FirstAttempt"], retry["FirstAttempt"]) == (True, False)
    assert h.clock.now_ms() == 50  # one backoff step, on the fake clock
    assert h.reached == []  # nothing committed (an error answer), nothing to wait for


def test_not_controller_is_retried_until_the_request_timeout():
    refused = {"ResponseData": None, "ErrorCode": int(Errors.NOT_CONTROLLER)}
    h = Harness([refused] * 100, timeout_ms=1_000)
    _, error = h.forward()
    assert error == Errors.REQUEST_TIMED_OUT
    assert 2 <= len(FakeChannel.sent) <= 8
    assert h.audit[-1]["outcome"] == "failure"


def test_a_timeout_keeps_a_channel_the_controller_still_answers_others_on():
    h = Harness([TimedOut(answered=3), _ok([])])
    _, error = h.forward()
    assert error == 0
    # Kept open for the envelopes it still carries (the retry went to the next channel).
    assert not FakeChannel.opened[0].closed


def test_a_timeout_on_a_silent_channel_closes_it_and_the_retry_opens_another():
    h = Harness([TimedOut(answered=0), _ok([])])
    _, error = h.forward()
    assert error == 0
    first, second = FakeChannel.opened
    assert first.closed and not second.closed  # the retry went to the next channel
