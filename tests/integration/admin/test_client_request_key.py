"""A create whose answer is lost is retried to exactly one token (issue 27).

tokensvc's AdminClient sends its own request key in the request header (tokensvc's tagged
field) and reuses it on every retry of one call; the broker makes it the exactly-once key.
A TCP proxy in front of a real broker forwards the client's CreateDelegationToken, lets the
broker commit it, then drops the answer and resets both connections: the client retries
through the proxy with the same key and gets the first outcome back. Without the key the
retry made a second token.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tokensvc.admin import AdminClient
from tokensvc.client_config import load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.protocol.api import ApiKey


class LosesFirstCreateAnswer:
    """A TCP proxy that loses the answer to the first CreateDelegationToken it forwards."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.dropped = threading.Event()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            broker = socket.create_connection(self.upstream)
            hole = threading.Event()
            threading.Thread(target=self._requests, args=(client, broker, hole),
                             daemon=True).start()
            threading.Thread(target=self._answers, args=(broker, client, hole),
                             daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket,
                  hole: threading.Event) -> None:
        buffer = b""
        try:
            while data := client.recv(65536):
                buffer += data
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
                    size = struct.unpack(">i", buffer[:4])[0]
                    request, buffer = buffer[:4 + size], buffer[4 + size:]
                    api_key = struct.unpack(">h", request[4:6])[0]
                    if api_key == ApiKey.CREATE_DELEGATION_TOKEN and not self.dropped.is_set():
                        self.dropped.set()
                        hole.set()  # the answer to this request never reaches the client
                        broker.sendall(request)
                        time.sleep(1.0)  # the broker commits the create meanwhile
                        raise ConnectionResetError
                    broker.sendall(request)
        except OSError:
            pass
        finally:
            for sock in (client, broker):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def _answers(self, broker: socket.socket, client: socket.socket,
                 hole: threading.Event) -> None:
        try:
            while data := broker.recv(65536):
                if not hole.is_set():
                    client.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.closed = True
        self.listener.close()


pytestmark = pytest.mark.cluster(brokers=3)


@pytest.mark.parametrize("through", ["controller", "non-controller"])
def test_a_create_whose_answer_was_lost_is_retried_to_exactly_one_token(
    cluster: LocalCluster, through: str
) -> None:
    config = load_client_config(cluster.info["admin"]["properties"])
    with AdminClient(cluster.info["bootstrap_servers"], config, timeout_s=20) as admin:
        controller = admin.describe_cluster().controller_id
    broker = next(b for b in cluster.info["brokers"]
                  if (b["id"] == controller) == (through == "controller"))
    proxy = LosesFirstCreateAnswer(broker["listeners"]["SASL_PLAINTEXT"])
    owner = f"User:once-{through}"
    try:
        with AdminClient(proxy.address, config, timeout_s=20) as admin:
            token = admin.create_token(owner=owner)
        assert proxy.dropped.is_set(), "the proxy lost no answer: the test proves nothing"
    finally:
        proxy.close()
    # Counted on the broker that answered the create (read-your-writes): another broker
    # describes it only once it has followed the change.
    with AdminClient(broker["listeners"]["SASL_PLAINTEXT"], config, timeout_s=20) as admin:
        tokens = admin.describe_tokens(owners=[owner])
    assert [t.token_id for t in tokens] == [token.token_id]
