"""The change an AlterUserScramCredentials write asks for, one user and mechanism at a time.

Owns :class:`CredentialChange`, the one definition shared by the request handler
(:mod:`tokensvc.broker.handlers.scram_users`), the broker's write path
(:mod:`tokensvc.broker.services`) and the credential store
(:mod:`zk.credential_store`), which writes it to ZooKeeper.

Must not: derive or check credentials (:mod:`tokensvc.scram.formatter` does), or touch
ZooKeeper.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokensvc.scram.formatter import ScramCredential, ScramMechanism


@dataclass(frozen=True)
class CredentialChange:
    """Set (``credential``) or delete (None) one user's SCRAM credential for one mechanism."""

    user: str
    mechanism: ScramMechanism
    credential: ScramCredential | None
