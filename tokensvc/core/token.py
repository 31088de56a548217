"""The delegation token model: what a token is, independent of storage.

``TokenInformation`` is what ZooKeeper stores (never the HMAC). The HMAC is
derived from a master key by :mod:`tokensvc.core.keys` and lives only in broker
memory.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, replace

from tokensvc.core.labels import NO_LABELS, Labels
from tokensvc.core.principal import KafkaPrincipal


@dataclass(frozen=True, slots=True)
class TokenInformation:
    token_id: str
    owner: KafkaPrincipal
    token_requester: KafkaPrincipal
    renewers: tuple[KafkaPrincipal, ...]
    issue_timestamp: int
    expiry_timestamp: int
    max_timestamp: int
    # Identifier of the master key this token's HMAC is computed with (see
    # tokensvc.core.keys.key_id); never the key itself.
    key_id: str = ""
    # The token's labels, ``(key, value)`` sorted by key (tokensvc.core.labels): set at
    # create, never changed; one shared tuple for every token of a label set.
    labels: Labels = NO_LABELS

    def owner_or_renewer(self, principal: KafkaPrincipal) -> bool:
        p = principal.without_token_flag()
        return p == self.owner or p == self.token_requester or p in self.renewers

    def with_expiry(self, expiry_timestamp: int) -> TokenInformation:
        return replace(self, expiry_timestamp=expiry_timestamp)

    def expired_at(self, now_ms: int) -> bool:
        """True once ``now_ms`` is past the expiry or the max lifetime."""
        return now_ms > self.expiry_timestamp or now_ms > self.max_timestamp


@dataclass(frozen=True, slots=True)
class DelegationToken:
    info: TokenInformation
    hmac: bytes = field(repr=False)

    @property
    def hmac_b64(self) -> str:
        """The SCRAM password for this token: standard base64 with padding."""
        return base64.b64encode(self.hmac).decode("ascii")
