"""Ports for the services tokensvc starts on one host: a free one, and whether one is
taken. Binding here proves nothing for later (another process may take the port before
the service binds it): callers that choose a free port retry with another when the
service finds it taken.
"""

from __future__ import annotations

import random
import socket

# Ports are chosen from here up to the start of the kernel's ephemeral range.
LOWEST_PORT = 10_000
_TRIES = 200


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now.

    Chosen below the kernel's ephemeral range: a service stopped and started again binds
    its port again, and in between any outgoing connection on the host may be given that
    port as its local one when it is in the ephemeral range (on a busy test machine, one
    restart in a few hundred met "address already in use"). Falls back to the kernel's
    choice when that range leaves no room."""
    low, _high = ephemeral_range()
    if low - LOWEST_PORT >= 1_000:
        for _ in range(_TRIES):
            port = random.randrange(LOWEST_PORT, low)
            if not port_in_use(port, host):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` cannot be bound now (something listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
        return False

