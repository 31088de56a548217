"""Listeners and TLS for a broker: the only room of the broker that opens sockets.

Owns one asyncio server per listener (on the Protocol API: each accepted
connection is a :class:`~tokensvc.broker.network.connection.Connection`; the TLS
context of SSL listeners from :mod:`tokensvc.broker.network.tls`),
``max.connections.per.ip`` bookkeeping, the
broker-wide request memory pool (``queued.max.request.bytes``) and the
precomputed ApiVersions and SaslHandshake responses its connections share.

It knows nothing of the broker object: requests go to the ``dispatch``
callable it is given (``dispatch(ctx, body) -> (response bytes, error code)``),
raw SASL frames after SaslHandshake v0 to ``raw_sasl``, and the SaslHandshake
state change to ``handshake``. A client can make its own connection fail; it
can never make the broker crash or stall other connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from tokensvc.broker.network.connection import (
    Connection,
    Dispatch,
    Handshake,
    RawSasl,
    ServerServices,
)
from tokensvc.broker.network.memory import RequestMemoryPool
from tokensvc.broker.network.precomputed import PrecomputedResponses
from tokensvc.broker.network.tls import server_ssl_context
from tokensvc.broker.sessions.session import Session
from tokensvc.core.config import BrokerConfig, Listener

log = logging.getLogger("tokensvc.broker.server")

LISTEN_BACKLOG = 1024


class BrokerServer:
    """The listeners of one broker and the connections they accepted."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        dispatch: Dispatch,
        raw_sasl: RawSasl,
        handshake: Handshake,
        sessions: Any,
        metrics: Any,
        clock: Any,
        on_session_expired: Callable[[Session], None],
        api_name: Callable[[int], str],
        addresses: dict[str, tuple[str, int]] | None = None,
    ) -> None:
        self.config = config
        self.pool = RequestMemoryPool(config.queued_max_request_bytes)
        self._services = ServerServices(
            config=config,
            dispatch=dispatch,
            raw_sasl=raw_sasl,
            handshake=handshake,
            sessions=sessions,
            metrics=metrics,
            clock=clock,
            on_session_expired=on_session_expired,
            api_name=api_name,
            precomputed=PrecomputedResponses(config.sasl_enabled_mechanisms),
            pool=self.pool,
            per_ip=Counter(),
            live=set(),
        )
        pool = self.pool
        live = self._services.live
        # Read when scraped: a gauge moved per connection took a lock twice per login.
        metrics.connections.set_function(lambda: len(live))
        metrics.gauge("tokensvc_request_memory_bytes",
                      "Request bytes held beyond the connections' own buffers "
                      "(queued.max.request.bytes caps it)", lambda: pool.used)
        metrics.gauge("tokensvc_request_memory_waiting",
                      "Connections not read until request memory is freed", lambda: pool.waiting)
        self._servers: dict[str, asyncio.AbstractServer] = {}
        # Each open listener's bound address; ``addresses``: a dict to fill (the cluster
        # view handlers get reads the broker's own endpoints from it).
        self.addresses: dict[str, tuple[str, int]] = {} if addresses is None else addresses

    @property
    def connections(self) -> int:
        """Open client connections."""
        return len(self._services.live)

    async def open(self, listeners: list[Listener]) -> None:
        loop = asyncio.get_running_loop()
        services = self._services
        for listener in listeners:
            if listener.name in self._servers:
                continue
            ctx = None
            if listener.security_protocol in ("SSL", "SASL_SSL"):
                ctx = server_ssl_context(self.config)
            server = await loop.create_server(
                lambda _listener=listener: Connection(services, _listener),
                listener.host, listener.port, ssl=ctx, reuse_address=True,
                backlog=LISTEN_BACKLOG,
            )
            self._servers[listener.name] = server
            sock = server.sockets[0].getsockname()
            self.addresses[listener.name] = (sock[0], sock[1])
            log.info("listening on %s://%s:%d", listener.name, sock[0], sock[1])

    async def close(self) -> None:
        for server in self._servers.values():
            server.close()
        for conn in list(self._services.live):
            conn.abort("broker stopping")
        for server in self._servers.values():
            try:
                await asyncio.wait_for(server.wait_closed(), 5)
            except Exception as exc:  # noqa: BLE001 - best effort on shutdown
                log.debug("listener did not close cleanly: %s", exc)
        self._servers.clear()
