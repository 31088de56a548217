"""Finding the ``java`` launcher and its major version.

Owns the one rule for which Java runs every JVM service and tool tokensvc starts: the
``java`` on ``PATH``, else ``$JAVA_HOME/bin/java``. It never installs Java and never
starts anything but ``java -version``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess


class JvmError(RuntimeError):
    """A JVM service or tool could not be set up or started; the message says why and
    what to do."""


def find_java() -> str:
    """The ``java`` launcher: on ``PATH``, else in ``JAVA_HOME``; :class:`JvmError` if
    neither has one."""
    java = shutil.which("java")
    if java is not None:
        return java
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    raise JvmError(
        "Java was not found on PATH (nor in JAVA_HOME): install Java 17 or newer, "
        "for example `apt-get install openjdk-17-jre-headless`"
    )


@functools.cache
def java_major_version(java: str) -> int:
    """The major version of ``java`` (``17`` for 17.0.15, ``8`` for 1.8.0), from
    ``java -version``; asked once per launcher and process."""
    out = subprocess.run(
        [java, "-version"], capture_output=True, text=True, timeout=30, check=False
    )
    text = out.stderr + out.stdout
    for token in text.replace('"', " ").split():
        head = token.split(".")[0]
        if head.isdigit() and ("." in token or token.isdigit()):
            major = int(head)
            return int(token.split(".")[1]) if major == 1 and "." in token else major
    raise JvmError(f"could not read the Java version from: {text.strip()!r}")


def require_java(minimum: int) -> str:
    """The ``java`` launcher, checked to be at least Java ``minimum``."""
    java = find_java()
    if java_major_version(java) < minimum:
        raise JvmError(f"{java} is older than Java {minimum}; install Java 17 or newer")
    return java
