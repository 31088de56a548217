"""A describe of every token on a broker holding tens of thousands never stalls it.

A real broker (in-process, real sockets) cold-starts with 40,000 tokens written
straight into a real ZooKeeper in Kafka's layout. A describe-all is sent; once the
broker has begun it (its first slice read from the cache, recorded by a wrapper
around ``TokenCache.tokens_by_ids`` that only appends to a list), a token login is
made on another connection. The login must complete while the describe is still
being built: the recorded order shows slices of the describe after the login. Until
the login is done the wrapper also holds each slice for 20 ms, so the describe lasts
seconds whatever the machine's speed (a quiet CI machine once finished it before the
login was sent). No timing is measured; the describe must still return every token.
"""

from __future__ import annotations

import base64
import threading
import time

from bench import zkraw
from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, bootstrap_user, broker_properties
from tests.support.wait import poll_until
from tokensvc.core.config import BrokerConfig
from tokensvc.core.keys import key_id, token_hmac
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.protocol.api import ApiKey

TOKENS = 40_000
MASTER_KEY = "test-master-key"
SLOW_SLICE_S = 0.02


def test_a_login_sent_during_a_describe_all_is_answered_before_it_ends(zookeeper):
    connect = f"{zookeeper.connect}/describe-scale-{time.monotonic_ns()}"
    for user, password in [("admin", "admin-secret"), ("broker", "broker-secret")]:
        bootstrap_user(connect, user, password)
    now = int(time.time() * 1000)
    owner = KafkaPrincipal.user("alice")
    tokens = [
        TokenInformation(f"scale-{i:06d}", owner, owner, (), now, now + 86_400_000,
                         now + 7 * 86_400_000, key_id(MASTER_KEY))
        for i in range(TOKENS)
    ]
    assert zkraw.write_tokens(connect, tokens) == TOKENS
    broker = InProcessBroker(BrokerConfig.from_properties(broker_properties(1, connect))).start()
    try:
        cache = broker.broker.local.cache
        poll_until(lambda: len(cache) == TOKENS, timeout=120)
        order: list[str] = []
        read_slice = cache.tokens_by_ids

        def recording(ids):
            # Until the login is done, every slice is made slow (20 ms, held on the
            # event loop as a slow slice would be), so a fast machine cannot finish
            # the describe before the login has even been sent. The login can still
            # only complete if the describe yields to the loop between slices.
            order.append("slice")
            if "login" not in order:
                time.sleep(SLOW_SLICE_S)
            return read_slice(ids)

        cache.tokens_by_ids = recording
        described: dict = {}
        with WireClient(broker.address(), "admin", "admin-secret", timeout=300) as admin:
            describing = threading.Thread(
                target=lambda: described.update(admin.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3,
                                                              {"Owners": None}))
            )
            describing.start()
            poll_until(lambda: "slice" in order, timeout=60)
            password = base64.b64encode(token_hmac(MASTER_KEY, tokens[0].token_id)).decode()
            with WireClient(broker.address(), tokens[0].token_id, password, token=True,
                            timeout=60):
                order.append("login")
            describing.join(300)
        assert not describing.is_alive()
        assert described["ErrorCode"] == 0
        assert len(described["Tokens"]) == TOKENS
        login_at = order.index("login")
        assert "slice" in order[login_at + 1 :], "the describe had finished before the login"
    finally:
        broker.stop()
