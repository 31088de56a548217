"""Issue 15/21 in the sans-IO SCRAM server: implicit token login, the repeated client
nonce of old librdkafka, derived salts, and failures that cost one derivation.

The lookup here is the broker's shape over a real :class:`TokenCache` (tokens) and a
dictionary (users); no I/O, a fake clock. Client messages are built by hand where the
client under test is not ours (librdkafka's pattern).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import time

import pytest

from tokensvc.audit.events import FINGERPRINT_PREFIX, name_fingerprint
from tokensvc.broker.handlers.sasl import (
    REPEATED_NONCE_SETTING,
    HostNoticeLimiter,
    audited_name,
    note_repeated_nonce,
)
from tokensvc.broker.handlers.scram_users import (
    token_id_collision,
    token_session_may_alter_access,
)
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import FakeClock
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.keys import SCRAM_SALT_LABEL, MasterKeys, derived_secret
from tokensvc.core.manager import MAX_TOKEN_ID_DRAWS, TokenManager
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram import (
    ScramAuthenticationError,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    TokenSalt,
    derive_credential,
    derived_salt,
)
from tokensvc.scram import formatter as scram_formatter
from tokensvc.scram.formatter import client_proof
from tokensvc.scram.messages import ClientFirstMessage, ServerFirstMessage

MECHANISMS = list(ScramMechanism)
NOW = 1_700_000_000_000
MASTER_KEY = "implicit-login-master-key"
KEYS = MasterKeys(MASTER_KEY)
SECRET = derived_secret(KEYS, SCRAM_SALT_LABEL)
OWNER = KafkaPrincipal.user("alice")
TOKEN_ID = "Ab3dEf-hIjKlMnOpQrStUv"
USER_TOKEN_LOOKALIKE = "Zz9yXw-vUtSrQpOnMlKjIh"


def token_info(token_id: str = TOKEN_ID, expiry: int = NOW + 60_000) -> TokenInformation:
    return TokenInformation(
        token_id, OWNER, OWNER, (), NOW - 1000, expiry, NOW + 600_000, KEYS.current_id
    )


class Lookup:
    """The broker's CredentialLookup: users from a dictionary, tokens from a TokenCache."""

    def __init__(self) -> None:
        self.cache = TokenCache(KEYS)
        self.users: dict[tuple[str, ScramMechanism], ScramCredential] = {}

    def add_user(self, name: str, password: str) -> Lookup:
        for mech in MECHANISMS:
            self.users[(name, mech)] = derive_credential(password, mech, 4096, b"user-salt")
        return self

    def add_token(self, info: TokenInformation) -> str:
        token = self.cache.upsert(info)
        assert token is not None
        return token.hmac_b64

    def user_credential(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.users.get((username, mechanism))

    def token_salt(self, token_id: str, mechanism: ScramMechanism) -> TokenSalt | None:
        return self.cache.scram_salt(token_id, mechanism)

    def token_credential(self, token_id: str, mechanism: ScramMechanism):
        return self.cache.scram_credential(token_id, mechanism)

    def derived_count(self) -> int:
        return self.cache.derived_count()


def server(lookup: Lookup, mechanism: ScramMechanism, clock: FakeClock | None = None,
           **kwargs) -> ScramServer:
    kwargs.setdefault("implicit_token_login", True)
    return ScramServer(mechanism, lookup, clock or FakeClock(NOW), fake_salt_secret=SECRET,
                       **kwargs)


def exchange(client: ScramClient, srv: ScramServer) -> None:
    client.verify_server_final(srv.evaluate(client.final_message(srv.evaluate(client.first_message()))))


def fails_with(reason: str, call, *args) -> ScramAuthenticationError:
    with pytest.raises(ScramAuthenticationError) as excinfo:
        call(*args)
    assert excinfo.value.reason == reason
    return excinfo.value


def salt_of(srv: ScramServer, name: str, extensions: str = "") -> bytes:
    return ServerFirstMessage.parse(srv.evaluate(f"n,,n={name},r=abc{extensions}".encode()).decode()).salt


# -- implicit token login ------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_token_id_as_user_name_logs_in_as_the_token_without_the_extension(
    mechanism: ScramMechanism,
) -> None:
    lookup = Lookup()
    hmac_b64 = lookup.add_token(token_info())
    srv = server(lookup, mechanism)
    exchange(ScramClient(mechanism, TOKEN_ID, hmac_b64), srv)
    assert srv.complete and srv.implicit and not srv.token_requested
    assert srv.token_login and srv.token_authenticated
    assert srv.token_id == TOKEN_ID and srv.token_info == token_info()
    assert srv.principal == KafkaPrincipal("User", "alice", token_authenticated=True)


