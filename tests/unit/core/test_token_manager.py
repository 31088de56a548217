"""Token rules (KIP-48 / Kafka's DelegationTokenManager) with a fake clock."""

from __future__ import annotations

import itertools
import re

import pytest

from tokensvc.core.clock import FakeClock
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.keys import MasterKeys, UnknownKeyError, key_id, token_hmac
from tokensvc.core.manager import TokenManager, random_token_id
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import DelegationToken

MAX = 7 * 86_400_000
RENEW = 86_400_000
START = 1_700_000_000_000

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
CAROL = KafkaPrincipal.user("carol")
ADMIN = KafkaPrincipal.user("admin")
EVE = KafkaPrincipal.user("eve")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def make_manager(clock: FakeClock, keys: MasterKeys | None = None) -> TokenManager:
    ids = (f"token-{n:016d}" for n in itertools.count())
    return TokenManager(
        keys if keys is not None else MasterKeys("master-key"),
        max_lifetime_ms=MAX,
        renew_period_ms=RENEW,
        clock=clock,
        new_token_id=lambda: next(ids),
    )


@pytest.fixture
def manager(clock: FakeClock) -> TokenManager:
    return make_manager(clock)


def error_of(fn, *args) -> Errors:
    with pytest.raises(KafkaError) as caught:
        fn(*args)
    return caught.value.error


# -- ids -------------------------------------------------------------------------------


def test_random_token_id_is_22_url_safe_chars_without_padding() -> None:
    ids = {random_token_id() for _ in range(50)}
    assert len(ids) == 50
    for token_id in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", token_id)


# -- create ----------------------------------------------------------------------------


def test_create_sets_issue_expiry_max_and_hmac_under_current_key(
    manager: TokenManager,
) -> None:
    token = manager.create(ALICE, ALICE, [BOB], 0)
    info = token.info
    assert info.token_id == "token-0000000000000000"
    assert (info.owner, info.token_requester, info.renewers) == (ALICE, ALICE, (BOB,))
    assert info.issue_timestamp == START
    assert info.max_timestamp == START + MAX
    assert info.expiry_timestamp == START + RENEW
    assert info.key_id == key_id("master-key")
    assert token.hmac == token_hmac("master-key", info.token_id)


def test_create_with_negative_max_lifetime_uses_server_max(manager: TokenManager) -> None:
    assert manager.create(ALICE, ALICE, [], -1).info.max_timestamp == START + MAX


def test_create_with_lifetime_above_server_max_is_capped(manager: TokenManager) -> None:
    assert manager.create(ALICE, ALICE, [], MAX * 10).info.max_timestamp == START + MAX


def test_create_with_short_lifetime_caps_first_expiry_at_max(manager: TokenManager) -> None:
    info = manager.create(ALICE, ALICE, [], 60_000).info
    assert info.max_timestamp == START + 60_000
    assert info.expiry_timestamp == START + 60_000


def test_create_for_other_owner_records_requester(manager: TokenManager) -> None:
    info = manager.create(ALICE, ADMIN, [], 0).info
    assert info.owner == ALICE
    assert info.token_requester == ADMIN


def test_create_stores_principals_without_token_flag(manager: TokenManager) -> None:
    flagged = KafkaPrincipal("User", "alice", token_authenticated=True)
    info = manager.create(flagged, flagged, [KafkaPrincipal("User", "bob", True)], 0).info
    assert not info.owner.token_authenticated
    assert not info.token_requester.token_authenticated
    assert info.renewers == (BOB,)


def test_create_with_non_user_renewer_is_invalid_principal_type(manager: TokenManager) -> None:
    group = KafkaPrincipal("Group", "ops")
    assert error_of(manager.create, ALICE, ALICE, [BOB, group], 0) == Errors.INVALID_PRINCIPAL_TYPE


def test_create_with_non_user_owner_is_invalid_principal_type(manager: TokenManager) -> None:
    owner = KafkaPrincipal("Service", "etl")
    assert error_of(manager.create, owner, ALICE, [], 0) == Errors.INVALID_PRINCIPAL_TYPE


def test_create_with_disabled_key_is_auth_disabled(clock: FakeClock) -> None:
    manager = make_manager(clock, MasterKeys(""))
    assert error_of(manager.create, ALICE, ALICE, [], 0) == Errors.DELEGATION_TOKEN_AUTH_DISABLED


def test_manager_rejects_non_positive_server_settings(clock: FakeClock) -> None:
    with pytest.raises(ValueError):
        TokenManager(MasterKeys("k"), max_lifetime_ms=0, renew_period_ms=1, clock=clock)
    with pytest.raises(ValueError):
        TokenManager(MasterKeys("k"), max_lifetime_ms=1, renew_period_ms=0, clock=clock)


