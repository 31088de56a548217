"""The local cluster's files: ``cluster.json`` and the private (0600) files beside it,
all written atomically through :mod:`tokensvc.atomicfile`, and the checks of ``--set``
overrides against the broker's key table. Must not start or signal a process.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokensvc.atomicfile import write_atomic
from tokensvc.cluster.errors import ClusterError
from tokensvc.cluster.layout import (
    CLUSTER_FILE,
)
from tokensvc.core.config import BROKER_CONFIG, SECRET_KEY
from tokensvc.core.configdef import ConfigError
from tokensvc.properties import read_properties


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte on, atomically."""
    write_atomic(path, text.encode("utf-8"), mode=0o600)


def check_overrides(overrides: Mapping[str, str]) -> None:
    """Refuse ``--set`` values the brokers would refuse (type, range, a typo of a key),
    before anything is started or written."""
    try:
        BROKER_CONFIG.ignored_keys(overrides)
        for key, value in overrides.items():
            if key in BROKER_CONFIG.keys:
                BROKER_CONFIG[key].parse(value)
    except ConfigError as exc:
        raise ClusterError(f"--set {exc}") from None


def _previous_master_key(directory: Path) -> str | None:
    """The master key of an earlier cluster in ``directory``, so its tokens stay valid."""
    path = directory / "broker-1" / "server.properties"
    if not path.is_file():
        return None
    try:
        return read_properties(path).get(SECRET_KEY) or None
    except ConfigError:
        return None


def load_info(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The ``cluster.json`` of ``directory``, or None if there is none."""
    path = Path(directory) / CLUSTER_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"{path} is not readable cluster state: {exc}") from exc
