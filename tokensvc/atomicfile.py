"""Replacing a file's content atomically: a reader sees the old bytes or the new ones,
never a partial or empty file, even if the process is killed mid-write.

The recipe: a temporary file in the same directory (created with the final mode from
the start, so a secret is never readable by others, not even for a moment), write,
flush, fsync, rename over the target, fsync the directory so the rename itself
survives a crash. Used by the token agent (credentials and state files) and by the
broker's token cache snapshot; it must not import either.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

FILE_MODE = 0o600


def write_atomic(path: str | os.PathLike[str], data: bytes | Sequence[bytes],
                 mode: int = FILE_MODE) -> None:
    """Replace ``path``'s content with ``data`` atomically (see the module docstring).
    ``data`` may be a sequence of parts, written one after the other (the file is their
    concatenation): a large file is then never copied into one buffer.

    Raises OSError (the directory does not exist or is not writable, the disk is full);
    the target is then unchanged and no temporary file is left behind.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            for part in (data,) if isinstance(data, bytes) else data:
                handle.write(part)
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
