"""The live-broker registry (``/brokers/ids/<id>``, or ``/tokensvc/brokers/ids/<id>``
beside a Kafka cluster: :class:`zk.layout.Coordination`) and the cluster id
(``/cluster/id``).

Owns: this broker's ephemeral registration (Kafka's version-5 JSON), a watched cache of
every live broker's registration, and creating or reading the cluster id.

Lifecycle (kazoo-recipe style): ``register()`` creates the ephemeral znode on the
caller's thread and fails with :class:`BrokerIdInUseError` when another live session
holds the id (as Kafka does, e.g. a previous process whose session has not expired yet).
``start()`` reads ``/brokers/ids`` once and then follows it with a children watch; the
worker thread re-reads the registrations (pipelined) on every change. On CONNECTED after
LOST (session expired: the registration is gone, and so are the watches) the worker
re-creates this broker's registration and re-reads the list; on CONNECTED after SUSPENDED
it re-reads the list (the cache may have missed changes). ``close()`` stops following and
deletes this broker's registration if its session owns it. The kazoo client belongs to
the caller.

Must not: block kazoo's event thread, or write anything but this broker's registration
and the cluster id (beside Kafka: never ``/cluster/id``, only tokensvc's own).
"""

from __future__ import annotations

import base64
import logging
import secrets
import threading
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient, KazooState

from tokensvc.core.clock import Clock, SystemClock
from zk import layout
from zk.errors import StoreError, ZnodeExists, ZnodeMissing, zk_call
from zk.reads import pipelined
from zk.token_store import delete_own_ephemeral
from zk.worker import SerialWorker

log = logging.getLogger(__name__)

_RETRY_S = 0.2


class BrokerIdInUseError(StoreError):
    """Another live ZooKeeper session already registered this broker id."""


def new_cluster_id() -> str:
    """16 random bytes, URL-safe base64 without padding (22 characters), like Kafka's."""
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode("ascii")


