"""The 3-node, 3-broker cluster that the fault drivers (``faults.soak``, ``faults.chaos``) break.

Owns what both drivers do the same way: a 3-node ZooKeeper ensemble
(``zk.server.ZooKeeperEnsemble``) with a 3-broker ``LocalCluster`` on it (separate
processes, tied to the starting thread by ``die_with_parent``) and a ZooKeeper client
of the driver's own (:class:`FaultCluster`: start, close, a broker's address, the
current controller, a describe, one token login); and the driver's view of
the admin client's blocking connection (:class:`Connection`: one logged-in
connection, one request at a time, failures as :class:`ClientError`).

It must not inject faults, generate load or judge anything: the drivers do. It never
prints or keeps a password or an HMAC beyond the call that uses it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import zkraw
from tokensvc.admin.connection import BrokerConnection, ConnectionLost
from tokensvc.admin.results import AdminError
from tokensvc.client_config import ClientConfig
from tokensvc.cluster import LocalCluster, Placement
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.formatter import ScramMechanism
from zk.client import open_client
from zk.server import ZooKeeperEnsemble

REQUEST_TIMEOUT_S = 40.0
MECHANISM = ScramMechanism.SCRAM_SHA_256


# The errors a broker refuses a login with when it cannot decide now (retriable).
RETRIABLE_REFUSALS = frozenset({Errors.REQUEST_TIMED_OUT.name})


def refusal_outcome(message: str) -> str:
    """The outcome of a token login that raised :class:`ClientError` with ``message``:
    "refused" (the broker said no to the credential), "refused: <ERROR>" (it refused
    with a retriable error: it could not decide then) or "connection" (pure)."""
    if not message.startswith("login refused: "):
        return "connection"
    error = message.removeprefix("login refused: ")
    return f"refused: {error}" if error in RETRIABLE_REFUSALS else "refused"


class ClientError(Exception):
    """A connection or login failed (the message names the class, never a secret)."""


class Connection:
    """A blocking, logged-in Kafka-protocol connection (one request at a time): the admin
    client's :class:`~tokensvc.admin.connection.BrokerConnection` on SASL_PLAINTEXT,
    with its failures as :class:`ClientError` ("login refused" when the broker said no)."""

    def __init__(self, address: tuple[str, int], username: str, password: str, *,
                 token: bool = False, cache: dict | None = None) -> None:
        config = ClientConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism=MECHANISM,
                              username=username, password=password, token_auth=token)
        self._conn = BrokerConnection(f"{address[0]}:{address[1]}", config, client_id="soak",
                                      salted_password_cache=cache)
        try:
            self._conn.open(time.monotonic() + REQUEST_TIMEOUT_S)
        except ConnectionLost as exc:
            raise ClientError(f"connect: {exc.reason}") from None
        except AdminError as exc:
            refused = exc.error not in (Errors.UNSUPPORTED_SASL_MECHANISM, Errors.ILLEGAL_SASL_STATE)
            raise ClientError(f"{'login' if refused else 'handshake'} refused: "
                              f"{error_name(exc.error)}") from None

    def call(self, api_key: int, version: int, body: dict) -> dict:
        try:
            return self._conn.request(ApiKey(api_key), body, time.monotonic() + REQUEST_TIMEOUT_S,
                                      version)
        except ConnectionLost as exc:
            raise ClientError(f"request: {exc.reason}") from None

    def close(self) -> None:
        self._conn.close()


def token_password(hmac: bytes) -> str:
    """A token's SCRAM password: its HMAC in base64."""
    return base64.b64encode(hmac).decode("ascii")


def error_name(code: int) -> str:
    """The Kafka error name of ``code`` ("NONE" for 0), or the number if it is unknown."""
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