def test_explicit_tokenauth_login_is_unchanged_and_not_implicit() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    lookup = Lookup()
    hmac_b64 = lookup.add_token(token_info())
    srv = server(lookup, mechanism)
    exchange(ScramClient(mechanism, TOKEN_ID, hmac_b64, extensions={"tokenauth": "true"}), srv)
    assert srv.token_authenticated and srv.token_requested and not srv.implicit


def test_with_implicit_login_off_a_token_id_is_an_unknown_user() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup()
    hmac_b64 = lookup.add_token(token_info())
    srv = server(lookup, mechanism, implicit_token_login=False)
    fails_with("unknown_user", exchange, ScramClient(mechanism, TOKEN_ID, hmac_b64), srv)
    assert not srv.implicit and not srv.token_login


def test_a_user_always_wins_over_a_token_of_the_same_name() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user(TOKEN_ID, "user-password")
    hmac_b64 = lookup.add_token(token_info())
    srv = server(lookup, mechanism)
    exchange(ScramClient(mechanism, TOKEN_ID, "user-password"), srv)
    assert srv.principal == KafkaPrincipal.user(TOKEN_ID) and not srv.token_authenticated
    srv = server(lookup, mechanism)
    fails_with("bad_proof", exchange, ScramClient(mechanism, TOKEN_ID, hmac_b64), srv)


def test_implicit_login_with_an_expired_token_fails_as_expired() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup()
    hmac_b64 = lookup.add_token(token_info(expiry=NOW - 1))
    srv = server(lookup, mechanism)
    fails_with("expired_token", exchange, ScramClient(mechanism, TOKEN_ID, hmac_b64), srv)
    assert srv.implicit and srv.principal is None and srv.token_id is None


def test_implicit_login_of_a_token_removed_after_client_first_fails_as_unknown_token() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup()
    hmac_b64 = lookup.add_token(token_info())
    srv = server(lookup, mechanism)
    client = ScramClient(mechanism, TOKEN_ID, hmac_b64)
    server_first = srv.evaluate(client.first_message())
    lookup.cache.remove(TOKEN_ID)
    fails_with("unknown_token", srv.evaluate, client.final_message(server_first))
    assert srv.principal is None and srv.token_info is None


def test_a_token_expiring_between_first_and_final_fails() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    clock = FakeClock(NOW)
    lookup = Lookup()
    hmac_b64 = lookup.add_token(token_info(expiry=NOW))
    srv = server(lookup, mechanism, clock)
    client = ScramClient(mechanism, TOKEN_ID, hmac_b64)
    server_first = srv.evaluate(client.first_message())
    clock.advance(1)
    fails_with("expired_token", srv.evaluate, client.final_message(server_first))


# -- no new oracle: salts, errors, costs ------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_live_token_and_an_unknown_name_get_salts_from_one_derivation(
    mechanism: ScramMechanism,
) -> None:
    lookup = Lookup()
    lookup.add_token(token_info())
    live = salt_of(server(lookup, mechanism), TOKEN_ID)
    unknown = salt_of(server(lookup, mechanism), USER_TOKEN_LOOKALIKE)
    assert live == derived_salt(SECRET, mechanism, TOKEN_ID)
    assert unknown == derived_salt(SECRET, mechanism, USER_TOKEN_LOOKALIKE)
    # The credential the cache derives has the announced salt (else no login would work).
    credential, _ = lookup.cache.scram_credential(TOKEN_ID, mechanism)
    assert credential.salt == live and credential.iterations == 4096


