"""Controller election through the ephemeral ``/controller`` znode, as Kafka does it.

Where: :class:`zk.layout.Coordination` gives the paths. Alone on its ensemble tokensvc uses
Kafka's ``/controller`` and ``/controller_epoch``; beside a Kafka cluster
(``kafka.zookeeper.shared=true``) it uses ``/tokensvc/controller`` and
``/tokensvc/controller_epoch``, so Kafka's controller election never sees a tokensvc broker
(Kafka's stops as soon as ``/controller`` names any broker id). Below, ``/controller`` and
``/controller_epoch`` stand for whichever pair the paths name.

Eligibility: ``eligible()`` (default: always) is asked before every attempt to win and
whenever this broker finds it holds the role; a broker that may not be controller (its
clock is beyond ``max.clock.skew.ms``: the broker passes its clock gate's verdict) does not
run, and a controller that may no longer be one resigns at once, so a healthy broker takes
over. :meth:`reconsider` is how the caller says the answer may have changed.

Owns: winning, watching and giving up controllership, the ``/controller_epoch`` counter,
and the *guard* that keeps a deposed controller from writing.

How it works (kazoo-recipe style, lifecycle start()/close()):

* ``start()`` makes sure ``/controller_epoch`` exists, then (on its worker thread) reads
  ``/controller`` with a data watch. When the znode is absent it tries to win with ONE
  transaction: create the ephemeral ``/controller`` ``{"version":1,"brokerid":N,...}``
  and set ``/controller_epoch`` to epoch + 1, conditional on the epoch znode's version.
  Exactly one broker's transaction succeeds; the others see NodeExists (or BadVersion)
  and watch the winner's znode. When it is deleted (the controller closed, or its
  session expired) every watcher tries again.
* This broker is the controller only while ``/controller`` names its broker id AND was
  created by its current session (``ephemeralOwner``): an old znode left by an earlier
  process with the same id does not count, it is waited out like any other.
* :meth:`guard` is ``("/controller_epoch", version)``: the epoch znode's version this
  broker set when it won. Every later win moves that version on, so a write carrying
  the guard (a ``check`` op in the write's transaction, see :mod:`zk.token_store`)
  fails once anyone else has won -- even if this broker has not yet noticed that its
  session expired. (The ``/controller`` znode's own version cannot serve: a new winner's
  znode starts at version 0 again.)
* Connection SUSPENDED: this broker stops *acting* as the controller at once
  (``is_controller`` is False, so envelopes are refused NOT_CONTROLLER and the
  ``tokensvc_controller`` gauge reads 0) but keeps its guard: a reconnect within the same
  session resumes without an election. Why: the others elect a new controller only once
  this session has expired on the server, at least a session timeout after the server
  last heard from us, while kazoo suspends at two thirds of it; so two brokers never
  act as controller at the same time, even when this one is cut from ZooKeeper and
  cannot learn that its session is gone (issue #27). Writes are fenced by the guard in
  any case. LOST (session expired): this broker stops being the controller for good
  (``guard()`` returns None), and on reconnect it reads ``/controller`` again and runs
  for election with its new session. CONNECTED always re-reads, which re-arms the watch.
* ``on_change(controller_id, is_me)`` runs on the election's report thread -- never
  kazoo's, and never queued behind a ZooKeeper call of the worker (a read that waits
  out a suspended connection must not hold back the news that this broker stopped
  acting) -- each time the known controller or this broker's role changes, in order.
* ``close()`` deletes ``/controller`` if this session owns it, so another broker takes
  over at once instead of after the session timeout.

Must not: write anything but its ``/controller`` and ``/controller_epoch``, or block
kazoo's event thread. The kazoo client belongs to the caller and stays open after close().
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
)

from tokensvc.core.clock import Clock, SystemClock
from zk import layout
from zk.errors import StoreError, ZnodeExists, ZnodeMissing, zk_call
from zk.token_store import Guard, delete_own_ephemeral
from zk.worker import SerialWorker

log = logging.getLogger(__name__)

ChangeListener = Callable[[int | None, bool], None]

_RETRY_S = 0.2


class ControllerElection:
    """Run for controller as ``broker_id`` on ``client``; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        broker_id: int,
        *,
        on_change: ChangeListener | None = None,
        clock: Clock | None = None,
        paths: layout.Coordination = layout.ALONE,
        eligible: Callable[[], bool] | None = None,
    ) -> None:
        self._client = client
        self._paths = paths
        self._eligible = eligible or (lambda: True)
        self._broker_id = int(broker_id)
        self._on_change = on_change
        self._clock = clock or SystemClock()
        self._worker = SerialWorker(f"controller-election-{broker_id}")
        # Reports of the role (on_change) run here, in order, apart from ZooKeeper calls.
        self._reporter = SerialWorker(f"controller-election-{broker_id}-reports")
        self._lock = threading.Lock()
        self._controller_id: int | None = None
        self._guard: Guard | None = None
        self._epoch: int | None = None
        self._reported: tuple[int | None, bool] | None = None
        self._started = False
        self._suspended = False  # connection lost, session perhaps still alive

    # --- state -------------------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self._broker_id

    def controller_id(self) -> int | None:
        """The controller's broker id as last seen through the watch (None: none known)."""
        with self._lock:
            return self._controller_id

    @property
    def is_controller(self) -> bool:
        """Whether this broker acts as the controller now: it won with its current session
        and its connection to ZooKeeper is not suspended."""
        with self._lock:
            return self._guard is not None and not self._suspended

    def guard(self) -> Guard | None:
        """``("/controller_epoch", version)`` while this broker is the controller, else None."""
        with self._lock:
            return self._guard

    @property
    def epoch(self) -> int | None:
        """The controller epoch this broker won with, while it is the controller."""
        with self._lock:
            return self._epoch if self._guard is not None and not self._suspended else None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Begin running for controller (asynchronously: watch ``is_controller``)."""
        if self._started:
            return
        self._started = True
        self._ensure_epoch()
        self._client.add_listener(self._on_state)
        self._reporter.start()
        self._worker.start()
        self._refresh_soon()

    def close(self) -> None:
        """Stop; resign (delete ``/controller``) if this session holds it."""
        self._client.remove_listener(self._on_state)
        self._worker.close()
        self._reporter.close()
        with self._lock:
            owned = self._guard is not None
            self._guard = None
            self._epoch = None
        if owned:
            self._resign()

    def _resign(self) -> None:
        if delete_own_ephemeral(self._client, self._paths.controller):
            log.info("broker %d resigned as controller", self._broker_id)

    def reconsider(self) -> None:
        """Ask ``eligible()`` again (its answer changed): an ineligible controller resigns
        at once, so another broker wins; an eligible broker runs again if there is no
        controller."""
        self._refresh_soon()

    # --- kazoo callbacks (kazoo's thread: never block) ----------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            with self._lock:
                self._guard = None
                self._epoch = None
                self._controller_id = None
                self._suspended = False
            self._report_soon()
        elif state == KazooState.SUSPENDED:
            with self._lock:
                self._suspended = True
            self._report_soon()
        elif state == KazooState.CONNECTED:
            with self._lock:
                self._suspended = False
            self._refresh_soon()

    def _on_watch(self, _event: object) -> None:
        self._refresh_soon()

    # --- worker ------------------------------------------------------------------------

    def _refresh_soon(self) -> None:
        self._worker.submit("refresh", self._refresh_task)

    def _report_soon(self) -> None:
        self._reporter.submit("report", self._report)

    def _refresh_task(self) -> None:
        while not self._worker.closed:
            try:
                self._refresh()
                return
            except StoreError as exc:
                log.warning("controller election: %s; retrying", exc)
            if self._worker.sleep(_RETRY_S):
                return

    def _refresh(self) -> None:
        """Read ``/controller`` (arming the watch); when absent, try to win; repeat until
        a controller is known."""
        while not self._worker.closed:
            try:
                data, stat = zk_call(
                    f"read {self._paths.controller}",
                    lambda: self._client.get(self._paths.controller, watch=self._on_watch),
                )
            except ZnodeMissing:
                if not self._eligible():
                    self._stand_aside()
                    return
                self._try_win()
                continue
            try:
                controller = layout.decode_controller(data)
            except layout.LayoutError as exc:
                log.warning("unreadable %s: %s", self._paths.controller, exc)
                controller = None
            mine = controller == self._broker_id and stat.ephemeralOwner == self._session_id()
            if mine and not self._eligible():
                with self._lock:
                    self._guard = None
                    self._epoch = None
                self._resign()
                continue
            with self._lock:
                self._controller_id = controller
                if not mine:
                    self._guard = None
                    self._epoch = None
            self._report_soon()
            return

    def _stand_aside(self) -> None:
        # No controller, and this broker may not be one: no controller known until another
        # broker wins (its znode fires the watch armed by the read) or this one is eligible
        # again (reconsider()).
        with self._lock:
            self._controller_id = None
            self._guard = None
            self._epoch = None
        self._report_soon()

    def _try_win(self) -> None:
        self._ensure_epoch()
        data, stat = zk_call(
            f"read {self._paths.controller_epoch}",
            lambda: self._client.get(self._paths.controller_epoch),
        )
        epoch = layout.decode_controller_epoch(data) + 1
        tx = self._client.transaction()
        tx.create(
            self._paths.controller,
            layout.encode_controller(self._broker_id, self._clock.now_ms()),
            ephemeral=True,
        )
        tx.set_data(self._paths.controller_epoch, layout.encode_controller_epoch(epoch),
                    stat.version)
        results = zk_call("run for controller", tx.commit)
        if isinstance(results[0], NodeExistsError) or isinstance(results[1], BadVersionError):
            return  # someone else won; the caller reads and watches their znode
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if failure is not None:
            raise StoreError(f"run for controller: ZooKeeper error {failure.__class__.__name__}")
        with self._lock:
            self._guard = (self._paths.controller_epoch, results[1].version)
            self._epoch = epoch
            self._controller_id = self._broker_id
        log.info("broker %d is the controller (epoch %d)", self._broker_id, epoch)

    def _report(self) -> None:
        with self._lock:
            now = (self._controller_id, self._guard is not None and not self._suspended)
            if now == self._reported:
                return
            self._reported = now
        if self._on_change is not None:
            self._on_change(*now)

    # --- helpers -----------------------------------------------------------------------

    def _ensure_epoch(self) -> None:
        try:
            zk_call(
                f"create {self._paths.controller_epoch}",
                lambda: self._client.create(
                    self._paths.controller_epoch, layout.encode_controller_epoch(0),
                    makepath=True,
                ),
            )
        except ZnodeExists:
            pass

    def _session_id(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None
