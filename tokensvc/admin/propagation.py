""""Done on every broker": wait until every live broker serves a token change.

Owns :func:`wait_all_brokers`. The live brokers are those of the cluster metadata
(DescribeCluster, through the admin client's connection); each is checked on its own
connection, all at once (one thread per broker), with a check that asks the broker the
way a client would:

* :func:`token_logs_in` -- after a create: a SCRAM login with the token succeeds;
* :func:`expiry_visible` -- after a renew (or an expire with a period >= 0): describe shows
  the token with the new expiry;
* :func:`token_refused` -- after an expire that removed the token: a login with it fails.

A check that does not hold yet is asked again after a short backoff; a broker that does
not answer (stopped, partitioned) is asked again with a new connection. When
``timeout_s`` passes, :class:`PropagationTimeout` names every broker that still lags.
The answer gives the time until every broker served the change, and per broker.

Must not: print, import click, or decide token rules (the brokers do).
"""

from __future__ import annotations

import base64
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tokensvc.admin.connection import BrokerConnection, ConnectionLost
from tokensvc.admin.results import AdminError, BrokerNode, TokenDescription, tokens_from_describe
from tokensvc.client_config import ClientConfig
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import ApiKey

# How long one attempt on one broker may take before it is tried again: a stopped broker
# accepts connections (the kernel does) but never answers.
ATTEMPT_S = 2.0
_BACKOFF_S = (0.005, 0.2)

# check(address, config, deadline) -> True once the broker serves the change.
Check = Callable[[str, ClientConfig, float], bool]


@dataclass(frozen=True)
class BrokerServed:
    broker_id: int
    address: str
    seconds: float


@dataclass(frozen=True)
class Propagation:
    """Every live broker served the change ``seconds`` after the wait began."""

    seconds: float
    brokers: tuple[BrokerServed, ...]


class PropagationTimeout(AdminError):
    """Some live brokers did not serve the change in time; ``lagging`` names them."""

    def __init__(self, lagging: list[BrokerNode], timeout_s: float, served: tuple) -> None:
        names = ", ".join(f"broker {b.broker_id} ({b.host}:{b.port})" for b in lagging)
        super().__init__(
            Errors.REQUEST_TIMED_OUT,
            f"not served by every broker within {timeout_s:g}s: {names} still lagging",
        )
        self.lagging = tuple(lagging)
        self.served = served


def token_logs_in(token: TokenDescription) -> Check:
    def check(address: str, config: ClientConfig, deadline: float) -> bool:
        return _login(address, _token_config(config, token), deadline)

    return check


def token_refused(token: TokenDescription) -> Check:
    def check(address: str, config: ClientConfig, deadline: float) -> bool:
        return not _login(address, _token_config(config, token), deadline)

    return check


def expiry_visible(token_id: str, expiry_ms: int) -> Check:
    """The token is described with exactly ``expiry_ms`` (a removed token never is)."""

    def check(address: str, config: ClientConfig, deadline: float) -> bool:
        conn = BrokerConnection(address, config, client_id="tokensvc-wait-all-brokers")
        try:
            conn.open(deadline)
            version = conn.version_for(ApiKey.DESCRIBE_DELEGATION_TOKEN)
            response = conn.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, {"Owners": None},
                                    deadline, version)
        finally:
            conn.close()
        if response["ErrorCode"] != Errors.NONE:
            return False
        return any(t.token_id == token_id and t.expiry_ms == expiry_ms
                   for t in tokens_from_describe(response, version))

    return check


def tokens_absent(token_ids: Iterable[str], owners: Iterable[KafkaPrincipal]) -> Check:
    """None of ``token_ids`` (of ``owners``) is in the broker's token cache any more:
    describe of those owners (as the caller, who may see them) lists none of them. A broker
    answers logins from the same cache, so these tokens are refused there -- one request
    per broker, however many tokens."""
    wanted = set(token_ids)
    structs = [{"PrincipalType": o.principal_type, "PrincipalName": o.name}
               for o in dict.fromkeys(owners)]

    def check(address: str, config: ClientConfig, deadline: float) -> bool:
        conn = BrokerConnection(address, config, client_id="tokensvc-wait-all-brokers")
        try:
            conn.open(deadline)
            version = conn.version_for(ApiKey.DESCRIBE_DELEGATION_TOKEN)
            response = conn.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, {"Owners": structs},
                                    deadline, version)
        finally:
            conn.close()
        if response["ErrorCode"] != Errors.NONE:
            return False
        return not any(t.token_id in wanted for t in tokens_from_describe(response, version))

    return check


def _token_config(config: ClientConfig, token: TokenDescription) -> ClientConfig:
    return dataclasses.replace(
        config, username=token.token_id, password=base64.b64encode(token.hmac).decode("ascii"),
        token_auth=True,
    )


def _login(address: str, config: ClientConfig, deadline: float) -> bool:
    conn = BrokerConnection(address, config, client_id="tokensvc-wait-all-brokers")
    try:
        conn.open(deadline)
    except AdminError as exc:
        if exc.error == Errors.SASL_AUTHENTICATION_FAILED:
            return False
        raise
    finally:
        conn.close()
    return True


def wait_all_brokers(
    brokers: list[BrokerNode],
    config: ClientConfig,
    check: Check,
    timeout_s: float,
    *,
    monotonic: Callable[[], float] = time.monotonic,
) -> Propagation:
    """Block until ``check`` holds on every broker of ``brokers``, or raise
    PropagationTimeout naming the ones that lag after ``timeout_s``."""
    started = monotonic()
    deadline = started + timeout_s
    served: dict[int, BrokerServed] = {}
    lock = threading.Lock()

    def follow(node: BrokerNode) -> None:
        address = f"{node.host}:{node.port}"
        backoff = _BACKOFF_S[0]
        while (now := monotonic()) < deadline:
            try:
                ok = check(address, config, min(deadline, now + ATTEMPT_S))
            except (ConnectionLost, AdminError, OSError):
                ok = False  # not answering (stopped, restarting): ask again
            if ok:
                with lock:
                    served[node.broker_id] = BrokerServed(node.broker_id, address,
                                                          monotonic() - started)
                return
            time.sleep(min(backoff, max(0.0, deadline - monotonic())))
            backoff = min(backoff * 2, _BACKOFF_S[1])

    threads = [threading.Thread(target=follow, args=(b,), daemon=True,
                                name=f"wait-broker-{b.broker_id}") for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - monotonic()) + ATTEMPT_S + 1.0)
    with lock:
        done = tuple(sorted(served.values(), key=lambda s: s.broker_id))
    lagging = [b for b in brokers if b.broker_id not in served]
    if lagging:
        raise PropagationTimeout(lagging, timeout_s, done)
    return Propagation(max((s.seconds for s in done), default=0.0), done)
