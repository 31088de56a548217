"""LineAppender: whole lines or nothing, against an in-memory file that fails on cue."""

from __future__ import annotations

import errno

import pytest

from tokensvc.audit.appender import LineAppender, TornTail


class MemoryFile:
    """One file's bytes and a disk with ``free`` bytes; every call can be made to fail."""

    def __init__(self, free: int = 1 << 20) -> None:
        self.data = bytearray()
        self.free = free
        self.fail_truncate = False
        self.fail_fsync = False
        self.is_linked = True
        self.synced = 0
        self.max_chunk = 1 << 30  # write(2) may land less than asked

    def write(self, fd: int, data) -> int:
        if self.free == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = min(len(data), self.free, self.max_chunk)
        self.data += bytes(data[:n])
        self.free -= n
        return n

    def ftruncate(self, fd: int, length: int) -> None:
        if self.fail_truncate:
            raise OSError(errno.EROFS, "Read-only file system")
        self.free += len(self.data) - length
        del self.data[length:]

    def fsync(self, fd: int) -> None:
        if self.fail_fsync:
            raise OSError(errno.EIO, "Input/output error")
        self.synced = len(self.data)

    def linked(self, fd: int) -> bool:
        return self.is_linked

    def close(self, fd: int) -> None:
        pass

    def allocate(self, fd: int, length: int) -> None:
        raise AssertionError("not used by the appender")

    def remove(self, path: str) -> None:
        raise AssertionError("not used by the appender")

    def free_bytes(self, path: str) -> int:
        raise AssertionError("not used by the appender")


LINE = b'{"type":"token","action":"create"}\n'


def test_lines_are_appended_whole_even_when_write_lands_them_in_pieces() -> None:
    f = MemoryFile()
    f.max_chunk = 7
    a = LineAppender(3, ops=f)
    a.append(LINE * 3)
    assert bytes(f.data) == LINE * 3 and a.size == len(LINE) * 3


def test_a_write_that_fails_midway_is_cut_back_to_the_last_complete_line() -> None:
    f = MemoryFile(free=len(LINE) * 2 + len(LINE) // 2)
    a = LineAppender(3, ops=f)
    a.append(LINE)
    with pytest.raises(OSError) as failed:
        a.append(LINE * 2)  # one and a half lines fit: the short count, then ENOSPC
    assert failed.value.errno == errno.ENOSPC
    assert bytes(f.data) == LINE and a.size == len(LINE)
    f.free += 10 * len(LINE)  # room again: the same lines go in once
    a.append(LINE * 2)
    assert bytes(f.data) == LINE * 3


def test_when_the_cut_back_fails_too_the_tail_is_reported_torn() -> None:
    f = MemoryFile(free=len(LINE) + 5)
    f.fail_truncate = True
    a = LineAppender(3, ops=f)
    with pytest.raises(TornTail) as failed:
        a.append(LINE * 2)
    assert failed.value.errno == errno.ENOSPC
    assert "truncating back failed" in str(failed.value)


def test_a_write_without_progress_is_an_error_and_leaves_nothing() -> None:
    f = MemoryFile()
    a = LineAppender(3, ops=f)
    f.write = lambda fd, data: 0  # type: ignore[method-assign]
    with pytest.raises(OSError):
        a.append(LINE)
    assert bytes(f.data) == b"" and a.size == 0


def test_a_failed_fsync_cuts_back_to_the_last_durable_size() -> None:
    f = MemoryFile()
    a = LineAppender(3, ops=f)
    a.append(LINE)
    a.sync()
    assert a.durable_size == len(LINE) and a.synced
    a.append(LINE * 2)
    f.fail_fsync = True
    with pytest.raises(OSError):
        a.sync()
    assert bytes(f.data) == LINE and a.size == a.durable_size == len(LINE)


def test_a_file_removed_from_its_directory_fails_the_sync() -> None:
    f = MemoryFile()
    a = LineAppender(3, ops=f)
    a.append(LINE)
    f.is_linked = False
    with pytest.raises(OSError) as failed:
        a.sync()
    assert failed.value.errno == errno.ENOENT
    assert a.durable_size == 0


def test_sync_of_a_synced_file_calls_no_fsync() -> None:
    f = MemoryFile()
    a = LineAppender(3, ops=f)
    a.append(LINE)
    a.sync()
    f.fail_fsync = True
    a.sync()  # nothing new: no fsync, still checks the file is linked
    assert a.durable_size == len(LINE)
