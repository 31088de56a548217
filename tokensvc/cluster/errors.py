"""The local cluster's one error type."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """The local cluster could not be started or stopped; the message says why."""