def test_every_broker_announces_the_same_salt_for_a_token_and_for_an_unknown_name() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    brokers = [Lookup(), Lookup()]  # two caches, one master key: two brokers
    for lookup in brokers:
        lookup.add_token(token_info())
    for name in (TOKEN_ID, USER_TOKEN_LOOKALIKE):
        salts = {salt_of(server(lookup, mechanism), name) for lookup in brokers}
        salts |= {salt_of(server(lookup, mechanism), name, ",tokenauth=true") for lookup in brokers}
        assert len(salts) == 1, name


def test_unknown_name_fails_alike_with_implicit_login_on_and_off() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user("bob", "bob-pw")
    lookup.add_token(token_info())
    seen = []
    for implicit in (True, False):
        srv = server(lookup, mechanism, implicit_token_login=implicit)
        client = ScramClient(mechanism, USER_TOKEN_LOOKALIKE, "guess")
        first = ServerFirstMessage.parse(srv.evaluate(client.first_message()).decode())
        error = fails_with("unknown_user", srv.evaluate, client.final_message(first.to_text().encode()))
        seen.append((first.salt, first.iterations, type(error), str(error), error.error, srv.name_known))
    assert seen[0] == seen[1]
    assert seen[0][4] == Errors.SASL_AUTHENTICATION_FAILED and seen[0][5] is False


def _auc(a: list[int], b: list[int]) -> float:
    """P(a sample of ``a`` > a sample of ``b``), ties counting half (Mann-Whitney U / n1n2)."""
    ranked = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks = [0.0] * len(ranked)
    i = 0
    while i < len(ranked):
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    rank_sum_a = sum(r for r, (_, group) in zip(ranks, ranked, strict=True) if group == 0)
    u = rank_sum_a - len(a) * (len(a) + 1) / 2
    return u / (len(a) * len(b))


def test_auc_separates_shifted_samples_and_not_equal_ones() -> None:
    rng = random.Random(7)
    base = [rng.gauss(100, 5) for _ in range(500)]
    same = [rng.gauss(100, 5) for _ in range(500)]
    shifted = [rng.gauss(110, 5) for _ in range(500)]
    assert 0.45 < _auc(same, base) < 0.55
    assert _auc(shifted, base) > 0.9


def test_unknown_name_timing_at_client_first_is_not_separable_with_implicit_on_or_off() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user("bob", "bob-pw")
    lookup.add_token(token_info())
    samples: dict[bool, list[int]] = {True: [], False: []}
    order = [True, False] * 1500
    random.Random(15).shuffle(order)
    for implicit in order:
        srv = server(lookup, mechanism, implicit_token_login=implicit)
        message = f"n,,n=nobody-{len(samples[implicit])},r=abc".encode()
        start = time.perf_counter_ns()
        srv.evaluate(message)
        samples[implicit].append(time.perf_counter_ns() - start)
    # A separable difference gives an AUC near 0 or 1 (the test above); equal paths ~0.5.
    assert 0.4 < _auc(samples[True], samples[False]) < 0.6


@pytest.fixture
def pbkdf2_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = hashlib.pbkdf2_hmac

    def counting(name, password, salt, iterations, dklen=None):
        calls.append(iterations)
        return real(name, password, salt, iterations, dklen)

    monkeypatch.setattr(scram_formatter.hashlib, "pbkdf2_hmac", counting)
    return calls


