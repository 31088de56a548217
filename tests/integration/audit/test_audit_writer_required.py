"""AuditLog with ``required=True`` (audit.required) and the no-torn-line rule of both
modes, on a modelled small disk: the writer's real thread and real files in tmp_path,
with its write/allocate calls going through a disk whose free space the test sets."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tokensvc.audit.writer import AuditLog, AuditUnavailable
from tokensvc.core.clock import FakeClock

T0 = 1_704_067_200_000
RESERVE = 4096


class SmallDisk:
    """os calls with a space budget: a write lands what fits (a short count), then ENOSPC;
    truncating and removing the reserve give the space back. ``read_only`` fails all."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.read_only = False
        self.fsyncs = 0
        self.reserve_size = 0

    def _check(self) -> None:
        if self.read_only:
            raise OSError(errno.EROFS, "Read-only file system")

    def write(self, fd: int, data) -> int:
        self._check()
        if self.free <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = os.write(fd, data[: self.free])
        self.free -= n
        return n

    def ftruncate(self, fd: int, length: int) -> None:
        self._check()
        self.free += os.fstat(fd).st_size - length
        os.ftruncate(fd, length)

    def fsync(self, fd: int) -> None:
        self._check()
        self.fsyncs += 1
        os.fsync(fd)

    def linked(self, fd: int) -> bool:
        return os.fstat(fd).st_nlink > 0

    def close(self, fd: int) -> None:
        os.close(fd)

    def allocate(self, fd: int, length: int) -> None:
        self._check()
        if self.free < length:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.free -= length
        self.reserve_size = length

    def free_bytes(self, path: str) -> int:
        return self.free

    def remove(self, path: str) -> None:
        self._check()
        os.unlink(path)
        self.free += self.reserve_size
        self.reserve_size = 0


def emit(log: AuditLog, n: int) -> bool:
    return log.emit("token", action="create", outcome="success", error_code=0, error="NONE",
                    requester="User:alice", owner="User:alice", token_id=f"token-{n}")


