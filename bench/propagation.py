"""The propagation measurement B3 and B8 share: create a token, then poll logins until it works.

Owns the one loop both benchmarks time: a super-user connection creates a token on one
broker, and from the moment the response arrives each watched broker is asked to log the
token in on fresh connections, again and again, until it succeeds
(:func:`sample_creates`, :func:`first_login`). Samples are taken one at a time, ``PAUSE_S``
apart; a broker that has not served the token after ``GIVE_UP_S`` fails the run.

It must not start brokers or judge results: the benchmarks choose the brokers, and
summarise and judge the times.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bench.common import try_login
from bench.wire import (
    create_token_body,
    open_logged_in,
)
from tokensvc.protocol.api import ApiKey

PAUSE_S = 0.05
GIVE_UP_S = 10.0

T = TypeVar("T")
# Called once per created token: (token id, token password, salted cache, acked time).
AfterCreate = Callable[[str, str, dict, float], Awaitable[T]]


async def first_login(address: str, token_id: str, password: str, salted: dict,
                      acked: float) -> tuple[float, int]:
    """Seconds from ``acked`` (a ``time.perf_counter`` reading) to the first successful
    login on ``address``, and how many attempts it took."""
    attempts = 0
    while True:
        attempts += 1
        if await try_login(address, token_id, password, salted):
            return time.perf_counter() - acked, attempts
        if time.perf_counter() - acked > GIVE_UP_S:
            raise RuntimeError(f"token not usable on {address} after {GIVE_UP_S}s")


async def sample_creates(create_at: str, user: str, password: str, samples: int,
                         after_create: AfterCreate[T]) -> list[T]:
    """Create ``samples`` tokens one at a time on ``create_at`` as ``user``; after each
    create's response, await ``after_create`` with the new token and the moment the
    response arrived. Its results, in order."""
    admin = await open_logged_in(create_at, user, password)
    salted: dict = {}
    results: list[T] = []
    try:
        for _ in range(samples):
            created = await admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_token_body())
            acked = time.perf_counter()
            if created["ErrorCode"]:
                raise RuntimeError(f"create failed with error code {created['ErrorCode']}")
            token_password = base64.b64encode(created["Hmac"]).decode("ascii")
            results.append(await after_create(created["TokenId"], token_password, salted, acked))
            await asyncio.sleep(PAUSE_S)
    finally:
        admin.close()
    return results
