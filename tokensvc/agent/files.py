"""Atomic file writes for the agent's credentials and state files.

Owns one thing: replacing a file's content so that a reader sees either the old bytes or
the new ones, never a partial or empty file, even if the process is killed mid-write. The
recipe: a temporary file in the same directory (created 0600 from the start, so a secret
is never readable by others, not even for a moment), write, flush, fsync, rename over the
target, fsync the directory so the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

FILE_MODE = 0o600


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = FILE_MODE) -> None:
    """Replace ``path``'s content with ``data`` atomically (see the module docstring).

    Raises OSError (the directory does not exist or is not writable, the disk is full);
    the target is then unchanged and no temporary file is left behind.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def check_writable(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` could not be written atomically (one line), or None if it can.

    Tries what :func:`write_atomic` will do -- create a temporary file in the directory --
    so that an agent refuses bad paths before it creates any token.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        return f"{target} is a directory"
    if not directory.is_dir():
        return f"directory {directory} does not exist"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".check", dir=directory)
    except OSError as exc:
        return f"cannot write in {directory}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(tmp)
    return None
