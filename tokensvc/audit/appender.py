"""Whole lines or nothing: appending a block of complete JSON lines to an audit file.

Owns :class:`LineAppender`, the writer thread's handle on one open audit file: it
knows the file's size (what it appended), the size last made durable (``fsync``), and
the one rule of this module -- a failed append or sync never leaves part of a line in
the file. ``write(2)`` may land part of a block before it fails (a full disk returns a
short count, then ENOSPC); the appender then truncates the file back to its size before
the block, so a reader never sees a torn line, and the caller still holds every line
of the block to drop or to write again. A failed ``fsync`` truncates back to the last
durable size: what the kernel did with those pages is unknown, so they are written
again rather than trusted.

The system calls go through :class:`FileOps`, so the unit tests hand in a file that
fails in the middle of a write. Must not: queue, encode events, choose file names or
know about threads (that is :mod:`tokensvc.audit.writer`).
"""

from __future__ import annotations

import errno
import os
from typing import Protocol


class FileOps(Protocol):
    """The system calls made on audit files and the reserve (``os`` in production)."""

    def write(self, fd: int, data: bytes | memoryview) -> int: ...

    def ftruncate(self, fd: int, length: int) -> None: ...

    def fsync(self, fd: int) -> None: ...

    def linked(self, fd: int) -> bool: ...

    def close(self, fd: int) -> None: ...

    def allocate(self, fd: int, length: int) -> None: ...

    def remove(self, path: str) -> None: ...

    def free_bytes(self, path: str) -> int: ...


class _OsOps:
    write = staticmethod(os.write)
    ftruncate = staticmethod(os.ftruncate)
    # fdatasync: the data and what reading it back needs (the size), not the mtime.
    fsync = staticmethod(os.fdatasync)
    close = staticmethod(os.close)
    remove = staticmethod(os.unlink)

    @staticmethod
    def allocate(fd: int, length: int) -> None:
        os.posix_fallocate(fd, 0, length)

    @staticmethod
    def free_bytes(path: str) -> int:
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize

    @staticmethod
    def linked(fd: int) -> bool:
        return os.fstat(fd).st_nlink > 0


OS_OPS: FileOps = _OsOps()


class TornTail(OSError):
    """An append or sync failed and the file could not be truncated back either: its
    last line may be incomplete. The file must not be written again."""


class LineAppender:
    """One audit file opened with ``O_APPEND`` (see the module docstring)."""

    def __init__(self, fd: int, *, size: int = 0, ops: FileOps = OS_OPS) -> None:
        self.fd = fd
        self.size = size
        self.durable_size = size
        self._ops = ops

    @property
    def synced(self) -> bool:
        return self.durable_size == self.size

    def append(self, block: bytes) -> None:
        """Append ``block`` (complete lines) whole, or raise OSError with the file as it
        was before (:class:`TornTail` if it could not be put back)."""
        view = memoryview(block)
        done = 0
        try:
            while done < len(view):
                n = self._ops.write(self.fd, view[done:])
                if n <= 0:
                    raise OSError(errno.EIO, "write returned no progress")
                done += n
        except OSError as exc:
            if done:
                self._cut_back(self.size, exc)
            raise
        self.size += len(view)

    def sync(self) -> None:
        """fsync; raise OSError when the data may not be on disk, after cutting the file
        back to its last durable size, or when the file was removed from its directory
        (its lines then reach no reader)."""
        if self.synced and self._ops.linked(self.fd):
            return
        try:
            self._ops.fsync(self.fd)
        except OSError as exc:
            self._cut_back(self.durable_size, exc)
            self.size = self.durable_size
            raise
        if not self._ops.linked(self.fd):
            raise OSError(errno.ENOENT, "the audit file was removed from its directory")
        self.durable_size = self.size

    def close(self) -> None:
        self._ops.close(self.fd)

    def _cut_back(self, size: int, cause: OSError) -> None:
        try:
            self._ops.ftruncate(self.fd, size)
        except OSError as exc:
            raise TornTail(cause.errno or errno.EIO,
                           f"{cause.strerror or cause}; and truncating back failed: "
                           f"{exc.strerror or exc}") from cause
