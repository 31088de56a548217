"""The snapshot file and its writer (tokensvc.snapshot.files) on a temporary directory."""

from __future__ import annotations

import logging
import os
import stat

from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.snapshot.files import (
    INVALID,
    MISSING,
    SNAPSHOT_FILE,
    SnapshotFile,
    SnapshotWriter,
)
from tokensvc.snapshot.format import encode

OWNER = KafkaPrincipal.user("alice")
TOKENS = [TokenInformation(f"t{i}", OWNER, OWNER, (), 1, 2, 3, "") for i in range(3)]


def _file(tmp_path, results):
    return SnapshotFile(tmp_path / "snap", on_load=results.append, on_write=results.append)


def test_write_is_atomic_private_and_leaves_no_temporary(tmp_path):
    file = _file(tmp_path, [])  # its directory does not exist yet
    path = file.path
    file.save(b"one")
    file.save(b"two")
    assert path.read_bytes() == b"two"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(path.parent) == [SNAPSHOT_FILE]


def test_a_missing_file_is_counted_and_logged(tmp_path, caplog):
    results: list[str] = []
    with caplog.at_level(logging.INFO, "tokensvc.snapshot"):
        assert _file(tmp_path, results).load() is None
    assert results == [MISSING]
    assert "no token cache snapshot" in caplog.text


def test_saved_snapshot_loads_back(tmp_path):
    results: list[str] = []
    snapshots = _file(tmp_path, results)
    assert snapshots.save(encode(3, {"a": 1}, TOKENS, 0))
    loaded = snapshots.load()
    assert loaded is not None and loaded.tokens == TOKENS and loaded.sequence == 3
    assert results == ["ok"]


def test_a_corrupt_file_is_refused_with_one_warning(tmp_path, caplog):
    results: list[str] = []
    snapshots = _file(tmp_path, results)
    snapshots.save(encode(3, {"a": 1}, TOKENS, 0))
    data = bytearray(snapshots.path.read_bytes())
    data[40] ^= 1
    snapshots.path.write_bytes(bytes(data))
    with caplog.at_level(logging.INFO, "tokensvc.snapshot"):
        assert snapshots.load() is None
    assert results == ["ok", INVALID]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "checksum" in warnings[0].getMessage()


def test_writer_skips_an_unchanged_cache_and_writes_on_close(tmp_path):
    results: list[str] = []
    snapshots = _file(tmp_path, results)
    state = {"key": 1}
    taken: list[object] = []

    def take(written):
        taken.append(written)
        if written == state["key"]:
            return None
        return state["key"], encode(state["key"], {}, TOKENS, 0)

    writer = SnapshotWriter(snapshots, take, interval_s=3600)
    assert writer.write_now() is True
    assert writer.write_now() is False  # nothing new
    state["key"] = 2
    writer.close()  # the final write of a clean stop
    assert taken == [None, 1, 1]
    assert writer.writes == 2
    assert snapshots.load().sequence == 2
    assert (tmp_path / "snap" / SNAPSHOT_FILE).exists()


def test_writer_survives_a_failing_take(tmp_path, caplog):
    snapshots = _file(tmp_path, [])

    def take(_written):
        raise RuntimeError("boom")

    writer = SnapshotWriter(snapshots, take, interval_s=3600)
    with caplog.at_level(logging.ERROR, "tokensvc.snapshot"):
        assert writer.write_now() is False
    assert "taking a token cache snapshot failed" in caplog.text


def test_writer_thread_writes_periodically(tmp_path):
    from tests.support.wait import poll_until

    snapshots = _file(tmp_path, [])
    keys = iter(range(1000))

    def take(_written):
        key = next(keys)
        return key, encode(key, {}, TOKENS, 0)

    writer = SnapshotWriter(snapshots, take, interval_s=0.01)
    writer.start()
    try:
        assert poll_until(lambda: writer.writes >= 2, 5)
    finally:
        writer.close(final=False)
    assert snapshots.load().sequence >= 1


def test_writer_started_from_the_file_on_disk_writes_only_after_a_change(tmp_path):
    snapshots = _file(tmp_path, [])
    state = {"key": 7}

    def take(written):
        return None if written == state["key"] else (state["key"], encode(state["key"], {}, TOKENS, 0))

    writer = SnapshotWriter(snapshots, take, interval_s=3600, written=7)
    assert writer.write_now() is False
    state["key"] = 8
    writer.close()
    assert writer.writes == 1 and snapshots.load().sequence == 8