@pytest.mark.parametrize(
    ("case", "expected_runs"),
    [
        ("user_wrong_password", 1),
        ("unknown_name", 1),
        ("unknown_token_with_extension", 1),
        ("token_first_login_wrong_proof", 1),
        ("token_again_wrong_proof", 1),
        ("expired_token", 1),
        ("user_success", 0),
        ("token_first_login_success", 1),
        ("token_again_success", 0),
    ],
)
def test_every_failed_proof_costs_exactly_one_pbkdf2_like_a_first_token_login(
    pbkdf2_calls: list[int], case: str, expected_runs: int
) -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user("bob", "bob-pw")
    hmac_b64 = lookup.add_token(token_info())
    lookup.add_token(token_info("Expired-token-id-0000000", expiry=NOW - 1))
    if case.startswith("token_again"):
        lookup.cache.scram_credential(TOKEN_ID, mechanism)
    client = {
        "user_wrong_password": ScramClient(mechanism, "bob", "nope"),
        "unknown_name": ScramClient(mechanism, "nobody", "nope"),
        "unknown_token_with_extension": ScramClient(
            mechanism, USER_TOKEN_LOOKALIKE, "nope", extensions={"tokenauth": "true"}
        ),
        "token_first_login_wrong_proof": ScramClient(mechanism, TOKEN_ID, "nope"),
        "token_again_wrong_proof": ScramClient(mechanism, TOKEN_ID, "nope"),
        "expired_token": ScramClient(mechanism, "Expired-token-id-0000000", "nope"),
        "user_success": ScramClient(mechanism, "bob", "bob-pw"),
        "token_first_login_success": ScramClient(mechanism, TOKEN_ID, hmac_b64),
        "token_again_success": ScramClient(mechanism, TOKEN_ID, hmac_b64),
    }[case]
    srv = server(lookup, mechanism)
    server_first = srv.evaluate(client.first_message())
    final = client.final_message(server_first)  # the client's own PBKDF2 runs here
    pbkdf2_calls.clear()
    try:
        srv.evaluate(final)
    except ScramAuthenticationError:
        assert expected_runs == 1 and not srv.complete
    else:
        assert srv.complete
    assert pbkdf2_calls == [4096] * expected_runs


# -- old librdkafka: the repeated client nonce -----------------------------------------------


def librdkafka_final(mechanism: ScramMechanism, client_first: str, server_first: bytes,
                     password: str, *, proof_over_rfc_form: bool = False) -> bytes:
    """client-final as librdkafka < 2.6.1 builds it: ``c=biws,r=<client nonce><whole
    server-first nonce>``, the proof over the AuthMessage with that very text."""
    first = ClientFirstMessage.parse(client_first)
    received = ServerFirstMessage.parse(server_first.decode())
    sent = f"c=biws,r={first.nonce}{received.nonce}"
    signed = f"c=biws,r={received.nonce}" if proof_over_rfc_form else sent
    salted = mechanism.salted_password(password, received.salt, received.iterations)
    auth = f"{first.bare},{server_first.decode()},{signed}".encode()
    proof = base64.b64encode(client_proof(mechanism, salted, auth)).decode()
    return f"{sent},p={proof}".encode()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("who", ["user", "token"])
def test_repeated_client_nonce_is_accepted_when_configured(mechanism: ScramMechanism,
                                                           who: str) -> None:
    lookup = Lookup().add_user("bob", "bob-pw")
    hmac_b64 = lookup.add_token(token_info())
    name, password = ("bob", "bob-pw") if who == "user" else (TOKEN_ID, hmac_b64)
    srv = server(lookup, mechanism, accept_repeated_client_nonce=True)
    client_first = f"n,,n={name},r=rdkafkaNonce0123456789"
    server_first = srv.evaluate(client_first.encode())
    srv.evaluate(librdkafka_final(mechanism, client_first, server_first, password))
    assert srv.complete and srv.repeated_client_nonce
    assert srv.token_authenticated is (who == "token")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_repeated_client_nonce_is_refused_with_its_own_reason_by_default(
    mechanism: ScramMechanism,
) -> None:
    lookup = Lookup().add_user("bob", "bob-pw")
    srv = server(lookup, mechanism)
    client_first = "n,,n=bob,r=rdkafkaNonce0123456789"
    server_first = srv.evaluate(client_first.encode())
    fails_with("repeated_client_nonce", srv.evaluate,
               librdkafka_final(mechanism, client_first, server_first, "bob-pw"))
    assert srv.repeated_client_nonce and srv.principal is None


def test_with_the_setting_on_only_the_exact_librdkafka_form_is_relaxed() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user("bob", "bob-pw")
    client_first = "n,,n=bob,r=cn"

    def attempt(mutate) -> ScramServer:
        srv = server(lookup, mechanism, accept_repeated_client_nonce=True)
        server_first = srv.evaluate(client_first.encode())
        good = librdkafka_final(mechanism, client_first, server_first, "bob-pw")
        with pytest.raises(ScramAuthenticationError):
            srv.evaluate(mutate(good, server_first))
        return srv

    def replace_nonce(new) -> object:
        def mutate(good: bytes, server_first: bytes) -> bytes:
            nonce = ServerFirstMessage.parse(server_first.decode()).nonce
            return good.replace(f"r=cn{nonce}".encode(), f"r={new(nonce)}".encode())
        return mutate

    cases = {
        # the client nonce, then the server nonce cut short
        "truncated": replace_nonce(lambda n: f"cn{n[:-1]}"),
        # the server nonce followed by the client nonce
        "suffix_instead_of_prefix": replace_nonce(lambda n: f"{n}cn"),
        # another prefix that merely ends with the server nonce (Kafka 3.8's endsWith)
        "any_prefix": replace_nonce(lambda n: f"xx{n}"),
    }
    for name, mutate in cases.items():
        assert attempt(mutate).failure_reason == "nonce_mismatch", name


