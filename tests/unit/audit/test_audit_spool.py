"""The spool: whole lines of live, rotated and compressed audit files, each byte once.

Real files in a temporary directory, a fake clock for "closed after"; no Spark.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from tokensvc.audit.spool import Spool, chunk_name, file_stem

NAME = "audit-1-20240101T000000-0.jsonl"


class Clock:
    def __init__(self) -> None:
        self.now = 2_000_000_000.0

    def __call__(self) -> float:
        return self.now


def spooled(spool_dir: Path) -> bytes:
    """Everything in the spool, chunks in stem and offset order."""
    return b"".join(p.read_bytes() for p in sorted(spool_dir.glob("*.chunk")))


def make(tmp_path: Path, **kwargs: float) -> tuple[Path, Path, Clock, Spool]:
    audit, spool_dir = tmp_path / "audit", tmp_path / "lake" / "_spool"
    audit.mkdir()
    clock = Clock()
    return audit, spool_dir, clock, Spool(audit, spool_dir, clock=clock, **kwargs)


def write(path: Path, data: bytes, mtime: float) -> None:
    with open(path, "ab") as fh:
        fh.write(data)
    os.utime(path, (mtime, mtime))


def test_stem_is_the_name_up_to_jsonl() -> None:
    assert file_stem(NAME) == NAME
    assert file_stem(NAME + ".gz") == NAME
    assert file_stem(NAME + ".1.gz") == NAME
    assert file_stem("notes.txt") is None


def test_a_growing_file_is_spooled_to_its_last_newline_then_continued(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path)
    write(audit / NAME, b'{"a":1}\n{"b":', clock.now)
    assert spool.collect().chunks == 1
    assert spooled(spool_dir) == b'{"a":1}\n'
    assert spool.collect().chunks == 0  # nothing new: nothing written
    write(audit / NAME, b'2}\n{"c":3}\n', clock.now)
    spool.collect()
    assert spooled(spool_dir) == b'{"a":1}\n{"b":2}\n{"c":3}\n'
    assert sorted(p.name for p in spool_dir.glob("*.chunk")) == [
        chunk_name(NAME, 0, 8), chunk_name(NAME, 8, 24)]


def test_a_closed_file_gives_its_cut_last_line_too(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path, closed_after_s=60)
    write(audit / NAME, b'{"a":1}\n{"cut', clock.now - 59)
    spool.collect()
    assert spooled(spool_dir) == b'{"a":1}\n'
    clock.now += 1  # now unchanged for 60 s: closed
    spool.collect()
    assert spooled(spool_dir) == b'{"a":1}\n{"cut'


def test_renamed_and_compressed_files_continue_where_the_name_stopped(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path)
    write(audit / NAME, b"1\n2\n", clock.now)
    spool.collect()
    os.rename(audit / NAME, audit / (NAME + ".1"))  # rotated by name: same file
    write(audit / (NAME + ".1"), b"3\n", clock.now)
    spool.collect()
    assert spooled(spool_dir) == b"1\n2\n3\n"
    # compressed by log rotation, with lines written before it was closed
    data = (audit / (NAME + ".1")).read_bytes() + b"4\n5"
    (audit / (NAME + ".1")).unlink()
    with gzip.open(audit / (NAME + ".1.gz"), "wb") as fh:
        fh.write(data)
    spool.collect()
    assert spooled(spool_dir) == b"1\n2\n3\n4\n5"
    assert spool.collect().chunks == 0


def test_a_compressed_file_never_seen_is_spooled_whole(tmp_path: Path) -> None:
    audit, spool_dir, _clock, spool = make(tmp_path)
    with gzip.open(audit / (NAME + ".gz"), "wb") as fh:
        fh.write(b"x\ny\n")
    spool.collect()
    assert spooled(spool_dir) == b"x\ny\n"


def test_the_same_file_plain_and_compressed_is_read_once(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path)
    write(audit / NAME, b"1\n2\n", clock.now)
    with gzip.open(audit / (NAME + ".gz"), "wb") as fh:
        fh.write(b"1\n2\n")
    spool.collect()
    assert spooled(spool_dir) == b"1\n2\n"


def test_a_new_spool_over_the_same_directory_goes_on_without_repeating(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path)
    write(audit / NAME, b"1\n", clock.now)
    spool.collect()
    # a copy killed before its rename leaves a hidden temporary file behind
    (spool_dir / f".{NAME}.999.tmp").write_bytes(b"1\n2\n")
    write(audit / NAME, b"2\n", clock.now)
    again = Spool(audit, spool_dir, clock=clock)
    assert again.offset(NAME) == 2
    again.collect()
    assert spooled(spool_dir) == b"1\n2\n"


def test_only_audit_file_names_are_read(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path)
    write(audit / "notes.txt", b"x\n", clock.now)
    write(audit / "audit-1.log", b"x\n", clock.now)
    (audit / "broker-2").mkdir()
    write(audit / "broker-2" / NAME.replace("-1-", "-2-"), b"y\n", clock.now)
    spool.collect()
    assert spooled(spool_dir) == b"y\n"


def test_closed_after_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Spool(tmp_path, tmp_path / "s", closed_after_s=-1)


def _chunks(spool_dir: Path) -> list[Path]:
    return sorted(spool_dir.glob("*.chunk"))


def test_a_closed_file_never_spooled_becomes_a_hard_link_not_a_copy(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path, closed_after_s=60)
    write(audit / NAME, b'{"a":1}\n{"b":2}\n{"cut', clock.now - 61)
    # a link killed before its rename leaves a hidden temporary name behind
    (spool_dir / f".{NAME}.{os.getpid()}.tmp").write_bytes(b"stale")
    done = spool.collect()
    assert (done.chunks, done.bytes) == (1, 21)
    [chunk] = _chunks(spool_dir)
    assert chunk.name == chunk_name(NAME, 0, 21)
    assert os.path.samefile(chunk, audit / NAME)
    assert chunk.read_bytes() == b'{"a":1}\n{"b":2}\n{"cut'
    assert [p.name for p in spool_dir.iterdir()] == [chunk.name]  # no temporary left
    # rotation deletes or compresses the audit file: the chunk keeps its bytes
    (audit / NAME).unlink()
    assert chunk.read_bytes() == b'{"a":1}\n{"b":2}\n{"cut'
    assert spool.collect().chunks == 0


def test_open_files_and_the_rest_of_a_spooled_file_are_copied(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path, closed_after_s=60)
    write(audit / NAME, b"1\n2\n", clock.now)  # still open: copied to its last newline
    spool.collect()
    write(audit / NAME, b"3\n", clock.now - 61)  # closed now, but its start is spooled
    spool.collect()
    assert spooled(spool_dir) == b"1\n2\n3\n"
    assert all(not os.path.samefile(p, audit / NAME) for p in _chunks(spool_dir))
    assert all(p.stat().st_nlink == 1 for p in _chunks(spool_dir))


def test_without_links_a_closed_file_is_copied(tmp_path: Path) -> None:
    audit, spool_dir, clock, spool = make(tmp_path, closed_after_s=0, link_closed=False)
    write(audit / NAME, b"1\n2\n", clock.now)
    spool.collect()
    [chunk] = _chunks(spool_dir)
    assert chunk.read_bytes() == b"1\n2\n"
    assert not os.path.samefile(chunk, audit / NAME)
