"""The broker's audit log: a bounded queue in front of one writer thread.

:class:`AuditLog` owns the audit files of one broker: their names
(``audit-<broker_id>-<yyyymmddTHHMMSS>-<n>.jsonl``, UTC time of the file's
first event), their mode (0640), rotation by size and by time, and flushing
(at least every ``flush_interval_ms`` while lines are pending, and whenever the
queue stays empty for :data:`_LINGER_S`).

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

Secret material never gets this far: ``emit`` writes a value that looks like
base64 of 64+ bytes (often chosen by a client: a user name) as
:data:`~tokensvc.audit.events.REDACTED`, and :func:`tokensvc.audit.events.build_event`
refuses secret-looking field names; ``emit`` raises
:class:`~tokensvc.audit.events.AuditEventError` to the caller for malformed events.
"""

from __future__ import annotations

import json
import logging
import os
import random
import select
import threading
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from tokensvc.audit.events import build_event, dropped_event, redact_secret_values, stamp
from tokensvc.core.clock import Clock, SystemClock

log = logging.getLogger(__name__)

FILE_MODE = 0o640
DIR_MODE = 0o750
_BATCH = 1024
#: How long the writer waits for more events after writing a batch before it flushes
#: and parks: under load it then writes every few milliseconds, woken by nobody.
_LINGER_S = 0.005
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
    ) -> None:
        if on_full != "drop-newest":
            raise ValueError(f"on_full={on_full!r}: only 'drop-newest' is supported")
        if queue_size < 1 or max_file_bytes < 1 or rotate_interval_ms < 1:
            raise ValueError("queue_size, max_file_bytes and rotate_interval_ms must be positive")
        self._directory = Path(directory) if directory is not None else None
        self._broker_id = broker_id
        self._clock = clock
        self._max_file_bytes = max_file_bytes
        self._rotate_interval_ms = rotate_interval_ms
        self._flush_s = flush_interval_ms / 1000.0
        # The hand-off to the writer thread: deque.append and popleft are atomic, so the
        # request path takes no lock; a byte on the pipe wakes the writer only when it is
        # parked (queue.Queue took a lock and ran Condition.notify per event; a wake-up on
        # every empty-to-non-empty turn cost 5-9 % of a loaded broker's CPU in B1).
        self._pending: deque[dict[str, Any]] = deque()
        self._wake_r, self._wake_w = -1, -1
        self._queue_size = queue_size
        # True while the writer sleeps with nothing to do: only then does emit() wake it.
        self._parked = False
        self._stopping = False
        self._lock = threading.Lock()
        self._dropped = 0
        self._dropped_reported = 0
        self._written = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        # Owned by the writer thread once started.
        self._file: IO[bytes] | None = None
        self._file_bytes = 0
        self._file_opened_ms = 0
        self._file_seq = 0
        self._dirty = False
        self._last_flush = 0.0

    @classmethod
    def disabled(cls) -> AuditLog:
        """A sink that validates events and writes nothing (no ``audit.log.dir``)."""
        return cls(None, -1)

    @property
    def enabled(self) -> bool:
        return self._directory is not None

    @property
    def queue_depth(self) -> int:
        return len(self._pending)

    @property
    def dropped(self) -> int:
        return self._dropped

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
        event = stamp(body, ts=self._clock.now_ms(), broker_id=self._broker_id,
                      event_id=new_event_id())
        pending = self._pending
        if len(pending) >= self._queue_size:
            self._count_drop()
            return False
        pending.append(event)
        # Appended first, the flag read second; the writer sets the flag first and reads
        # the deque second: one of the two always sees the other.
        if self._parked:
            self._parked = False
            self._wake()
        return True

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the writer has wake-ups enough
        except OSError:
            pass  # not started, or closed: close() writes what is queued

    def _count_drop(self) -> None:
        with self._lock:
            self._dropped += 1

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
        while True:
            # Read the flag before draining: what was queued before close() is written.
            stopping = self._stopping
            batch = []
            while pending and len(batch) < _BATCH:
                batch.append(pending.popleft())
            if batch:
                self._write_batch(batch)
                if time.monotonic() - self._last_flush >= self._flush_s:
                    self._flush()
                if not pending and not stopping:
                    # Linger: under load the next events come within milliseconds, and
                    # collecting them costs the request path no wake-up (no system call,
                    # no hand-off of the GIL) and this thread one write per batch.
                    self._wait(_LINGER_S)
                continue
            if stopping:
                break
            # Nothing came while lingering: flush, then park until emit() wakes us.
            if self._dirty:
                self._flush()
            self._parked = True
            if pending or self._stopping:
                self._parked = False
                continue
            self._wait(None)
            self._parked = False
        self._write_batch([])
        self._flush()
        self._close_file()
        wake_r, wake_w = self._wake_r, self._wake_w
        self._wake_r = self._wake_w = -1  # a late emit's wake-up then fails harmlessly
        os.close(wake_r)
        os.close(wake_w)

    def _wait(self, timeout: float | None) -> None:
        ready, _, _ = select.select([self._wake_r], [], [], timeout)
        if ready:
            os.read(self._wake_r, 4096)

    def _write_batch(self, batch: list[dict[str, Any]]) -> None:
        done = 0
        try:
            self._write_dropped_marker()
            for event in batch:
                self._write_line(event["ts"], event)
                done += 1
        except OSError as exc:
            log.error("audit log write failed (%s); events lost", exc.strerror or exc)
            with self._lock:
                self._dropped += len(batch) - done
            self._close_file()
        finally:
            self._written += done

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
        self._write_line(now, marker)
        self._dropped_reported = total

    def _write_line(self, ts: int, event: dict[str, Any]) -> None:
        line = (_ENCODE(event) + "\n").encode()
        if self._file is not None and (
            ts - self._file_opened_ms >= self._rotate_interval_ms
            or (self._file_bytes > 0 and self._file_bytes + len(line) > self._max_file_bytes)
        ):
            self._close_file()
        if self._file is None:
            self._open_file(ts)
        assert self._file is not None
        self._file.write(line)
        self._file_bytes += len(line)
        self._dirty = True

    def _open_file(self, ts: int) -> None:
        assert self._directory is not None
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
        while True:
            path = self._directory / audit_file_name(self._broker_id, ts, self._file_seq)
            self._file_seq += 1
            try:
                fd = os.open(path, flags, FILE_MODE)
            except FileExistsError:
                continue
            break
        os.fchmod(fd, FILE_MODE)  # the process umask must not widen or narrow it
        self._file = os.fdopen(fd, "ab", buffering=256 * 1024)
        self._file_bytes = 0
        self._file_opened_ms = ts

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if self._file is not None and self._dirty:
            try:
                self._file.flush()
            except OSError as exc:
                log.error("audit log flush failed (%s)", exc.strerror or exc)
                self._close_file()
        self._dirty = False

    def _close_file(self) -> None:
        if self._file is None:
            return
        try:
            self._file.close()
        except OSError as exc:
            log.error("audit log close failed (%s)", exc.strerror or exc)
        self._file = None
        self._dirty = False
