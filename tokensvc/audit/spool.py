"""Complete audit lines, from live, rotated and compressed files, into immutable chunks.

Spark's streaming file source reads a file once, when it first lists it, at the
size it has then. The brokers' audit files grow while they are open, get renamed
or compressed by log rotation, and may end in half a line while the writer is in
the middle of a write. This module stands between the two: :class:`Spool` copies
what is new in the audit files into a spool directory as immutable *chunk* files
that hold only whole lines, and Spark's file source reads the spool.

Identity of an audit file is its *stem*: its name up to and including
``.jsonl`` (``audit-1-20261121T180000-0.jsonl``). The same stem under another
name (``...-0.jsonl.1``) or compressed (``...-0.jsonl.gz``) is the same file,
read on from where it was left. A chunk's name records the byte range of the
stem it holds (``<stem>.<start>-<end>.chunk``, offsets in uncompressed bytes),
so the spool directory itself is the only state: a restarted spool lists it and
goes on, and a copy cut short by a crash is a hidden temporary file (``.`` names
are ignored by Spark) that the next pass writes again.

A ``.jsonl`` file is copied up to its last newline while it may still grow; a
file is *closed* when it is compressed, or when it has not changed for
``closed_after_s`` seconds (default one hour, the writer's
``audit.file.rotate.ms``: after that long the writer starts a new file for its
next event, so nothing more can be appended). The bytes after the last newline
of a closed file (a line cut by a crash) are copied too, and end up in the
quarantine as ``not_json``.

A closed plain file of which nothing is spooled yet becomes one chunk that is a
*hard link* to it, where the spool and the audit directory are on one file
system (no byte is copied: at 10M events, 3.5 GB, the copy took 11.6 s); else,
and for every other range, the bytes are copied. Such a chunk shares the audit
file's inode, so it relies on what *closed* means: nothing is appended to a
closed file, and rotation renames, compresses or deletes it but never truncates
or rewrites it in place (``copytruncate``). The link is made under a hidden
temporary name and renamed, as a copy is; it is checked to be the file that was
judged closed (same inode, size and mtime), else the file is copied.

It does file I/O only; it must not import pyspark, and never writes to the audit
directory.
"""

from __future__ import annotations

import gzip
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import BinaryIO

DEFAULT_GLOB = "audit-*.jsonl*"
DEFAULT_CLOSED_AFTER_S = 3600.0
CHUNK_SUFFIX = ".chunk"
_CHUNK_NAME = re.compile(r"^(?P<stem>.+\.jsonl)\.(?P<start>\d{15})-(?P<end>\d{15})\.chunk$")
_COPY_BLOCK = 8 << 20
_TAIL_BLOCK = 64 << 10


def file_stem(name: str) -> str | None:
    """The audit file a name stands for: the name up to and including ``.jsonl``."""
    at = name.find(".jsonl")
    return name[: at + len(".jsonl")] if at > 0 else None


def chunk_name(stem: str, start: int, end: int) -> str:
    return f"{stem}.{start:015d}-{end:015d}{CHUNK_SUFFIX}"


@dataclass
class SpoolPass:
    """What one pass over the audit directory did."""

    files: int = 0
    chunks: int = 0
    bytes: int = 0
    elapsed_s: float = 0.0


