"""The soak's resource arithmetic: slopes per hour, lives cut at restarts, the CSV, the plot."""

from __future__ import annotations

import os

import pytest

from faults.soakmeter import (
    Row,
    Sampler,
    directory_row,
    format_slopes,
    read_rows,
    slope_per_hour,
    summarize,
    write_rows,
)


def test_slope_of_a_straight_line_is_its_rate_per_hour():
    # 2 units a minute is 120 an hour, whatever the intercept.
    assert slope_per_hour([(m, 7 + 2 * m) for m in range(10)]) == pytest.approx(120.0)
    assert slope_per_hour([(m, 5.0) for m in range(10)]) == pytest.approx(0.0)


def test_slope_needs_three_points_at_two_minutes_at_least():
    assert slope_per_hour([(0, 1), (1, 2)]) is None
    assert slope_per_hour([(3, 1), (3, 2), (3, 4)]) is None


def test_a_restart_starts_a_new_life_and_the_longest_life_is_measured():
    rows = [Row(m, "broker-1", 100, 1000 + 10 * m, 20, 5) for m in range(5)]
    # restarted at minute 5 with a new pid and low memory: flat for 20 minutes
    rows += [Row(m, "broker-1", 200, 500, 20, 5) for m in range(5, 25)]
    (rss, fds, threads) = summarize(rows)
    assert (rss.measure, rss.lives, rss.minutes) == ("rss_bytes", 2, 19)
    assert rss.per_hour == pytest.approx(0.0)     # the drop at the restart is not a slope
    assert fds.per_hour == pytest.approx(0.0) and threads.per_hour == pytest.approx(0.0)


def test_growth_that_levels_off_shows_in_the_second_half():
    rows = [Row(m, "zookeeper-1", 7, min(m, 30) * 1_000_000, 40, 30) for m in range(61)]
    (rss, _, _) = summarize(rows)
    assert rss.per_hour > 0
    assert rss.per_hour_second_half == pytest.approx(0.0)


def test_directory_series_are_measured_in_bytes_and_files():
    rows = [Row(m, "audit files", bytes=1000 * m, files=1 + m // 10, disk_bytes=4096 * m)
            for m in range(30)]
    (size, allocated, files) = summarize(rows)
    assert (size.measure, allocated.measure, files.measure) == ("bytes", "disk_bytes", "files")
    assert allocated.per_hour == pytest.approx(60 * 4096.0)
    assert size.per_hour == pytest.approx(60_000.0)
    assert "audit files" in format_slopes([size, files])


def test_rows_survive_the_csv(tmp_path):
    path = tmp_path / "samples.csv"
    rows = [Row(0.5, "broker-1", 11, 1 << 20, 21, 7),
            Row(0.5, "audit files", bytes=3, files=1, disk_bytes=4096)]
    write_rows(path, rows[:1], header=True)
    write_rows(path, rows[1:], header=False)
    assert read_rows(path) == rows


def test_the_sampler_reads_this_process_and_a_directory(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 1234)
    sampler = Sampler(tmp_path / "samples.csv", started_monotonic=0.0)
    rows = sampler.sample(120.0, {"me": os.getpid(), "gone": None},
                          {"d": [tmp_path / "d", tmp_path / "missing"]})
    me, d = rows
    assert me.series == "me" and me.minute == 2.0 and me.rss_bytes > 0 and me.fds > 0
    assert me.threads >= 1
    assert (d.bytes, d.files) == (1234, 1) and d.disk_bytes >= 1234
    assert read_rows(tmp_path / "samples.csv") == rows
    assert directory_row(0, "none", []).bytes == 0


def test_a_csv_of_an_older_soak_reads_without_allocated_bytes(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("minute,series,pid,rss_bytes,fds,threads,bytes,files\n"
                    "1.0,zookeeper-1 data,,,,,67108880,3\n")
    assert read_rows(path) == [Row(1.0, "zookeeper-1 data", bytes=67108880, files=3)]


def test_the_plot_is_a_png(tmp_path):
    from faults.soak_plot import main
    path = tmp_path / "samples.csv"
    write_rows(path, [Row(m, "broker-1", 1 if m < 3 else 2, 10 << 20, 20, 5) for m in range(6)]
               + [Row(m, "audit files", bytes=m << 20, files=m) for m in range(6)], header=True)
    assert main([str(path), "--out", str(tmp_path / "soak.png")]) == 0
    assert (tmp_path / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
