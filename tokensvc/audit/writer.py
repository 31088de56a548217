"""The broker's audit log: a bounded queue in front of one writer thread.

:class:`AuditLog` owns the audit files of one broker: their names
(``audit-<broker_id>-<yyyymmddTHHMMSS>-<n>.jsonl``, UTC time of the file's
first event), their mode (0640), rotation by size and by time, flushing
(at least every ``flush_interval_ms`` while lines are pending, and whenever the
queue stays empty for :data:`_LINGER_S`), and, with ``required=True``, the
durability the broker waits for before it answers (``audit.required``).

:meth:`AuditLog.emit` is called on the request path, so it must never block or
take a lock, and never do file I/O: it validates and stamps the event, then
appends it to a bounded deque that the writer thread drains. After each batch
the writer lingers a few milliseconds for more before it flushes and parks; emit
wakes a parked writer with a byte on a pipe (a system call, no lock), so under
load the request path makes no system call for the audit at all.
When the queue is full the *newest* event (the one being emitted) is dropped
and counted; the writer then puts an ``"audit"`` line with the number dropped
into the log before the next events it writes, so a gap is
visible in the log itself and not only in a metric. Dropping rather than
blocking is deliberate: a slow disk must not stall authentication.

Lines reach a file only whole (:class:`~tokensvc.audit.appender.LineAppender`): a
write that fails part-way is cut back to the last complete line. In the default
mode the lines of a failed write are dropped and counted like a full queue's.

``required=True`` (``audit.required``) changes three things:

* :meth:`AuditLog.durable` -- awaited by the broker before it answers a login or a
  write -- puts a barrier into the queue; the writer resolves it once every line
  before it is written *and fsynced*. There is no linger: the writer writes and
  fsyncs whatever is queued, and what arrives during that fsync shares the next one
  (one fsync per group, as the controller's group commit shares a transaction).
* Lines that cannot be written are never dropped: they stay in order and are written
  again (retried every :data:`RETRY_S`), so an event is written once or not yet, never
  twice and never torn.
* :meth:`AuditLog.refusal` says whether a new login or write may start. The writer
  holds a reserve file (``.audit-reserve-<broker_id>``, ``reserve_bytes``, allocated
  and fsynced). When a write fails the log turns unwritable (logged once, the
  ``writable`` flag the gauge shows), the reserve is released and the write retried
  at once: requests already admitted -- whose change may be committed -- still get
  their events on disk, and no new one starts. It turns writable again by itself
  when everything pending is written and the reserve could be held again with as
  much space again free (so a reserve another broker on the same disk gives up does
  not make this one flap).

Secret material never gets this far: ``emit`` writes a value that looks like
base64 of 64+ bytes (often chosen by a client: a user name) as
:data:`~tokensvc.audit.events.REDACTED`, and :func:`tokensvc.audit.events.build_event`
refuses secret-looking field names; ``emit`` raises
:class:`~tokensvc.audit.events.AuditEventError` to the caller for malformed events.

Must not: block or do I/O in ``emit``/``refusal``; know what a request is.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import random
import select
import threading
import time
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tokensvc.audit.appender import OS_OPS, FileOps, LineAppender, TornTail
from tokensvc.audit.events import (
    AuditEventError,
    build_event,
    dropped_event,
    redact_secret_values,
    stamp,
)
from tokensvc.core.clock import Clock, SystemClock
from tokensvc.core.errors import Errors, KafkaError

log = logging.getLogger(__name__)

FILE_MODE = 0o640
DIR_MODE = 0o750
RESERVE_MODE = 0o600
_BATCH = 1024
#: How long the writer waits for more events after writing a batch before it flushes
#: and parks: under load it then writes every few milliseconds, woken by nobody.
_LINGER_S = 0.005
#: Lines held before a write in the default mode (the old file buffer's size).
_BUFFER_BYTES = 256 * 1024
#: While unwritable (required mode): how often the writer tries again.
RETRY_S = 0.25
#: The reason a refused request is audited and logged with.
AUDIT_UNAVAILABLE = "audit_unavailable"
# One encoder for every line: json.dumps with non-default arguments builds a new one per call.
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
SYSTEM_CLOCK = SystemClock()


_IDS = random.Random(int.from_bytes(os.urandom(16), "big"))
_UUID4_CLEAR = ((1 << 128) - 1) ^ ((0xF << 76) | (0x3 << 62))
_UUID4_SET = (0x4 << 76) | (0x2 << 62)


def new_event_id() -> str:
    """A random version-4 UUID as 32 hex digits, as ``uuid.uuid4().hex`` gives, built from
    one ``getrandbits`` call (event ids need uniqueness, not unpredictability)."""
    return f"{(_IDS.getrandbits(128) & _UUID4_CLEAR) | _UUID4_SET:032x}"


def audit_file_name(broker_id: int, opened_ms: int, n: int) -> str:
    """``audit-<broker_id>-<yyyymmddTHHMMSS>-<n>.jsonl`` with the time in UTC."""
    stamp_text = datetime.fromtimestamp(opened_ms / 1000, UTC).strftime("%Y%m%dT%H%M%S")
    return f"audit-{broker_id}-{stamp_text}-{n}.jsonl"


class AuditUnavailable(KafkaError):
    """``audit.required`` and the audit cannot be written: the request is refused (or,
    admitted before, not answered in time) with REQUEST_TIMED_OUT, the retriable code
    a stale view gets too."""

    reason = AUDIT_UNAVAILABLE

    def __init__(self, message: str) -> None:
        super().__init__(Errors.REQUEST_TIMED_OUT, message)


class _Bulk:
    """Events of one shape queued as one item (:meth:`AuditLog.emit_many`): built, stamped
    and encoded by the writer thread."""

    __slots__ = ("common", "event_type", "rows", "ts")

    def __init__(self, event_type: str, common: dict[str, Any],
                 rows: tuple[dict[str, Any], ...], ts: int) -> None:
        self.event_type = event_type
        self.common = common
        self.rows = rows
        self.ts = ts


class _Barrier:
    """A place in the queue: resolved once every line before it is durable."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future