class Spool:
    """Copies new whole lines of the audit files under ``source`` into ``spool_dir``."""

    def __init__(self, source: str | os.PathLike[str], spool_dir: str | os.PathLike[str], *,
                 glob: str = DEFAULT_GLOB, closed_after_s: float = DEFAULT_CLOSED_AFTER_S,
                 clock: Callable[[], float] = time.time, link_closed: bool = True) -> None:
        if closed_after_s < 0:
            raise ValueError("closed_after_s must be >= 0")
        self.source = Path(source)
        self.directory = Path(spool_dir)
        self.glob = glob
        self.closed_after_s = closed_after_s
        self.link_closed = link_closed
        self._clock = clock
        self.directory.mkdir(parents=True, exist_ok=True)
        self._done: dict[str, int] = {}  # stem -> uncompressed bytes already spooled
        for entry in os.scandir(self.directory):
            match = _CHUNK_NAME.match(entry.name)
            if match:
                stem, end = match["stem"], int(match["end"])
                self._done[stem] = max(self._done.get(stem, 0), end)

    def offset(self, stem: str) -> int:
        """Bytes of ``stem`` already in the spool."""
        return self._done.get(stem, 0)

    def _sources(self) -> Iterator[tuple[str, Path]]:
        """(stem, path) of every audit file, uncompressed names before compressed."""
        found: list[tuple[str, bool, str, Path]] = []
        spool = self.directory.resolve()
        for root, dirs, files in os.walk(self.source):
            if Path(root).resolve() == spool:
                dirs.clear()
                continue
            dirs.sort()
            for name in files:
                stem = file_stem(name)
                if stem is None or name.startswith(".") or not fnmatchcase(name, self.glob):
                    continue
                found.append((stem, name.endswith(".gz"), name, Path(root) / name))
        found.sort()
        seen_plain: set[str] = set()
        for stem, compressed, _name, path in found:
            if compressed and stem in seen_plain:
                continue  # the same file is still there uncompressed: read that one
            if not compressed:
                seen_plain.add(stem)
            yield stem, path

    def collect(self) -> SpoolPass:
        """One pass: spool what is new in every audit file. Safe to call again at
        any time, also after a crash."""
        started = time.monotonic()
        result = SpoolPass()
        for stem, path in self._sources():
            result.files += 1
            try:
                written = (self._from_gzip(stem, path) if path.name.endswith(".gz")
                           else self._from_plain(stem, path))
            except FileNotFoundError:
                continue  # rotated away between listing and reading: next pass
            if written:
                result.chunks += 1
                result.bytes += written
        result.elapsed_s = time.monotonic() - started
        return result

    def _from_plain(self, stem: str, path: Path) -> int:
        with open(path, "rb") as src:
            info = os.fstat(src.fileno())
            start = self.offset(stem)
            if info.st_size <= start:
                return 0
            closed = self._clock() - info.st_mtime >= self.closed_after_s
            end = info.st_size if closed else _after_last_newline(src, start, info.st_size)
            if end <= start:
                return 0
            if closed and start == 0 and self.link_closed:
                linked = self._link(stem, path, info)
                if linked:
                    return linked
            return self._write(stem, start, end, lambda dst: _copy_range(src, dst, start, end))

    def _link(self, stem: str, path: Path, info: os.stat_result) -> int:
        """Spool a whole closed file as a hard link to it (no byte copied), or 0 if
        that is not possible (another file system, no permission, or the name now
        stands for another or a changed file): then it is copied."""
        tmp = self._tmp(stem)
        try:
            tmp.unlink(missing_ok=True)
            os.link(path, tmp, follow_symlinks=False)
        except OSError:
            return 0
        linked = os.stat(tmp, follow_symlinks=False)
        if ((linked.st_dev, linked.st_ino, linked.st_size, linked.st_mtime_ns)
                != (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)):
            tmp.unlink()
            return 0
        return self._publish(tmp, stem, 0, info.st_size)

    def _from_gzip(self, stem: str, path: Path) -> int:
        start = self.offset(stem)
        with gzip.open(path, "rb") as src:
            skipped = 0
            while skipped < start:
                block = src.read(min(_COPY_BLOCK, start - skipped))
                if not block:
                    return 0  # shorter than what was spooled already
                skipped += len(block)
            tmp = self._tmp(stem)
            size = 0
            with open(tmp, "wb") as dst:
                while block := src.read(_COPY_BLOCK):
                    dst.write(block)
                    size += len(block)
        if size == 0:
            tmp.unlink()
            return 0
        return self._publish(tmp, stem, start, start + size)

    def _tmp(self, stem: str) -> Path:
        return self.directory / f".{stem}.{os.getpid()}.tmp"

    def _write(self, stem: str, start: int, end: int, copy: Callable[[int], None]) -> int:
        tmp = self._tmp(stem)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        try:
            copy(fd)
        finally:
            os.close(fd)
        return self._publish(tmp, stem, start, end)

    def _publish(self, tmp: Path, stem: str, start: int, end: int) -> int:
        os.replace(tmp, self.directory / chunk_name(stem, start, end))
        self._done[stem] = end
        return end - start


def _after_last_newline(src: BinaryIO, start: int, size: int) -> int:
    """The offset just after the last ``\\n`` in ``[start, size)``, or ``start``."""
    fd = src.fileno()
    end = size
    while end > start:
        begin = max(start, end - _TAIL_BLOCK)
        block = os.pread(fd, end - begin, begin)
        at = block.rfind(b"\n")
        if at >= 0:
            return begin + at + 1
        end = begin
    return start


def _copy_range(src: BinaryIO, dst: int, start: int, end: int) -> None:
    fd = src.fileno()
    offset = start
    while offset < end:
        try:
            n = os.copy_file_range(fd, dst, end - offset, offset)
        except OSError:
            n = os.write(dst, os.pread(fd, min(_COPY_BLOCK, end - offset), offset))
        if n == 0:
            raise OSError(f"copy of {end - start} bytes stopped at {offset - start}")
        offset += n