# -- renew -----------------------------------------------------------------------------


def test_renew_by_owner_moves_expiry_by_period(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    clock.advance(1000)
    info = manager.renew(token, ALICE, 5000)
    assert info.expiry_timestamp == START + 1000 + 5000
    assert info.max_timestamp == token.info.max_timestamp
    assert info.token_id == token.info.token_id


def test_renew_exactly_at_expiry_succeeds(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    clock.set(token.info.expiry_timestamp)
    info = manager.renew(token, ALICE, 1000)
    assert info.expiry_timestamp == token.info.expiry_timestamp + 1000


def test_renew_one_ms_past_expiry_is_expired(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    clock.set(token.info.expiry_timestamp + 1)
    assert error_of(manager.renew, token, ALICE, 1000) == Errors.DELEGATION_TOKEN_EXPIRED


def test_renew_is_capped_at_max_lifetime(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 2 * RENEW)
    clock.advance(RENEW)
    info = manager.renew(token, ALICE, 10 * RENEW)
    assert info.expiry_timestamp == token.info.max_timestamp


def test_renew_past_max_lifetime_is_expired(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 2 * RENEW)
    renewed = DelegationToken(token.info.with_expiry(token.info.max_timestamp + RENEW), token.hmac)
    clock.set(token.info.max_timestamp + 1)
    assert error_of(manager.renew, renewed, ALICE, 1000) == Errors.DELEGATION_TOKEN_EXPIRED


def test_renew_with_negative_period_uses_default(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    clock.advance(5000)
    assert manager.renew(token, ALICE, -1).expiry_timestamp == START + 5000 + RENEW


def test_renew_with_zero_period_sets_expiry_to_now(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    clock.advance(5000)
    assert manager.renew(token, ALICE, 0).expiry_timestamp == START + 5000


def test_renew_by_renewer_succeeds(manager: TokenManager) -> None:
    token = manager.create(ALICE, ALICE, [BOB], 0)
    assert manager.renew(token, BOB, 10).expiry_timestamp == START + 10


def test_requester_may_renew(manager: TokenManager) -> None:
    token = manager.create(ALICE, ADMIN, [], 0)
    assert manager.renew(token, ADMIN, 10).expiry_timestamp == START + 10


def test_renew_by_non_renewer_is_owner_mismatch(manager: TokenManager) -> None:
    token = manager.create(ALICE, ALICE, [BOB], 0)
    assert error_of(manager.renew, token, EVE, 10) == Errors.DELEGATION_TOKEN_OWNER_MISMATCH


def test_renew_checks_owner_before_expiry(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    clock.set(token.info.max_timestamp + 1)
    assert error_of(manager.renew, token, EVE, 10) == Errors.DELEGATION_TOKEN_OWNER_MISMATCH


def test_renew_of_unknown_hmac_is_not_found(manager: TokenManager) -> None:
    assert error_of(manager.renew, None, ALICE, 10) == Errors.DELEGATION_TOKEN_NOT_FOUND


def test_renew_with_disabled_key_is_auth_disabled(clock: FakeClock) -> None:
    token = make_manager(clock).create(ALICE, ALICE, [], 0)
    disabled = make_manager(clock, MasterKeys(""))
    assert error_of(disabled.renew, token, ALICE, 10) == Errors.DELEGATION_TOKEN_AUTH_DISABLED


def test_token_authenticated_owner_is_still_the_owner(manager: TokenManager) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    flagged = KafkaPrincipal("User", "alice", token_authenticated=True)
    assert manager.renew(token, flagged, 10).expiry_timestamp == START + 10


# -- expire ----------------------------------------------------------------------------


def test_expire_with_negative_period_removes_now(manager: TokenManager) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    assert manager.expire(token, ALICE, -1) is None


def test_expire_with_zero_period_sets_expiry_to_now_and_keeps_token(
    manager: TokenManager, clock: FakeClock
) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    clock.advance(7)
    info = manager.expire(token, ALICE, 0)
    assert info is not None
    assert info.expiry_timestamp == START + 7
    assert not info.expired_at(START + 7)
    assert info.expired_at(START + 8)


def test_expire_with_positive_period_is_capped_at_max(
    manager: TokenManager, clock: FakeClock
) -> None:
    token = manager.create(ALICE, ALICE, [], 1000)
    info = manager.expire(token, ALICE, 5000)
    assert info is not None and info.expiry_timestamp == START + 1000
    info = manager.expire(token, ALICE, 200)
    assert info is not None and info.expiry_timestamp == START + 200


def test_expire_by_renewer_succeeds_and_by_stranger_is_owner_mismatch(
    manager: TokenManager,
) -> None:
    token = manager.create(ALICE, ALICE, [BOB], 0)
    assert manager.expire(token, BOB, -1) is None
    assert error_of(manager.expire, token, EVE, -1) == Errors.DELEGATION_TOKEN_OWNER_MISMATCH


def test_expire_of_unknown_hmac_is_not_found(manager: TokenManager) -> None:
    assert error_of(manager.expire, None, ALICE, -1) == Errors.DELEGATION_TOKEN_NOT_FOUND


def test_expire_of_expired_token_is_expired(manager: TokenManager, clock: FakeClock) -> None:
    token = manager.create(ALICE, ALICE, [], 0)
    clock.set(token.info.expiry_timestamp + 1)
    assert error_of(manager.expire, token, ALICE, -1) == Errors.DELEGATION_TOKEN_EXPIRED


def test_expire_with_disabled_key_is_auth_disabled(clock: FakeClock) -> None:
    token = make_manager(clock).create(ALICE, ALICE, [], 0)
    disabled = make_manager(clock, MasterKeys(""))
    assert error_of(disabled.expire, token, ALICE, -1) == Errors.DELEGATION_TOKEN_AUTH_DISABLED


# -- describe --------------------------------------------------------------------------


@pytest.fixture
def three_tokens(manager: TokenManager) -> list[DelegationToken]:
    return [
        manager.create(ALICE, ALICE, [BOB], 0),
        manager.create(CAROL, CAROL, [], 0),
        manager.create(ALICE, ADMIN, [], 0),
    ]


def ids(tokens: list[DelegationToken]) -> list[str]:
    return [t.info.token_id for t in tokens]


def test_describe_shows_owner_own_tokens_only(manager, three_tokens) -> None:
    shown = manager.describe(three_tokens, ALICE, None, lambda info: False)
    assert ids(shown) == ids([three_tokens[0], three_tokens[2]])


def test_describe_shows_renewer_its_tokens(manager, three_tokens) -> None:
    shown = manager.describe(three_tokens, BOB, None, lambda info: False)
    assert ids(shown) == ids([three_tokens[0]])


def test_describe_shows_requester_the_tokens_it_requested(manager, three_tokens) -> None:
    shown = manager.describe(three_tokens, ADMIN, None, lambda info: False)
    assert ids(shown) == ids([three_tokens[2]])


def test_describe_by_other_principal_needs_may_describe(manager, three_tokens) -> None:
    asked = []

    def may_describe(info):
        asked.append(info.token_id)
        return info.owner == CAROL

    shown = manager.describe(three_tokens, EVE, None, may_describe)
    assert ids(shown) == ids([three_tokens[1]])
    assert asked == ids(three_tokens)


def test_describe_filters_by_requested_owners(manager, three_tokens) -> None:
    shown = manager.describe(three_tokens, EVE, [CAROL], lambda info: True)
    assert ids(shown) == ids([three_tokens[1]])


def test_describe_owner_filter_matches_renewers_too(manager, three_tokens) -> None:
    shown = manager.describe(three_tokens, EVE, [BOB], lambda info: True)
    assert ids(shown) == ids([three_tokens[0]])


def test_describe_with_empty_owner_list_returns_nothing(manager, three_tokens) -> None:
    assert manager.describe(three_tokens, ALICE, [], lambda info: True) == []


def test_describe_with_disabled_key_is_auth_disabled(clock, three_tokens) -> None:
    disabled = make_manager(clock, MasterKeys(""))
    assert (
        error_of(disabled.describe, three_tokens, ALICE, None, lambda info: True)
        == Errors.DELEGATION_TOKEN_AUTH_DISABLED
    )


# -- rotation --------------------------------------------------------------------------


def test_rotation_keeps_old_token_hmac_and_new_tokens_use_current_key(clock) -> None:
    old_manager = make_manager(clock, MasterKeys("old-key"))
    old_token = old_manager.create(ALICE, ALICE, [], 0)
    rotated = make_manager(clock, MasterKeys("new-key", ["old-key"]))
    assert rotated.token_for(old_token.info).hmac == old_token.hmac
    new_token = rotated.create(ALICE, ALICE, [], 0)
    assert new_token.info.key_id == key_id("new-key")
    assert new_token.hmac == token_hmac("new-key", new_token.info.token_id)
    assert rotated.renew(old_token, ALICE, 10).key_id == key_id("old-key")


def test_token_for_unknown_key_id_raises_unknown_key(clock) -> None:
    old_token = make_manager(clock, MasterKeys("old-key")).create(ALICE, ALICE, [], 0)
    dropped = make_manager(clock, MasterKeys("new-key"))
    with pytest.raises(UnknownKeyError):
        dropped.token_for(old_token.info)