def test_repeated_nonce_proof_must_cover_the_message_as_sent() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    lookup = Lookup().add_user("bob", "bob-pw")
    srv = server(lookup, mechanism, accept_repeated_client_nonce=True)
    client_first = "n,,n=bob,r=cn"
    server_first = srv.evaluate(client_first.encode())
    final = librdkafka_final(mechanism, client_first, server_first, "bob-pw",
                             proof_over_rfc_form=True)
    fails_with("bad_proof", srv.evaluate, final)


def test_repeated_nonce_notice_names_the_host_and_setting_once_per_ten_minutes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(NOW)
    limiter = HostNoticeLimiter()
    caplog.set_level(logging.WARNING, logger="tokensvc.broker.sasl")
    assert note_repeated_nonce(limiter, "10.1.2.3", clock.now_ms())
    assert "10.1.2.3" in caplog.text and REPEATED_NONCE_SETTING in caplog.text
    caplog.clear()
    clock.advance(599_999)
    assert not note_repeated_nonce(limiter, "10.1.2.3", clock.now_ms())
    assert note_repeated_nonce(limiter, "10.9.9.9", clock.now_ms())
    assert "10.9.9.9" in caplog.text and "10.1.2.3" not in caplog.text
    clock.advance(1)
    assert note_repeated_nonce(limiter, "10.1.2.3", clock.now_ms())


def test_notice_limiter_holds_a_bounded_number_of_hosts() -> None:
    limiter = HostNoticeLimiter(interval_ms=600_000, max_hosts=3)
    for i in range(10):
        assert limiter.allow(f"h{i}", NOW)
    assert not limiter.allow("h9", NOW + 1)
    assert limiter.allow("h0", NOW + 1)  # forgotten first: at worst an early repeat
    with pytest.raises(ValueError):
        HostNoticeLimiter(max_hosts=0)


# -- audit names, collisions, token sessions ---------------------------------------------------


def test_unknown_names_are_audited_as_keyed_fingerprints_known_ones_verbatim() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user("bob", "bob-pw")
    lookup.add_token(token_info())
    key = b"k" * 32
    shown = {}
    for name in ("bob", TOKEN_ID, "Sup3r-Secret-Passw0rd"):
        srv = server(lookup, mechanism)
        srv.evaluate(f"n,,n={name},r=abc".encode())
        shown[name] = audited_name(srv, key)
    assert shown["bob"] == "bob" and shown[TOKEN_ID] == TOKEN_ID
    fingerprint = shown["Sup3r-Secret-Passw0rd"]
    assert fingerprint.startswith(FINGERPRINT_PREFIX) and "Sup3r" not in fingerprint
    assert fingerprint == name_fingerprint(key, "Sup3r-Secret-Passw0rd")
    assert fingerprint != name_fingerprint(b"j" * 32, "Sup3r-Secret-Passw0rd")
    assert len(fingerprint) == len(FINGERPRINT_PREFIX) + 16


def test_new_token_ids_skip_names_of_existing_users() -> None:
    ids = iter(["bob", "carol", "fresh-id"])
    manager = TokenManager(KEYS, max_lifetime_ms=1000, renew_period_ms=1000,
                           clock=FakeClock(NOW), new_token_id=lambda: next(ids),
                           id_taken=lambda name: name in {"bob", "carol"})
    assert manager.create(OWNER, OWNER, (), -1).info.token_id == "fresh-id"