def read_lines(directory: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(directory.glob("audit-*.jsonl"),
                       key=lambda p: int(p.stem.rsplit("-", 1)[1])):
        text = path.read_text()
        assert text == "" or text.endswith("\n"), f"torn last line in {path.name}"
        out += text.splitlines()
    return out


def token_ids(directory: Path) -> list[str]:
    return [e["token_id"] for e in map(json.loads, read_lines(directory))
            if e["type"] == "token"]


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def required_log(directory: Path, disk: SmallDisk, **kw) -> AuditLog:
    log = AuditLog(directory, 1, clock=FakeClock(T0), required=True, reserve_bytes=RESERVE,
                   file_ops=disk, **kw)
    log.start()
    wait_for(lambda: log.writable)
    return log


def test_concurrent_answers_share_fsyncs(tmp_path: Path) -> None:
    disk = SmallDisk(1 << 30)
    log = required_log(tmp_path, disk)
    start = disk.fsyncs

    async def request(n: int) -> None:
        emit(log, n)
        await log.durable(10)

    async def main() -> None:
        await asyncio.gather(*(request(n) for n in range(50)))

    asyncio.run(main())
    assert sorted(token_ids(tmp_path)) == sorted(f"token-{n}" for n in range(50))
    assert disk.fsyncs - start <= 25, disk.fsyncs - start
    log.close()


def test_durable_returns_at_once_when_not_required(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, clock=FakeClock(T0))
    log.start()
    asyncio.run(log.durable(0.001))
    assert log.refusal() is None and log.writable
    log.close()


def test_a_full_disk_refuses_new_requests_writes_the_admitted_once_and_resumes(
        tmp_path: Path) -> None:
    disk = SmallDisk(2 * RESERVE + 2_000)
    log = required_log(tmp_path, disk)
    answered: list[str] = []

    async def fill() -> AuditUnavailable:
        n = 0
        while True:
            refused = log.refusal()
            if refused is not None:
                return refused
            emit(log, n)
            await log.durable(10)  # admitted: written, with the reserve's room if need be
            answered.append(f"token-{n}")
            n += 1

    refused = asyncio.run(fill())
    assert refused.error.name == "REQUEST_TIMED_OUT"
    assert "No space left" in refused.message
    assert not log.writable and log.refused == 1
    assert token_ids(tmp_path) == answered  # every answered event, once, no torn line
    assert log.dropped == 0

    disk.free += 1 << 20  # the filler is deleted
    wait_for(lambda: log.writable)

    async def more() -> None:
        assert log.refusal() is None
        emit(log, 1000)
        await log.durable(10)

    asyncio.run(more())
    assert token_ids(tmp_path) == answered + ["token-1000"]
    log.close()


def test_an_admitted_event_the_disk_cannot_take_waits_and_is_written_once_later(
        tmp_path: Path) -> None:
    disk = SmallDisk(1 << 20)
    log = required_log(tmp_path, disk)
    disk.read_only = True  # the reserve cannot help a read-only file system

    async def admitted() -> None:
        assert log.refusal() is None  # not known yet: nothing was written since
        emit(log, 1)
        with pytest.raises(AuditUnavailable, match="not written within"):
            await log.durable(0.5)

    asyncio.run(admitted())
    assert not log.writable
    refused = log.refusal()
    assert refused is not None and "Read-only" in refused.message
    disk.read_only = False
    wait_for(lambda: log.writable)
    log.close()
    assert token_ids(tmp_path) == ["token-1"]


def test_a_removed_directory_is_made_again_and_the_events_land_in_it(tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    disk = SmallDisk(1 << 20)
    log = required_log(directory, disk)

    async def one(n: int) -> None:
        emit(log, n)
        await log.durable(10)

    asyncio.run(one(1))
    shutil.rmtree(directory)
    asyncio.run(one(2))  # written to a file no directory holds: found at the fsync
    wait_for(lambda: log.writable)
    log.close()
    assert token_ids(directory) == ["token-2"]


def test_close_fails_the_waiters_it_cannot_satisfy(tmp_path: Path) -> None:
    disk = SmallDisk(1 << 20)
    log = required_log(tmp_path, disk)
    disk.read_only = True

    async def main() -> None:
        emit(log, 1)
        waiter = asyncio.ensure_future(log.durable(30))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(log.close, 5)
        with pytest.raises(AuditUnavailable):
            await waiter

    asyncio.run(main())


def test_default_mode_drops_what_a_full_disk_refuses_without_a_torn_line(
        tmp_path: Path) -> None:
    disk = SmallDisk(1_500)
    log = AuditLog(tmp_path, 1, clock=FakeClock(T0), file_ops=disk, flush_interval_ms=1)
    log.start()
    for n in range(40):
        assert emit(log, n)  # never refused, never blocks
        time.sleep(0.002)
    wait_for(lambda: log.queue_depth == 0 and log.dropped > 0)
    # Whether the last batch fitted in the space a cut-back batch gave back depends on how
    # the events were batched (a full run saw the log writable again here). With no space
    # left at all, the next event is dropped and the log stays unwritable.
    disk.free = 0
    assert emit(log, 40)
    wait_for(lambda: log.queue_depth == 0 and log.dropped + log.written == 41)
    assert not log.writable and log.refusal() is None
    kept = token_ids(tmp_path)  # parses: no torn line
    assert 0 < len(kept) < 40 and log.written == len(kept)
    disk.free += 1 << 20
    emit(log, 99)
    wait_for(lambda: log.writable and log.written == len(kept) + 1)
    log.close()
    events = [json.loads(line) for line in read_lines(tmp_path)]
    # A marker per recovery: a batch that did not fit was cut back, and a smaller one
    # (a marker among them, which may itself be cut back) could fit before the space was
    # freed. The last one, written after the space came back, has the whole count.
    markers = [e for e in events if e["type"] == "audit"]
    assert markers and markers[-1]["dropped_total"] == log.dropped, markers
    assert token_ids(tmp_path) == kept + ["token-99"]