def _settle(futures: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for future in futures:
        if not future.done():
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


class AuditLog:
    """Non-blocking audit sink of one broker (see the module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        broker_id: int,
        *,
        queue_size: int = 10_000,
        max_file_bytes: int = 64 * 1024 * 1024,
        rotate_interval_ms: int = 3_600_000,
        clock: Clock = SYSTEM_CLOCK,
        on_full: str = "drop-newest",
        flush_interval_ms: int = 200,
        required: bool = False,
        reserve_bytes: int = 1024 * 1024,
        file_ops: FileOps = OS_OPS,
    ) -> None:
        if on_full != "drop-newest":
            raise ValueError(f"on_full={on_full!r}: only 'drop-newest' is supported")
        if queue_size < 1 or max_file_bytes < 1 or rotate_interval_ms < 1:
            raise ValueError("queue_size, max_file_bytes and rotate_interval_ms must be positive")
        if required and directory is None:
            raise ValueError("a required audit log needs a directory")
        self._directory = Path(directory) if directory is not None else None
        self._broker_id = broker_id
        self._clock = clock
        self._max_file_bytes = max_file_bytes
        self._rotate_interval_ms = rotate_interval_ms
        self._flush_s = flush_interval_ms / 1000.0
        self._required = required
        self._reserve_bytes = reserve_bytes
        self._ops = file_ops
        # The hand-off to the writer thread: deque.append and popleft are atomic, so the
        # request path takes no lock; a byte on the pipe wakes the writer only when it is
        # parked (queue.Queue took a lock and ran Condition.notify per event; a wake-up on
        # every empty-to-non-empty turn cost 5-9 % of a loaded broker's CPU in B1).
        self._pending: deque[Any] = deque()
        self._wake_r, self._wake_w = -1, -1
        self._queue_size = queue_size
        # True while the writer sleeps with nothing to do: only then does emit() wake it.
        self._parked = False
        self._stopping = False
        self._lock = threading.Lock()
        self._dropped = 0
        self._dropped_reported = 0
        self._written = 0
        self._refused = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        # Read by the loop thread (refusal, the gauge); set by the writer thread. A
        # required log starts unwritable until its reserve is held.
        self._writable = not required
        self._unwritable_since = 0.0
        self._down_logged = False
        self._last_error = ""
        # Owned by the writer thread once started.
        self._file: LineAppender | None = None
        self._file_opened_ms = 0
        self._file_seq = 0
        self._lines: list[tuple[int, bytes, bool]] = []  # (ts, line, is an event): not yet written
        self._lines_bytes = 0
        self._waiting: list[asyncio.Future[None]] = []
        self._last_flush = 0.0
        self._retry_at = 0.0
        self._reserve_held = False

    @classmethod
    def disabled(cls) -> AuditLog:
        """A sink that validates events and writes nothing (no ``audit.log.dir``)."""
        return cls(None, -1)

    @property
    def enabled(self) -> bool:
        return self._directory is not None

    @property
    def required(self) -> bool:
        return self._required

    @property
    def writable(self) -> bool:
        """False while the last write failed (or, required, the reserve is not held)."""
        return self._writable

    @property
    def queue_depth(self) -> int:
        return len(self._pending) + len(self._lines)

    @property
    def dropped(self) -> int:
        return self._dropped

    @property
    def refused(self) -> int:
        """Logins and writes refused because the required audit could not be written."""
        return self._refused

    @property
    def written(self) -> int:
        """Events written to files (the writer's own ``"audit"`` lines not counted)."""
        return self._written

    # -- request path -----------------------------------------------------------

    def emit(self, event_type: str, **fields: Any) -> bool:
        """Queue one event; True if queued, False if disabled, closed or dropped.

        Never blocks. Raises ``AuditEventError`` for an event outside the schema
        or a field whose name says it holds secret material; a value that looks
        like base64 of 64+ bytes is written as ``REDACTED``.
        """
        body = build_event(event_type, redact_secret_values(fields))
        if self._directory is None:
            return False
        if self._closed:
            self._count_drop()
            return False
        return self._enqueue(stamp(body, ts=self._clock.now_ms(), broker_id=self._broker_id,
                                   event_id=new_event_id()), 1)

    def emit_many(self, event_type: str, common: dict[str, Any],
                  rows: Sequence[dict[str, Any]]) -> int:
        """Queue one event per row (``common``'s fields and the row's own), all stamped
        with this instant; returns how many were queued (0: disabled, closed or dropped).

        For the events of one bulk operation (a revocation's, one per token): the first
        row's event is built here, so a malformed shape raises ``AuditEventError`` as
        :meth:`emit` does, and the events are built, redacted and stamped by the writer
        thread, off the request path (ten thousand built on the controller's event loop
        were half its work in a revocation). A later row the writer cannot build is
        logged and counted as dropped. One call takes one place in the queue: callers
        keep calls to tens of rows (a revocation: 64).
        """
        if not rows:
            return 0
        build_event(event_type, redact_secret_values({**common, **rows[0]}))
        if self._directory is None:
            return 0
        if self._closed:
            self._count_drop(len(rows))
            return 0
        bulk = _Bulk(event_type, dict(common), tuple(rows), self._clock.now_ms())
        return len(rows) if self._enqueue(bulk, len(rows)) else 0

    def _enqueue(self, item: Any, events: int) -> bool:
        """Put ``item`` (``events`` events) on the queue, or drop and count them when it
        is full; wake a parked writer."""
        pending = self._pending
        # A required log admits no new request past queue_size (refusal), so the second
        # half is room for the events of requests already admitted.
        if len(pending) >= (2 * self._queue_size if self._required else self._queue_size):
            self._count_drop(events)
            return False
        pending.append(item)
        # Appended first, the flag read second; the writer sets the flag first and reads
        # the deque second: one of the two always sees the other.
        if self._parked:
            self._parked = False
            self._wake()
        return True

    def refusal(self) -> AuditUnavailable | None:
        """For a required log: why a new login or write may not start now (counted), or
        None. Always None for a log that is not required."""
        if not self._required:
            return None
        if self._writable and self.queue_depth < self._queue_size:
            return None
        self._refused += 1
        if not self._writable:
            return AuditUnavailable(f"the audit log cannot be written ({self._last_error}); "
                                    "audit.required=true")
        return AuditUnavailable("the audit queue is full; audit.required=true")

    async def durable(self, timeout_s: float) -> None:
        """Return once every event emitted before this call is written and fsynced.

        At once for a log that is not required. Raises :class:`AuditUnavailable` when
        that takes longer than ``timeout_s`` or the log closes first.
        """
        if not self._required or self._closed:
            if self._required:
                raise AuditUnavailable("the audit log is closed")
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Barrier(future))
        if self._parked:
            self._parked = False
            self._wake()
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise AuditUnavailable(
                f"the audit event was not written within {timeout_s:.1f}s "
                f"({self._last_error or 'writer busy'}); audit.required=true") from None

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the writer has wake-ups enough
        except OSError:
            pass  # not started, or closed: close() writes what is queued

    def _count_drop(self, n: int = 1) -> None:
        with self._lock:
            self._dropped += n

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> None:
        """Create the directory (0750) and start the writer thread. Idempotent."""
        if self._directory is None or self._thread is not None:
            return
        self._directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self._last_flush = time.monotonic()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(
            target=self._run, name=f"audit-writer-{self._broker_id}", daemon=True
        )
        self._thread.start()

    def close(self, timeout: float = 10) -> None:
        """Write everything queued so far, close the file and stop the thread.

        Events emitted after ``close`` are counted as dropped. Idempotent.
        """
        if self._directory is None or self._closed:
            self._closed = True
            return
        self._closed = True
        self.start()
        thread = self._thread
        assert thread is not None
        self._stopping = True
        self._wake()
        thread.join(timeout)
        if thread.is_alive():
            log.warning("audit writer still busy after %.1fs; %d events queued",
                        timeout, self.queue_depth)

    # -- writer thread ----------------------------------------------------------

    def _run(self) -> None:
        pending = self._pending
        if self._required:
            self._recover()
        while True:
            # Read the flag before draining: what was queued before close() is written.
            stopping = self._stopping
            took = self._take(pending)
            if self._required:
                self._step_required()
                if pending:
                    continue
                if stopping:
                    break
            else:
                if took:
                    if (self._lines_bytes >= _BUFFER_BYTES
                            or time.monotonic() - self._last_flush >= self._flush_s):
                        self._flush()
                    if not pending and not stopping:
                        # Linger: under load the next events come within milliseconds, and
                        # collecting them costs the request path no wake-up (no system
                        # call, no hand-off of the GIL) and this thread one write per batch.
                        self._wait(_LINGER_S)
                    continue
                if stopping:
                    break
                # Nothing came while lingering: flush, then park until emit() wakes us.
                if self._lines:
                    self._flush()
            self._parked = True
            if pending or self._stopping:
                self._parked = False
                continue
            self._wait(self._idle_timeout())
            self._parked = False
        self._finish()

    def _finish(self) -> None:
        self._write_dropped_marker()
        if self._required:
            self._step_required(final=True)
            if self._waiting or self._lines:
                log.error("audit writer stopping with %d events not written: %s",
                          len(self._lines), self._last_error)
                self._resolve(AuditUnavailable("the audit log closed before the event "
                                               "was written"))
        else:
            self._flush()
        self._close_file()
        wake_r, wake_w = self._wake_r, self._wake_w
        self._wake_r = self._wake_w = -1  # a late emit's wake-up then fails harmlessly
        os.close(wake_r)
        os.close(wake_w)

    def _idle_timeout(self) -> float | None:
        if self._required and (not self._writable or self._lines or self._waiting):
            return max(0.0, self._retry_at - time.monotonic())
        return None

    def _wait(self, timeout: float | None) -> None:
        ready, _, _ = select.select([self._wake_r], [], [], timeout)
        if ready:
            os.read(self._wake_r, 4096)

    def _take(self, pending: deque[Any]) -> int:
        """Move up to a batch of queued items into lines (events) and waiting (barriers)."""
        if not pending:
            return 0
        self._write_dropped_marker()
        lines, waiting = self._lines, self._waiting
        # Unwritable and required: what waits for the disk stays bounded here; past it,
        # the queue fills and emit drops (and counts) the newest.
        room = self._queue_size if self._required and not self._writable else 1 << 62
        taken = 0
        while pending and taken < _BATCH and len(lines) < room:
            item = pending.popleft()
            taken += 1
            if type(item) is _Barrier:
                waiting.append(item.future)
                continue
            if type(item) is _Bulk:
                self._take_bulk(item)
                continue
            line = (_ENCODE(item) + "\n").encode()
            lines.append((item["ts"], line, True))
            self._lines_bytes += len(line)
        return taken

    def _take_bulk(self, bulk: _Bulk) -> None:
        lines = self._lines
        common, broker_id = bulk.common, self._broker_id
        for row in bulk.rows:
            try:
                body = build_event(bulk.event_type, redact_secret_values({**common, **row}))
            except AuditEventError as exc:
                log.error("audit event of a bulk not written: %s", exc)
                self._count_drop()
                continue
            event = stamp(body, ts=bulk.ts, broker_id=broker_id, event_id=new_event_id())
            line = (_ENCODE(event) + "\n").encode()
            lines.append((bulk.ts, line, True))
            self._lines_bytes += len(line)

    def _write_dropped_marker(self) -> None:
        total = self._dropped
        if total == self._dropped_reported:
            return
        now = self._clock.now_ms()
        marker = stamp(
            dropped_event(dropped=total - self._dropped_reported, dropped_total=total),
            ts=now,
            broker_id=self._broker_id,
            event_id=new_event_id(),
        )
        line = (_ENCODE(marker) + "\n").encode()
        self._lines.append((now, line, False))
        self._lines_bytes += len(line)
        self._dropped_reported = total

    # -- default mode: write, drop on failure -------------------------------------

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._lines:
            return
        try:
            self._write_lines(sync=False)
        except OSError as exc:
            lost = sum(1 for _, _, is_event in self._lines if is_event)
            self._count_drop(lost)
            self._lines.clear()
            self._lines_bytes = 0
            self._failed(exc, f"{lost} events lost")
            return
        self._recovered()

    # -- required mode: write and fsync, keep on failure --------------------------

    def _step_required(self, final: bool = False) -> None:
        now = time.monotonic()
        if self._lines or self._waiting:
            if not (self._writable or final or now >= self._retry_at):
                return
            if self._commit():
                return
            if self._release_reserve() and self._commit():
                return  # the reserve made room for what was admitted
            self._retry_at = time.monotonic() + RETRY_S
            return
        if not self._writable and (final or now >= self._retry_at):
            self._recover()

    def _commit(self) -> bool:
        """Write and fsync every pending line; resolve the barriers. False on failure."""
        try:
            self._write_lines(sync=True)
        except OSError as exc:
            self._failed(exc, "refusing logins and writes until it can be written again")
            return False
        self._resolve(None)
        if not self._writable:
            self._recover()
        return True

    def _recover(self) -> None:
        """Writable again once the reserve is held (and nothing is pending)."""
        if self._hold_reserve():
            self._recovered()
        else:
            self._went_down(self._last_error, "refusing logins and writes until the "
                            f"reserve of {self._reserve_bytes} bytes can be held")
            self._retry_at = time.monotonic() + RETRY_S

    def _resolve(self, error: BaseException | None) -> None:
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return
        loop = waiting[0].get_loop()
        try:
            loop.call_soon_threadsafe(_settle, waiting, error)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    def _reserve_path(self) -> Path:
        assert self._directory is not None
        return self._directory / f".audit-reserve-{self._broker_id}"

    def _hold_reserve(self) -> bool:
        if self._reserve_held:
            return True
        path = self._reserve_path()
        try:
            self._directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)  # type: ignore[union-attr]
            # Hysteresis: room for the reserve and as much again, so a reserve another
            # writer on the same disk just gave up does not make this one flap.
            if self._ops.free_bytes(str(self._directory)) < 2 * self._reserve_bytes:
                # The cause a refusal names stays the write's error, if one failed.
                self._last_error = self._last_error or (
                    f"less than twice audit.required.reserve.bytes ({self._reserve_bytes}) "
                    "free")
                return False
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, RESERVE_MODE)
            try:
                self._ops.allocate(fd, self._reserve_bytes)
                self._ops.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self._last_error = exc.strerror or str(exc)
            try:
                self._ops.remove(str(path))
            except OSError:
                pass
            return False
        self._reserve_held = True
        return True

    def _release_reserve(self) -> bool:
        if not self._reserve_held:
            return False
        self._reserve_held = False
        try:
            self._ops.remove(str(self._reserve_path()))
        except FileNotFoundError:
            return True
        except OSError as exc:
            log.error("audit reserve could not be released: %s", exc.strerror or exc)
            return False
        log.warning("audit reserve released (%d bytes) to write the events of requests "
                    "already admitted", self._reserve_bytes)
        return True

    # -- both modes -------------------------------------------------------------

    def _failed(self, exc: OSError, consequence: str) -> None:
        # A torn tail (it could not be cut back) or a file gone from its directory is
        # never written again; a full or read-only file is kept for the next attempt.
        if isinstance(exc, TornTail) or exc.errno == errno.ENOENT:
            self._close_file()
        self._went_down(exc.strerror or str(exc), consequence)

    def _went_down(self, reason: str, consequence: str) -> None:
        """Unwritable; logged once per transition."""
        self._last_error = reason
        self._writable = False
        if not self._down_logged:
            self._down_logged = True
            self._unwritable_since = time.monotonic()
            log.error("audit log cannot be written (%s in %s): %s", reason,
                      self._directory, consequence)

    def _recovered(self) -> None:
        self._writable = True
        if self._down_logged:
            self._down_logged = False
            log.warning("audit log writable again after %.1fs (%d events dropped, %d "
                        "requests refused so far)", time.monotonic() - self._unwritable_since,
                        self._dropped, self._refused)
        self._last_error = ""

    def _write_lines(self, *, sync: bool) -> None:
        """Write every pending line, rotating as needed; ``sync``: fsync each file before
        leaving it and the last one at the end. Raises OSError, leaving pending exactly
        the lines not written (``sync``: not durable); none of them is in a file."""
        lines = self._lines
        done = 0
        try:
            while done < len(lines):
                ts = lines[done][0]
                if self._file is not None and self._must_rotate(ts, len(lines[done][1])):
                    if sync:
                        self._file.sync()
                        self._count_done(done)
                        del lines[:done]
                        done = 0
                    self._close_file()
                if self._file is None:
                    self._open_file(ts)
                assert self._file is not None
                size = self._file.size
                end = done
                while end < len(lines):
                    line_ts, line, _ = lines[end]
                    if end > done and self._must_rotate(line_ts, len(line), size):
                        break
                    size += len(line)
                    end += 1
                self._file.append(b"".join(line for _, line, _ in lines[done:end]))
                done = end
            if sync and self._file is not None:
                self._file.sync()
        except OSError:
            # The appender cut the file back to its last complete line (sync: its last
            # durable size), so the lines kept here are in no file.
            if not sync:
                self._count_done(done)
                del lines[:done]
            self._lines_bytes = sum(len(line) for _, line, _ in lines)
            raise
        self._count_done(done)
        lines.clear()
        self._lines_bytes = 0

    def _count_done(self, n: int) -> None:
        self._written += sum(1 for _, _, is_event in self._lines[:n] if is_event)

    def _must_rotate(self, ts: int, line_bytes: int, size: int | None = None) -> bool:
        size = self._file.size if size is None else size  # type: ignore[union-attr]
        return (ts - self._file_opened_ms >= self._rotate_interval_ms
                or (size > 0 and size + line_bytes > self._max_file_bytes))

    def _open_file(self, ts: int) -> None:
        assert self._directory is not None
        if not self._directory.is_dir():
            self._directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
        while True:
            path = self._directory / audit_file_name(self._broker_id, ts, self._file_seq)
            self._file_seq += 1
            try:
                fd = os.open(path, flags, FILE_MODE)
            except FileExistsError:
                continue
            break
        try:
            os.fchmod(fd, FILE_MODE)  # the process umask must not widen or narrow it
        except OSError:
            os.close(fd)
            raise
        self._file = LineAppender(fd, ops=self._ops)
        self._file_opened_ms = ts

    def _close_file(self) -> None:
        if self._file is None:
            return
        file, self._file = self._file, None
        try:
            file.close()
        except OSError as exc:
            log.error("audit log close failed (%s)", exc.strerror or exc)


__all__ = ["AUDIT_UNAVAILABLE", "AuditLog", "AuditUnavailable", "audit_file_name",
           "new_event_id"]
