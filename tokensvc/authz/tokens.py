"""The ACL checks of the delegation token APIs, exactly as Kafka's KafkaApis makes them.

Owns: which resource and operation each token permission is checked on.

- Create for another owner: CREATE_TOKENS on the USER resource named by the owner
  principal's string form (``User:bob``). Creating a token for oneself needs no ACL.
- Describe a token one neither owns nor renews: DESCRIBE on the DELEGATION_TOKEN
  resource named by the token id, or DESCRIBE_TOKENS on the USER resource named by
  the owner (``User:bob``).

Must not: apply token rules (ownership, renewers, expiry are
:class:`tokensvc.core.manager.TokenManager`'s) or check the session (token requests
on token-authenticated, PLAINTEXT or one-way SSL sessions are refused before any ACL
is consulted). ``authorizer`` None means no authorizer is configured: allowed, as in
Kafka. A not-ready authorizer raises KafkaError(AUTHORIZER_NOT_READY).
"""

from __future__ import annotations

from collections.abc import Callable

from tokensvc.authz.acl import AclOperation, ResourceType
from tokensvc.authz.authorizer import AclAuthorizer
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation


def _plain(principal: KafkaPrincipal) -> KafkaPrincipal:
    return KafkaPrincipal(principal.principal_type, principal.name)


def may_create_for_owner(
    authorizer: AclAuthorizer | None,
    requester: KafkaPrincipal,
    host: str,
    owner: KafkaPrincipal,
) -> bool:
    """May ``requester`` create a token owned by ``owner``?"""
    if _plain(owner) == _plain(requester) or authorizer is None:
        return True
    return authorizer.authorize(
        _plain(requester), host, AclOperation.CREATE_TOKENS, ResourceType.USER, str(_plain(owner))
    )


def may_describe_token(
    authorizer: AclAuthorizer | None,
    requester: KafkaPrincipal,
    host: str,
    info: TokenInformation,
) -> bool:
    """The ACL half of describe: may ``requester`` see a token it neither owns nor renews?"""
    if authorizer is None:
        return True
    plain = _plain(requester)
    return authorizer.authorize(
        plain, host, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, info.token_id
    ) or authorizer.authorize(
        plain, host, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, str(_plain(info.owner))
    )


def describe_permission(
    authorizer: AclAuthorizer | None, requester: KafkaPrincipal, host: str
) -> Callable[[TokenInformation], bool]:
    """``may_describe_token`` bound to one request: the ``may_describe`` argument of
    ``TokenManager.describe``."""
    return lambda info: may_describe_token(authorizer, requester, host, info)
