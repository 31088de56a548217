"""The broker's network room: listeners, connections and the bytes on them.

``server`` (listeners, TLS, ``max.connections.per.ip``), ``connection`` (one client
connection on asyncio's Protocol API: order, back-pressure, timeouts), ``receive`` (the
receive buffer frames are parsed from), ``memory`` (the broker-wide request memory
pool), ``trampoline`` (finishing a login coroutine in a task only when it waits),
``precomputed`` (ApiVersions and SaslHandshake responses encoded once) and ``decoding``
(how a client request is read). Which API a session may send, and how it is routed, is
the session's answer (:mod:`tokensvc.broker.sessions.session`), not this room's.
"""
