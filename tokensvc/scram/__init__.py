"""SCRAM (RFC 5802/7677) for tokensvc: crypto, messages and sans-IO state machines.

``formatter`` holds mechanisms, credentials and the key schedule; ``messages``
parses and formats the four SCRAM messages; ``server`` and ``client`` are the
state machines. Nothing in this package touches sockets, clocks or ZooKeeper.
"""

from tokensvc.scram.client import ScramClient, ScramClientState
from tokensvc.scram.formatter import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    TokenSalt,
    derive_credential,
    derived_salt,
)
from tokensvc.scram.messages import FailureReason, ScramAuthenticationError
from tokensvc.scram.server import CredentialLookup, ScramServer, ScramServerState

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "CredentialLookup",
    "FailureReason",
    "ScramAuthenticationError",
    "ScramClient",
    "ScramClientState",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "ScramServerState",
    "TokenSalt",
    "derive_credential",
    "derived_salt",
]
