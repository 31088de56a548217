"""Things the tests build once and keep: a Java program compiled against jars (fetched
through :mod:`tokensvc.jvm.jars`), a Go program built from its module.

Each result lives in a directory of the cache (``tokensvc-cache`` in the virtualenv)
named by a hash of what it was made from (the coordinates, the sources, the Java or Go
version), so a change rebuilds and nothing stale is used. A build happens in a scratch
directory renamed into place at the end, under a file lock, so parallel test workers
build it once and never see half of it. The registries are Maven Central (through
``mvn``) and the Go module proxy (through ``go``); nothing fetched is in the repository.

Owns fetching and building only; it must not know what the programs do.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

BUILD_TIMEOUT_S = 600.0  # a cold Maven or Go fetch on a slow link


class BuildError(RuntimeError):
    """A fetch or build failed; the message has the tool's own output."""


def cache_root() -> Path:
    root = Path(os.environ.get("TOKENSVC_TEST_CACHE", Path(sys.prefix) / "tokensvc-cache"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The directory ``<cache>/<name>-<key>``, made by ``build(scratch)`` if missing."""
    target = cache_root() / f"{name}-{key}"
    if target.is_dir():
        return target
    with _locked(target):
        if target.is_dir():
            return target
        scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        try:
            build(scratch)
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def run_tool(argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    ran = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=BUILD_TIMEOUT_S, check=False)
    if ran.returncode != 0:
        raise BuildError(f"{' '.join(argv[:3])}... failed (exit {ran.returncode}):\n"
                         f"{ran.stdout[-4000:]}\n{ran.stderr[-4000:]}")




def _tool_version(argv: Sequence[str]) -> str:
    ran = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    return ran.stdout + ran.stderr


def java_program(source: Path, classpath: Sequence[Path]) -> str:
    """``source`` compiled against ``classpath``; the classpath to run it with."""
    javac = shutil.which("javac")
    if javac is None:
        raise BuildError(f"javac (a JDK 17) is needed to compile {source.name}")
    libs = os.pathsep.join(str(p) for p in classpath)
    key = digest(source.read_bytes(), libs, _tool_version([javac, "-version"]))

    def compile_(scratch: Path) -> None:
        run_tool([javac, "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-Xlint:all",
                  "-Werror", "-d", str(scratch), "-cp", libs, str(source)], scratch)

    classes = cached(f"java-{source.stem}", key, compile_)
    return os.pathsep.join([str(classes), libs])


def go_program(module: Path) -> Path:
    """The binary of the Go module in ``module`` (its go.mod, go.sum and *.go files),
    built with ``go build``; modules come from the Go module proxy."""
    go = shutil.which("go")
    if go is None:
        raise BuildError("Go is needed to build the franz-go client: https://go.dev/dl/")
    sources = sorted(p for p in module.iterdir()
                     if p.suffix == ".go" or p.name in ("go.mod", "go.sum"))
    key = digest(*(p.name + "\0" + p.read_text() for p in sources),
                 _tool_version([go, "version"]))

    def build(scratch: Path) -> None:
        env = {**os.environ, "CGO_ENABLED": "0"}
        run_tool([go, "build", "-mod=readonly", "-o",
                  str(scratch / module.name), "."], module, env)

    return cached(f"go-{module.name}", key, build) / module.name