class BrokerRegistry:
    """Register this broker and follow the others; see the module docstring."""

    def __init__(self, client: KazooClient, *, clock: Clock | None = None,
                 paths: layout.Coordination = layout.ALONE) -> None:
        self._client = client
        self._paths = paths
        self._clock = clock or SystemClock()
        self._worker = SerialWorker("broker-registry")
        self._lock = threading.Lock()
        self._brokers: dict[int, dict[str, Any]] = {}
        self._own: tuple[int, dict[str, layout.Endpoint], str | None] | None = None
        self._suspended = False
        self._started = False
        self._listening = False

    # --- own registration --------------------------------------------------------------

    def register(
        self,
        broker_id: int,
        endpoints: Mapping[str, layout.Endpoint],
        *,
        rack: str | None = None,
    ) -> None:
        """Create ``/brokers/ids/<broker_id>`` (ephemeral); kept across session expiry.

        ``endpoints`` maps listener name -> (security protocol, host, port).
        """
        self._own = (int(broker_id), dict(endpoints), rack)
        self._ensure_root()
        self._create_own()
        self._listen()
        self._worker.start()

    def _create_own(self) -> None:
        if self._own is None:
            return
        broker_id, endpoints, rack = self._own
        path = self._paths.broker_path(broker_id)
        data = layout.encode_broker(endpoints, self._clock.now_ms(), rack=rack)
        try:
            zk_call(
                f"register broker {broker_id}",
                lambda: self._client.create(path, data, ephemeral=True),
            )
            log.info("registered broker %d", broker_id)
            return
        except ZnodeExists:
            pass
        stat = zk_call(f"read {path}", lambda: self._client.exists(path))
        if stat is not None and stat.ephemeralOwner == self._session_id():
            zk_call(f"update {path}", lambda: self._client.set(path, data))
            return
        raise BrokerIdInUseError(
            f"broker id {broker_id} is registered by another live session; "
            "wait for it to expire or use another broker.id"
        )

    # --- everyone's registrations ------------------------------------------------------

    def start(self) -> None:
        """Read every registration now, then follow ``/brokers/ids``."""
        if self._started:
            return
        self._started = True
        self._ensure_root()
        self._listen()
        self._refresh()
        self._worker.start()

    def brokers(self) -> dict[int, dict[str, Any]]:
        """Live brokers: id -> ``{"id", "version", "endpoints": {name: (protocol, host,
        port)}, "rack", "timestamp"}``. Cached and watched after ``start()``; read directly
        before."""
        if not self._started:
            return self._read_all(watch=False)
        with self._lock:
            return dict(self._brokers)

    def close(self) -> None:
        """Stop following; delete this broker's registration if this session owns it."""
        self._client.remove_listener(self._on_state)
        self._worker.close()
        if self._own is None:
            return
        path = self._paths.broker_path(self._own[0])
        delete_own_ephemeral(self._client, path)

    def _ensure_root(self) -> None:
        root = self._paths.broker_ids
        zk_call(f"create {root}", lambda: self._client.ensure_path(root))

    # --- cluster id --------------------------------------------------------------------

    def cluster_id(self) -> str:
        """The cluster id in ``/cluster/id``; created (22 random URL-safe chars) if absent.

        Beside Kafka (the paths say ``/cluster/id`` is not ours to write) it is only read:
        Kafka's first broker creates it. Until then, tokensvc reports an id of its own,
        kept in ``/tokensvc/cluster/id``."""
        if not self._paths.cluster_id_writable:
            try:
                data, _stat = zk_call("read /cluster/id",
                                      lambda: self._client.get(layout.CLUSTER_ID))
                return layout.decode_cluster_id(data)
            except ZnodeMissing:
                log.warning("no Kafka cluster id in /cluster/id yet (no Kafka broker has "
                            "started on this ensemble and chroot); using tokensvc's own in %s",
                            layout.OWN_CLUSTER_ID)
                return self._read_or_create_id(layout.OWN_CLUSTER_ID)
        return self._read_or_create_id(layout.CLUSTER_ID)

    def _read_or_create_id(self, path: str) -> str:
        parent = path.rsplit("/", 1)[0]
        zk_call(f"create {parent}", lambda: self._client.ensure_path(parent))
        try:
            zk_call(
                f"create {path}",
                lambda: self._client.create(path, layout.encode_cluster_id(new_cluster_id())),
            )
        except ZnodeExists:
            pass
        data, _stat = zk_call(f"read {path}", lambda: self._client.get(path))
        return layout.decode_cluster_id(data)

    # --- kazoo callbacks (kazoo's thread: never block) ----------------------------------

    def _listen(self) -> None:
        if not self._listening:
            self._listening = True
            self._client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._suspended = True
            self._worker.submit("register", self._register_task)
        elif state == KazooState.SUSPENDED:
            self._suspended = True
        elif state == KazooState.CONNECTED and self._suspended:
            self._suspended = False
            self._worker.submit("refresh", self._refresh_task)

    def _on_children(self, _event: object) -> None:
        self._worker.submit("refresh", self._refresh_task)

    # --- worker tasks ------------------------------------------------------------------

    def _register_task(self) -> None:
        # Submitted on LOST; kazoo queues the create until the new session is up.
        while not self._worker.closed:
            try:
                self._create_own()
                return
            except BrokerIdInUseError as exc:
                log.error("%s", exc)
            except StoreError as exc:
                log.warning("re-registering broker failed (%s); retrying", exc)
            if self._worker.sleep(_RETRY_S):
                return

    def _refresh_task(self) -> None:
        while self._started and not self._worker.closed:
            try:
                self._refresh()
                return
            except (StoreError, layout.LayoutError) as exc:
                log.warning("reading broker registrations failed (%s); retrying", exc)
            if self._worker.sleep(_RETRY_S):
                return

    def _refresh(self) -> None:
        found = self._read_all(watch=True)
        with self._lock:
            self._brokers = found

    def _read_all(self, *, watch: bool) -> dict[int, dict[str, Any]]:
        callback = self._on_children if watch else None
        names = zk_call(
            "list brokers",
            lambda: self._client.get_children(self._paths.broker_ids, watch=callback),
        )
        ids = sorted(int(n) for n in names if n.isdigit())
        values = pipelined(self._client.get_async, [self._paths.broker_path(i) for i in ids],
                           "read brokers", timeout_s=None)
        found: dict[int, dict[str, Any]] = {}
        for broker_id, value in zip(ids, values):
            if value is None:
                continue  # went away between the listing and the read
            try:
                found[broker_id] = layout.decode_broker(broker_id, value[0])
            except layout.LayoutError as exc:
                log.warning("skipping broker registration %d: %s", broker_id, exc)
        return found

    def _session_id(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None
