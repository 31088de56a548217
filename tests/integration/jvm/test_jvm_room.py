"""The JVM room against the real machine: Java found (or a clear error), Maven artifacts
resolved once however many processes ask at once, a clear line when Maven is missing or
cannot resolve, and supervised processes stopped, killed, paused and resumed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.wait import wait_for
from tokensvc.jvm import JvmError, SupervisedProcess, find_java, java_major_version, resolve
from tokensvc.jvm.process import _all_threads_stopped

# A small artifact with no dependencies, already in Maven's local repository once the
# Kafka jars were resolved.
SMALL = "org.slf4j:slf4j-api:1.7.36"


def test_java_is_found_with_its_major_version() -> None:
    assert java_major_version(find_java()) >= 11


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JvmError, match="Java was not found"):
        find_java()


def _counting_mvn(directory: Path, extra: str = "") -> Path:
    """A ``mvn`` first on PATH that notes each run in ``runs`` and runs the real one."""
    real = subprocess.run(["which", "mvn"], capture_output=True, text=True, check=True).stdout.strip()
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "mvn"
    script.write_text(f'#!/bin/sh\necho run >> "{directory}/runs"\nexec "{real}" {extra} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return directory


def test_concurrent_resolves_run_maven_once_and_agree(tmp_path: Path) -> None:
    bin_dir = _counting_mvn(tmp_path / "bin")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code = ("import sys; from pathlib import Path; from tokensvc.jvm import resolve; "
            f"print('\\n'.join(str(p) for p in resolve(['{SMALL}'], cache=Path(sys.argv[1]))))")
    workers = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "cache")], env=env,
                                stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0]
    assert len(set(outputs)) == 1
    assert [Path(p).name for p in outputs[0].split()] == ["slf4j-api-1.7.36.jar"]
    assert (bin_dir / "runs").read_text().splitlines() == ["run"]
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]


def test_missing_maven_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(JvmError, match=r"Maven \(mvn\) is not on PATH; install it"):
        resolve([SMALL], cache=tmp_path)
    assert not list(tmp_path.glob("*/*.jar"))


def test_a_failed_resolve_says_so_and_leaves_nothing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The real Maven, offline, with an empty local repository: it cannot resolve anything.
    bin_dir = _counting_mvn(tmp_path / "bin", f"-o -Dmaven.repo.local={tmp_path / 'empty'}")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(JvmError, match=f"cannot fetch {SMALL} from Maven Central") as raised:
        resolve([SMALL], cache=tmp_path / "cache")
    assert "\n" not in str(raised.value)
    assert list((tmp_path / "cache").glob("*/*")) == []


def test_a_supervised_process_logs_stops_and_is_killed(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    process = SupervisedProcess(
        [sys.executable, "-c", ("import signal,sys,time; print('up', flush=True); "
         "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); time.sleep(60)")], log)
    process.spawn()
    assert process.running and process.pid is not None
    wait_for(lambda: "up" in log.read_text(), 20, "the child's first line")
    process.stop(grace=10)
    assert not process.running and process.returncode == 7
    stubborn = SupervisedProcess(
        [sys.executable, "-c", ("import signal,time; print('up', flush=True); "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")], tmp_path / "s.log")
    stubborn.spawn()
    wait_for(lambda: "up" in (tmp_path / "s.log").read_text(), 20, "the child's first line")
    began = time.monotonic()
    stubborn.stop(grace=0.5)
    assert stubborn.returncode == -9 and time.monotonic() - began < 10


def test_pause_stops_every_thread_until_resume(tmp_path: Path) -> None:
    process = SupervisedProcess([sys.executable, "-c", "import time; time.sleep(60)"],
                                tmp_path / "out.log")
    process.spawn()
    try:
        assert process.pid is not None
        process.pause()
        assert _all_threads_stopped(process.pid)
        process.resume()
        wait_for(lambda: not _all_threads_stopped(process.pid), 10, "a running thread")
    finally:
        process.kill()
    assert not process.running