class FaultCluster:
    """3 ZooKeeper nodes, 3 brokers on them, and a ZooKeeper client; the drivers subclass it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ensemble: ZooKeeperEnsemble | None = None
        self.cluster: LocalCluster | None = None
        self.zk: Any = None
        self.admin: tuple[str, str] = ("", "")

    def start_cluster(self, chroot: str, overrides: Mapping[str, str], *,
                      zk_tick_ms: int | None = None,
                      client_session_timeout_ms: int | None = None,
                      zk_hosts: list[str] | None = None,
                      zk_prefixes: list[list[str]] | None = None,
                      placements: Mapping[int, Placement] | None = None) -> None:
        """Start the ensemble (``zk_tick_ms``: its tickTime, default zk.server's), the
        brokers under ``/chroot`` with ``overrides``, and this driver's own ZooKeeper
        client (``client_session_timeout_ms``: the session it asks for, default
        ``ZkSettings``'). ``zk_hosts``/``zk_prefixes`` and ``placements`` put the nodes
        and brokers on hosts of their own (``faults.netns``) instead of loopback."""
        tick = {"tick_ms": zk_tick_ms} if zk_tick_ms else {}
        self.ensemble = ZooKeeperEnsemble(self.directory / "zookeeper", 3, hosts=zk_hosts,
                                          prefixes=zk_prefixes, **tick)
        self.ensemble.start()
        connect = f"{self.ensemble.connect}/{chroot}"
        # The stall meter every 50 ms, not 5: the fault tools never read it, and three
        # idle brokers at 5 ms take 12% of a core from the faults' own load.
        overrides = {"metrics.stall.sample.interval.ms": "50", **overrides}
        self.cluster = LocalCluster.up(self.directory / "cluster", brokers=3, zookeeper=connect,
                                       overrides=dict(overrides), die_with_parent=True,
                                       placements=placements)
        asked = {"session_timeout_ms": client_session_timeout_ms} \
            if client_session_timeout_ms is not None else {}
        self.zk = open_client(self.cluster.zk_settings(**asked))
        self.admin = (self.cluster.info["admin"]["username"],
                      self.cluster.info["admin"]["password"])

    def close(self) -> None:
        """Stop everything started, first resuming any broker or ZooKeeper node a fault
        left stopped."""
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()
        if self.cluster is not None:
            for broker in self.cluster.broker_ids():
                pid = self.cluster.broker_pid(broker)
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            self.cluster.down(grace=5.0)
        if self.ensemble is not None:
            for node in self.ensemble.nodes:
                node.resume()
            self.ensemble.stop()

    def address(self, broker: int) -> tuple[str, int]:
        host, _, port = self.cluster.broker_info(broker)["listeners"]["SASL_PLAINTEXT"] \
            .rpartition(":")
        return host, int(port)

    def controller(self) -> int | None:
        return zkraw.controller_of(self.zk)

    def described_token_ids(self, broker: int) -> set[str]:
        """The token ids ``broker`` describes to the admin (raises ClientError if it
        cannot be asked)."""
        conn = Connection(self.address(broker), *self.admin)
        try:
            answer = conn.call(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
        finally:
            conn.close()
        return {t["TokenId"] for t in answer["Tokens"]}

    def described_token_ends(self, broker: int) -> dict[str, int]:
        """Each token ``broker`` describes to the admin, with the moment it ends (the
        earlier of its expiry and its max lifetime; raises ClientError if it cannot be
        asked)."""
        conn = Connection(self.address(broker), *self.admin)
        try:
            answer = conn.call(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
        finally:
            conn.close()
        return {t["TokenId"]: min(t["ExpiryTimestamp"], t["MaxTimestamp"])
                for t in answer["Tokens"]}

    def token_login(self, broker: int, token_id: str, hmac: bytes, cache: dict | None) -> str:
        """One token login on a fresh connection to ``broker``: "ok", "refused" (the
        broker said no: the credential is not valid), "refused: <ERROR>" (the broker
        could not decide now and said so with a retriable error: a view of ZooKeeper it
        could not confirm current, a clock it does not trust, an audit it cannot write)
        or "connection" (it could not be asked)."""
        try:
            Connection(self.address(broker), token_id, token_password(hmac), token=True,
                       cache=cache).close()
        except ClientError as exc:
            return refusal_outcome(str(exc))
        return "ok"
