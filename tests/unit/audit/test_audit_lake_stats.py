"""``read_stats``: how the batches' statistics files add up, and when the report must
scan instead (files written by hand; no Spark session is started)."""

from __future__ import annotations

import json
from pathlib import Path

from tokensvc.audit.lake import AGGREGATES_VERSION, lake_layout, read_stats


def _batch(lake: Path, batch_id: int, events: int, distinct_ids: int,
           malformed: dict[str, int] | None = None, *, stats: bool = True) -> None:
    layout = lake_layout(lake)
    part = layout.events / "date=2024-01-01"
    part.mkdir(parents=True, exist_ok=True)
    (part / f"{layout.batch_prefix(batch_id)}part-00000.snappy.parquet").write_bytes(b"")
    if stats:
        layout.stats.mkdir(parents=True, exist_ok=True)
        layout.stats_file(batch_id).write_text(json.dumps(
            {"batch": batch_id, "events": events, "distinct_ids": distinct_ids,
             "malformed": malformed or {}}))


def test_one_unique_batch_has_no_repeated_id(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 10, 10, {"not_json": 2, "wrong_types": 0})
    stats = read_stats(tmp_path)
    assert stats is not None
    assert stats.statuses == {"ok": 10, "not_json": 2, "wrong_types": 0}
    assert stats.ids_repeat is False


def test_a_batch_with_fewer_distinct_ids_than_events_repeats_an_id(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 10, 10)
    _batch(tmp_path, 1, 5, 4, {"not_json": 1})
    stats = read_stats(tmp_path)
    assert stats is not None and stats.ids_repeat is True
    assert stats.statuses == {"ok": 15, "not_json": 1}


def test_unique_batches_need_a_check_across_them(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 10, 10)
    _batch(tmp_path, 1, 0, 0)  # an empty batch cannot repeat anything
    stats = read_stats(tmp_path)
    assert stats is not None and stats.ids_repeat is False
    _batch(tmp_path, 2, 3, 3)
    stats = read_stats(tmp_path)
    assert stats is not None and stats.ids_repeat is None and stats.statuses["ok"] == 13


def test_a_batch_without_statistics_makes_the_report_scan(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 10, 10)
    _batch(tmp_path, 1, 5, 5, stats=False)  # a batch being committed, or an old lake
    assert read_stats(tmp_path) is None
    (lake_layout(tmp_path).stats / "b000000000001-stats.json.tmp").write_text("{")
    assert read_stats(tmp_path) is None  # a half-written file is not read


def test_a_lake_without_batches_is_empty(tmp_path: Path) -> None:
    stats = read_stats(tmp_path)
    assert stats is not None and stats.statuses == {"ok": 0} and stats.ids_repeat is False


def _with_aggregates(lake: Path, batch_id: int, rows: dict[str, int]) -> None:
    """What a batch's statistics say when it wrote partial tables."""
    path = lake_layout(lake).stats_file(batch_id)
    stats = json.loads(path.read_text())
    stats.update(aggregates=AGGREGATES_VERSION, aggregate_rows=rows)
    path.write_text(json.dumps(stats))


def test_partial_table_rows_add_up_over_the_batches(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 10, 10)
    _batch(tmp_path, 1, 5, 5)
    _with_aggregates(tmp_path, 0, {"tokens": 4, "hours": 2, "types": 1, "grouped": 0})
    _with_aggregates(tmp_path, 1, {"tokens": 3, "hours": 1, "types": 2, "grouped": 1})
    stats = read_stats(tmp_path)
    assert stats is not None
    assert stats.aggregate_rows == {"tokens": 7, "hours": 3, "types": 3, "grouped": 1}


def test_a_batch_without_partial_tables_makes_the_report_read_events(tmp_path: Path) -> None:
    _batch(tmp_path, 0, 10, 10)
    _batch(tmp_path, 1, 5, 5)  # written before batches wrote partial tables
    _with_aggregates(tmp_path, 0, {"tokens": 4, "hours": 2, "types": 1, "grouped": 0})
    stats = read_stats(tmp_path)
    assert stats is not None and stats.statuses["ok"] == 15
    assert stats.aggregate_rows is None


def test_partial_table_files_of_a_batch_without_statistics_make_it_incomplete(
        tmp_path: Path) -> None:
    _batch(tmp_path, 0, 10, 10)
    tokens = lake_layout(tmp_path).agg / "tokens"
    tokens.mkdir(parents=True)
    (tokens / "b000000000001-part-00000.snappy.parquet").write_bytes(b"")
    assert read_stats(tmp_path) is None


# -- the batch's distinct id count (ingest counts it from the files it just wrote) --------


def _hashes_file(path: Path, values: list[int | None]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"event_id": [str(v) for v in values],
                             "id_hash": pa.array(values, pa.int64())}), path)


def test_the_distinct_id_count_spans_partitions_and_skips_nulls_and_marker_files(
    tmp_path: Path,
) -> None:
    from tokensvc.audit.ingest import _count_id_hashes

    staging = tmp_path / "7"
    _hashes_file(staging / "date=2024-01-01" / "part-0.parquet", [5, -3, 5, 2**63 - 1])
    _hashes_file(staging / "date=2024-01-02" / "part-1.parquet", [-3, -(2**63), 9])
    # quarantined lines carry no hash; Spark's marker and checksum files are not data
    _hashes_file(staging / "date=__quarantine__" / "part-2.parquet", [None, None])
    (staging / "_SUCCESS").write_bytes(b"")
    (staging / "date=2024-01-01" / ".part-0.parquet.crc").write_bytes(b"\x00junk")
    assert _count_id_hashes(staging) == 5  # 5, -3, max, min, 9

    only_quarantine = tmp_path / "8"
    _hashes_file(only_quarantine / "date=__quarantine__" / "part-0.parquet", [None])
    assert _count_id_hashes(only_quarantine) == 0
