"""The token cache snapshot on disk: the file, written atomically, and its writer thread.

The shell around :mod:`tokensvc.snapshot.format`:

* :class:`SnapshotFile` reads and decodes the file (``load``), logs one line and counts
  one result for each outcome of a start (``loaded``, ``missing``, ``invalid``,
  ``identity``, ``purged``, ``mismatch``, ``error``), and writes it atomically
  (``save``, with :func:`tokensvc.atomicfile.write_atomic`: a temporary file in the
  same directory, mode 0600, fsync, rename over the old one, fsync of the directory).
  A crash leaves the old snapshot or the new one, never half of one (and a half one
  would fail its checksum).
* :class:`SnapshotWriter` is the thread that writes it every ``interval_s`` and once
  more when the broker stops cleanly. It is handed ``take``, which returns the file's
  bytes (or None when there is nothing new to write), so the encoding runs on this
  thread, never on the event loop.

Must not: decide what a snapshot holds or whether one may be used (the format and the
token sync do), or fail the broker: a file that cannot be read or written is logged,
counted, and the broker loads from ZooKeeper as it would without one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

from tokensvc.atomicfile import write_atomic
from tokensvc.snapshot.format import Snapshot, SnapshotError, decode

log = logging.getLogger("tokensvc.snapshot")

SNAPSHOT_FILE = "token-cache.snapshot"
FILE_MODE = 0o600
DIR_MODE = 0o700

# Results of a start, the label values of tokensvc_cache_snapshot_loads_total.
LOADED, MISSING, INVALID, IDENTITY, PURGED, MISMATCH, ERROR = (
    "loaded", "missing", "invalid", "identity", "purged", "mismatch", "error")
LOAD_RESULTS = (LOADED, MISSING, INVALID, IDENTITY, PURGED, MISMATCH, ERROR)
WRITE_RESULTS = ("ok", "error")


class SnapshotFile:
    """One broker's snapshot file; ``on_load(result)`` and ``on_write(result)`` count
    the outcomes (the broker's metrics)."""

    def __init__(self, directory: str | os.PathLike, *,
                 on_load: Callable[[str], None] | None = None,
                 on_write: Callable[[str], None] | None = None) -> None:
        self.path = Path(directory) / SNAPSHOT_FILE
        self._on_load = on_load or (lambda _result: None)
        self._on_write = on_write or (lambda _result: None)
        self.last_result: str | None = None

    # -- the start ----------------------------------------------------------------------

    def load(self) -> Snapshot | None:
        """The decoded snapshot, or None (logged and counted) when there is none or it
        does not decode. The caller still checks it against ZooKeeper."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._result(MISSING, logging.INFO, "no token cache snapshot at %s; loading every "
                         "token from ZooKeeper", self.path)
            return None
        except OSError as exc:
            self._result(ERROR, logging.WARNING, "token cache snapshot %s cannot be read (%s); "
                         "loading every token from ZooKeeper", self.path, exc)
            return None
        try:
            return decode(data)
        except SnapshotError as exc:
            self._result(INVALID, logging.WARNING, "token cache snapshot %s refused (%s: %s); "
                         "loading every token from ZooKeeper", self.path, exc.reason, exc)
            return None

    def refused(self, result: str, why: str) -> None:
        """The snapshot decoded but does not fit ZooKeeper (``identity``, ``purged``,
        ``mismatch``) or the catch-up failed (``error``)."""
        self._result(result, logging.WARNING, "token cache snapshot %s not used: %s; loading "
                     "every token from ZooKeeper", self.path, why)

    def loaded(self, tokens: int, sequence: int, changes: int, duration_ms: int) -> None:
        self._result(LOADED, logging.INFO, "token cache loaded from snapshot %s: %d tokens at "
                     "notification %d, %d changed since, in %d ms", self.path, tokens, sequence,
                     changes, duration_ms)

    def _result(self, result: str, level: int, message: str, *args: object) -> None:
        self.last_result = result
        log.log(level, message, *args)
        self._on_load(result)

    # -- writing ------------------------------------------------------------------------

    def save(self, data: bytes | Sequence[bytes]) -> bool:
        """Write ``data`` (the file's bytes, or its parts in order) atomically; False
        (logged, counted) when that fails."""
        try:
            self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            write_atomic(self.path, data, FILE_MODE)
        except OSError as exc:
            log.warning("token cache snapshot %s not written: %s", self.path, exc)
            self._on_write("error")
            return False
        self._on_write("ok")
        return True


# take(last key written) -> None (nothing new) or (key, the file's bytes or its parts).
Take = Callable[[Hashable], "tuple[Hashable, bytes | Sequence[bytes]] | None"]


class SnapshotWriter:
    """Writes ``take``'s bytes to ``file`` every ``interval_s`` seconds, on a thread of
    its own, and once more on :meth:`close` (a clean stop). ``take`` is handed the key
    of the last snapshot written (None at first) and returns None when it would write
    the same again (the broker's key is the sequence and identity: a cache that
    followed no change since needs no new file)."""

    def __init__(self, file: SnapshotFile, take: Take, interval_s: float, *,
                 written: Hashable = None) -> None:
        self._file = file
        self._take = take
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one write at a time (the thread, close)
        self._thread: threading.Thread | None = None
        # The key of the file on disk (the snapshot the broker started from, if any).
        self._written: Hashable = written
        self.writes = 0
        self.last_write_s: float | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="cache-snapshot", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.write_now()

    def write_now(self) -> bool:
        """Take and write a snapshot now (on the calling thread); False when nothing
        was written."""
        with self._lock:
            started = time.monotonic()
            try:
                taken = self._take(self._written)
            except Exception:  # a snapshot is never worth a broker
                log.exception("taking a token cache snapshot failed")
                return False
            if taken is None:
                return False
            key, data = taken
            if not self._file.save(data):
                return False
            self._written = key
            self.writes += 1
            self.last_write_s = time.monotonic() - started
            size = len(data) if isinstance(data, bytes) else sum(len(part) for part in data)
            log.info("token cache snapshot written to %s: %d bytes in %.2fs", self._file.path,
                     size, self.last_write_s)
            return True

    def close(self, *, final: bool = True) -> None:
        """Stop the thread; with ``final``, write one last snapshot (a clean stop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if final:
            self.write_now()
