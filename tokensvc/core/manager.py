"""The delegation token rules (KIP-48, as Kafka's ZooKeeper-mode DelegationTokenManager).

This module owns what create, renew, expire and describe *mean*: lifetimes,
who may renew or expire a token, when a token counts as expired, and which
tokens a describe shows. Every refusal is a :class:`KafkaError` carrying
Kafka's error code, so the broker turns it into the response unchanged.

It must not do I/O, read the wall clock (the :class:`Clock` is injected), hold
tokens (the cache does) or authorise requests: permission checks such as
CREATE_TOKENS, and the session checks (token-authenticated, PLAINTEXT, one-way
SSL), are the broker's. The manager computes new token state; the caller
persists it and the cache follows ZooKeeper.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Iterable, Sequence

from tokensvc.core.clock import Clock
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.keys import MasterKeys
from tokensvc.core.labels import NO_LABELS, Labels, matches, validate
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import DelegationToken, TokenInformation

TOKEN_ID_BYTES = 16
# Fresh ids drawn before giving up when each one is taken (never seen with random
# ids: 16 random bytes do not equal a user name; the bound keeps a bad predicate finite).
MAX_TOKEN_ID_DRAWS = 16


def random_token_id() -> str:
    """16 random bytes, URL-safe base64 without padding (22 characters), as Kafka."""
    raw = secrets.token_bytes(TOKEN_ID_BYTES)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class TokenManager:
    """Applies Kafka's token rules with an injected clock and master keys.

    ``max_lifetime_ms`` is the server's ``delegation.token.max.lifetime.ms`` and
    ``renew_period_ms`` its ``delegation.token.expiry.time.ms`` (the default
    renew period). ``id_taken(token_id)`` says whether a name is already used
    (the broker: a SCRAM user of that name exists); a new token never gets such
    an id, so an implicit token login never meets a user of the same name.
    """

    def __init__(
        self,
        keys: MasterKeys,
        *,
        max_lifetime_ms: int,
        renew_period_ms: int,
        clock: Clock,
        new_token_id: Callable[[], str] = random_token_id,
        id_taken: Callable[[str], bool] = lambda _token_id: False,
    ) -> None:
        if max_lifetime_ms <= 0:
            raise ValueError("max_lifetime_ms must be > 0")
        if renew_period_ms <= 0:
            raise ValueError("renew_period_ms must be > 0")
        self._keys = keys
        self._max_lifetime_ms = max_lifetime_ms
        self._renew_period_ms = renew_period_ms
        self._clock = clock
        self._new_token_id = new_token_id
        self._id_taken = id_taken

    @property
    def enabled(self) -> bool:
        return self._keys.enabled

    def token_for(self, info: TokenInformation) -> DelegationToken:
        """``info`` with its HMAC, computed under the token's own key id.

        Raises :class:`~tokensvc.core.keys.UnknownKeyError` when that key is not held.
        """
        return DelegationToken(info, self._keys.hmac(info.token_id, info.key_id))

    def create(
        self,
        owner: KafkaPrincipal,
        requester: KafkaPrincipal,
        renewers: Sequence[KafkaPrincipal],
        max_lifetime_ms: int,
        labels: Iterable[tuple[str, str]] = NO_LABELS,
    ) -> DelegationToken:
        """A new token for ``owner`` requested by ``requester``, under the current key.

        ``max_lifetime_ms <= 0`` means the server's maximum; a larger request is
        capped at it. The first expiry is one default renew period after issue,
        never past the max lifetime. ``labels`` must follow the label rules
        (:func:`tokensvc.core.labels.validate`: INVALID_REQUEST naming the label);
        the token keeps them for its whole life.
        """
        self._check_enabled()
        checked = validate(labels)
        for principal in (owner, *renewers):
            if not principal.is_user:
                raise KafkaError(
                    Errors.INVALID_PRINCIPAL_TYPE,
                    f"principal {principal} is not of type User",
                )
        if max_lifetime_ms <= 0:
            lifetime = self._max_lifetime_ms
        else:
            lifetime = min(max_lifetime_ms, self._max_lifetime_ms)
        issue = self._clock.now_ms()
        max_timestamp = issue + lifetime
        info = TokenInformation(
            token_id=self._fresh_token_id(),
            owner=owner.without_token_flag(),
            token_requester=requester.without_token_flag(),
            renewers=tuple(r.without_token_flag() for r in renewers),
            issue_timestamp=issue,
            expiry_timestamp=min(max_timestamp, issue + self._renew_period_ms),
            max_timestamp=max_timestamp,
            key_id=self._keys.current_id,
            labels=checked,
        )
        return self.token_for(info)

    def renew(
        self,
        token: DelegationToken | None,
        principal: KafkaPrincipal,
        renew_period_ms: int,
    ) -> TokenInformation:
        """The token with its expiry moved to ``now + period`` (capped at its max).

        ``token`` is what the HMAC lookup found (None: not found). A negative
        period means the server's default renew period.
        """
        info, now = self._checked(token, principal)
        period = self._renew_period_ms if renew_period_ms < 0 else renew_period_ms
        return info.with_expiry(min(info.max_timestamp, now + period))

    def expire(
        self,
        token: DelegationToken | None,
        principal: KafkaPrincipal,
        expiry_period_ms: int,
    ) -> TokenInformation | None:
        """The token with its expiry moved to ``now + period`` (capped at its max).

        A negative period returns None: remove the token now. A period of 0 sets
        the expiry to now; the token stays until the expiry sweep removes it.
        """
        info, now = self._checked(token, principal)
        if expiry_period_ms < 0:
            return None
        return info.with_expiry(min(info.max_timestamp, now + expiry_period_ms))

    def describe(
        self,
        tokens: Iterable[DelegationToken],
        principal: KafkaPrincipal,
        owners: Sequence[KafkaPrincipal] | None,
        may_describe: Callable[[TokenInformation], bool],
        selector: Labels = NO_LABELS,
    ) -> list[DelegationToken]:
        """The tokens ``principal`` may see, filtered by ``owners`` and by the label
        ``selector`` (every label of it must be on the token).

        ``owners`` None means every owner; an empty list means none. A token is
        shown when one of ``owners`` is its owner, requester or renewer, and the
        principal either is one of those itself or ``may_describe(info)`` says
        so (the broker's DESCRIBE / DESCRIBE_TOKENS check).
        """
        self._check_enabled()
        if owners is not None and not owners:
            return []
        wanted = None if owners is None else [o.without_token_flag() for o in owners]
        shown = []
        for token in tokens:
            info = token.info
            if wanted is not None and not any(info.owner_or_renewer(o) for o in wanted):
                continue
            if not matches(info.labels, selector):
                continue
            if info.owner_or_renewer(principal) or may_describe(info):
                shown.append(token)
        return shown

    def _fresh_token_id(self) -> str:
        """A new token id that ``id_taken`` does not claim."""
        for _ in range(MAX_TOKEN_ID_DRAWS):
            token_id = self._new_token_id()
            if not self._id_taken(token_id):
                return token_id
        raise KafkaError(
            Errors.UNKNOWN_SERVER_ERROR,
            f"no free token id after {MAX_TOKEN_ID_DRAWS} draws: each one equals a user name",
        )

    def _check_enabled(self) -> None:
        if not self._keys.enabled:
            raise KafkaError(Errors.DELEGATION_TOKEN_AUTH_DISABLED)

    def _checked(
        self, token: DelegationToken | None, principal: KafkaPrincipal
    ) -> tuple[TokenInformation, int]:
        """Checks shared by renew and expire, in Kafka's order."""
        self._check_enabled()
        if token is None:
            raise KafkaError(Errors.DELEGATION_TOKEN_NOT_FOUND)
        info = token.info
        if not info.owner_or_renewer(principal):
            raise KafkaError(Errors.DELEGATION_TOKEN_OWNER_MISMATCH)
        now = self._clock.now_ms()
        if info.expired_at(now):
            raise KafkaError(Errors.DELEGATION_TOKEN_EXPIRED)
        return info, now
