"""Atomic file writes for the agent's credentials and state files.

The write itself is :func:`tokensvc.atomicfile.write_atomic` (shared with the broker's
token cache snapshot); this module adds what the agent checks before it creates any
token: that the path can be written that way (:func:`check_writable`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tokensvc.atomicfile import FILE_MODE, write_atomic

__all__ = ["FILE_MODE", "check_writable", "write_atomic"]


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
