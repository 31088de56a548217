"""The broker: asyncio listeners, per-connection SASL state, request handlers.

Layout: ``session`` (pure connection state machine), ``context`` (what a
handler knows about a request), ``handlers/`` (one module per API family),
``server`` (sockets, TLS, framing, ordering, timeouts), ``broker`` (wiring of
caches, ZooKeeper sync, election, sweep, authorizer, audit).
"""