def test_token_creation_gives_up_when_every_drawn_id_is_taken() -> None:
    drawn = []
    manager = TokenManager(KEYS, max_lifetime_ms=1000, renew_period_ms=1000,
                           clock=FakeClock(NOW), new_token_id=lambda: drawn.append(1) or "bob",
                           id_taken=lambda name: True)
    with pytest.raises(KafkaError) as excinfo:
        manager.create(OWNER, OWNER, (), -1)
    assert excinfo.value.error == Errors.UNKNOWN_SERVER_ERROR
    assert len(drawn) == MAX_TOKEN_ID_DRAWS


def test_user_named_like_a_token_is_refused_with_a_clear_reason() -> None:
    assert token_id_collision("bob", token_known=False) is None
    reason = token_id_collision(TOKEN_ID, token_known=True)
    assert reason is not None and TOKEN_ID in reason and "delegation token" in reason


@pytest.mark.parametrize(
    ("token_authenticated", "allowed_by_config", "may"),
    [(False, False, True), (True, False, False), (True, True, True), (False, True, True)],
)
def test_token_sessions_may_not_alter_access_unless_configured(
    token_authenticated: bool, allowed_by_config: bool, may: bool
) -> None:
    assert token_session_may_alter_access(token_authenticated, allowed_by_config) is may


# --- deferred derivations: no PBKDF2 inside evaluate (the broker runs them in a thread) ---


def counting_pbkdf2(monkeypatch) -> list[int]:
    """Count PBKDF2 runs (every derivation, the spent ones included, goes through it)."""
    calls: list[int] = []
    real = hashlib.pbkdf2_hmac

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counted)
    return calls


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_deferred_first_token_login_derives_in_prepare_not_in_evaluate(mechanism, monkeypatch):
    lookup = Lookup()
    hmac_b64 = lookup.add_token(token_info())
    srv = server(lookup, mechanism, defer_derivations=True)
    client = ScramClient(mechanism, TOKEN_ID, hmac_b64, extensions={"tokenauth": "true"})
    server_first = srv.evaluate(client.first_message())
    final = client.final_message(server_first)  # the client's own PBKDF2 runs here
    calls = counting_pbkdf2(monkeypatch)
    assert srv.needs_derivation
    srv.prepare()
    assert len(calls) == 1 and not srv.needs_derivation
    client.verify_server_final(srv.evaluate(final))
    assert len(calls) == 1  # evaluate derived nothing
    assert srv.complete and srv.token_id == TOKEN_ID and not srv.owed_derivation


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_deferred_login_of_a_derived_token_needs_no_derivation(mechanism):
    lookup = Lookup()
    hmac_b64 = lookup.add_token(token_info())
    lookup.token_credential(TOKEN_ID, mechanism)  # derived by an earlier login
    srv = server(lookup, mechanism, defer_derivations=True)
    client = ScramClient(mechanism, TOKEN_ID, hmac_b64, extensions={"tokenauth": "true"})
    final = client.final_message(srv.evaluate(client.first_message()))
    assert not srv.needs_derivation
    client.verify_server_final(srv.evaluate(final))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_deferred_failure_owes_its_derivation_and_pays_it_outside_evaluate(mechanism,
                                                                              monkeypatch):
    lookup = Lookup()
    lookup.add_token(token_info())
    lookup.token_credential(TOKEN_ID, mechanism)  # derived: a failure derives nothing
    srv = server(lookup, mechanism, defer_derivations=True)
    client = ScramClient(mechanism, TOKEN_ID, "not-the-hmac", extensions={"tokenauth": "true"})
    final = client.final_message(srv.evaluate(client.first_message()))
    calls = counting_pbkdf2(monkeypatch)
    fails_with("bad_proof", srv.evaluate, final)
    assert calls == [] and srv.owed_derivation
    srv.spend_one_derivation()
    assert len(calls) == 1 and not srv.owed_derivation


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_without_deferral_a_failure_still_spends_its_derivation_inline(mechanism, monkeypatch):
    lookup = Lookup()
    srv = server(lookup, mechanism)
    client = ScramClient(mechanism, "nobody-at-all", "password")
    final = client.final_message(srv.evaluate(client.first_message()))
    calls = counting_pbkdf2(monkeypatch)
    fails_with("unknown_user", srv.evaluate, final)
    assert len(calls) == 1 and not srv.owed_derivation
