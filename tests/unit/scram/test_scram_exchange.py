"""ScramServer and ScramClient: JDK vectors, RFC 7677, every failure class, round trips."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from pathlib import Path

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from tokensvc.core.clock import FakeClock
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram import (
    ScramAuthenticationError,
    ScramClient,
    ScramClientState,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    ScramServerState,
    TokenSalt,
    derive_credential,
)
from tokensvc.scram.formatter import client_proof, credential_from_salted_password
from tokensvc.scram.messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ServerFirstMessage,
    auth_message,
)

VECTORS = json.loads((Path(__file__).parents[2] / "data" / "token_scram_vectors.json").read_text())
MECHANISMS = list(ScramMechanism)
NOW = 1_700_000_000_000
TOKEN_ID = "Ab3dEf-hIjKlMnOpQrStUv"
TOKEN_PASSWORD = VECTORS["token_hmac"][0]["hmac_base64"]
OWNER = KafkaPrincipal.user("alice")
SALT = b"0123456789abcdef-salt"
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


@functools.cache
def credential(password: str, mechanism: ScramMechanism, iterations: int = 4096) -> ScramCredential:
    return derive_credential(password, mechanism, iterations, SALT)


def token_info(expiry: int = NOW + 60_000, max_timestamp: int = NOW + 600_000) -> TokenInformation:
    return TokenInformation(
        TOKEN_ID, OWNER, OWNER, (KafkaPrincipal.user("bob"),), NOW - 1000, expiry, max_timestamp
    )


class Lookup:
    """An in-memory CredentialLookup: users by name, tokens by id."""

    def __init__(self) -> None:
        self.users: dict[tuple[str, ScramMechanism], ScramCredential] = {}
        self.tokens: dict[tuple[str, ScramMechanism], tuple[ScramCredential, TokenInformation]] = {}

    def add_user(self, name: str, password: str, mechanism: ScramMechanism, iterations: int = 4096):
        self.users[(name, mechanism)] = credential(password, mechanism, iterations)
        return self

    def add_token(self, info: TokenInformation, password: str, mechanism: ScramMechanism):
        self.tokens[(info.token_id, mechanism)] = (credential(password, mechanism), info)
        return self

    def user_credential(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.users.get((username, mechanism))

    def token_salt(self, token_id: str, mechanism: ScramMechanism) -> TokenSalt | None:
        found = self.tokens.get((token_id, mechanism))
        return None if found is None else TokenSalt(found[0].salt, found[0].iterations, found[1])

    def token_credential(
        self, token_id: str, mechanism: ScramMechanism
    ) -> tuple[ScramCredential, TokenInformation] | None:
        return self.tokens.get((token_id, mechanism))

    def derived_count(self) -> int:
        return 0


def exchange(client: ScramClient, server: ScramServer) -> None:
    """Run a whole exchange; any failure propagates."""
    server_first = server.evaluate(client.first_message())
    server_final = server.evaluate(client.final_message(server_first))
    client.verify_server_final(server_final)


def hand_made_final(
    mechanism: ScramMechanism,
    client_first: str,
    server_first: str,
    password: str,
    *,
    extensions: dict[str, str] | None = None,
) -> bytes:
    """A client-final built from the messages and formatter, for cases ScramClient cannot send
    (authzid, client-final extensions)."""
    first = ClientFirstMessage.parse(client_first)
    received = ServerFirstMessage.parse(server_first)
    salted = mechanism.salted_password(password, received.salt, received.iterations)
    unsigned = ClientFinalMessage(first.gs2_header.encode(), received.nonce, b"", extensions or {})
    proof = client_proof(mechanism, salted, auth_message(first, received, unsigned))
    return (
        ClientFinalMessage(unsigned.channel_binding, received.nonce, proof, unsigned.extensions)
        .to_text()
        .encode()
    )


def derive_credential_from_raw(mechanism: ScramMechanism, salted: bytes) -> ScramCredential:
    return credential_from_salted_password(mechanism, salted, SALT, 4096)


def fails_with(reason: str, call, *args) -> ScramAuthenticationError:
    with pytest.raises(ScramAuthenticationError) as excinfo:
        call(*args)
    assert excinfo.value.reason == reason
    return excinfo.value


def user_setup(
    mechanism: ScramMechanism, *, password: str = "pencil", clock: FakeClock | None = None
):
    server = ScramServer(
        mechanism, Lookup().add_user("alice", "pencil", mechanism), clock or FakeClock(NOW)
    )
    return ScramClient(mechanism, "alice", password), server


def token_setup(mechanism: ScramMechanism, info: TokenInformation, clock: FakeClock):
    lookup = Lookup().add_token(info, TOKEN_PASSWORD, mechanism)
    client = ScramClient(mechanism, TOKEN_ID, TOKEN_PASSWORD, extensions={"tokenauth": "true"})
    return client, ScramServer(mechanism, lookup, clock)


# -- vectors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "vector", VECTORS["scram"], ids=lambda v: f"{v['mechanism']}-{v['iterations']}"
)
def test_jdk_token_vectors_are_reproduced_byte_for_byte(vector: dict) -> None:
    mechanism = ScramMechanism.from_name(vector["mechanism"])
    salt = base64.b64decode(vector["salt_base64"])
    stored = derive_credential(vector["password"], mechanism, vector["iterations"], salt)
    assert base64.b64encode(stored.stored_key).decode() == vector["stored_key_base64"]
    assert base64.b64encode(stored.server_key).decode() == vector["server_key_base64"]
    client_nonce = vector["client_first"].split(",r=")[1].split(",")[0]
    combined = vector["server_first"].split(",")[0][len("r=") :]
    info = TokenInformation(
        vector["username"], OWNER, OWNER, (), NOW - 1, NOW + 60_000, NOW + 600_000
    )
    lookup = Lookup()
    lookup.tokens[(vector["username"], mechanism)] = (stored, info)
    server = ScramServer(
        mechanism, lookup, FakeClock(NOW), nonce_factory=lambda: combined[len(client_nonce) :]
    )
    client = ScramClient(
        mechanism,
        vector["username"],
        vector["password"],
        extensions={"tokenauth": "true"},
        nonce=client_nonce,
    )

    client_first = client.first_message()
    assert client_first == vector["client_first"].encode()
    server_first = server.evaluate(client_first)
    assert server_first == vector["server_first"].encode()
    client_final = client.final_message(server_first)
    assert client_final == vector["client_final"].encode()
    server_final = server.evaluate(client_final)
    assert server_final == vector["server_final"].encode()
    client.verify_server_final(server_final)

    assert server.complete and client.complete
    assert server.token_authenticated and server.token_id == vector["username"]
    assert server.principal == KafkaPrincipal("User", "alice", token_authenticated=True)
    assert server.token_info == info


def test_rfc7677_example_is_reproduced_by_client_and_server() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    rfc_salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    lookup = Lookup()
    lookup.users[("user", mechanism)] = derive_credential("pencil", mechanism, 4096, rfc_salt)
    server = ScramServer(mechanism, lookup, FakeClock(NOW), nonce_factory=lambda: RFC_SERVER_NONCE)
    client = ScramClient(mechanism, "user", "pencil", nonce=RFC_CLIENT_NONCE)

    client_first = client.first_message()
    assert client_first == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.evaluate(client_first)
    assert server_first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    client_final = client.final_message(server_first)
    assert client_final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    server_final = server.evaluate(client_final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify_server_final(server_final)
    assert server.principal == KafkaPrincipal("User", "user")
    assert not server.token_authenticated and server.token_id is None


# -- round trips ---------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("username", ["alice", "a,b=c", "=2C=3D", "名前,ü=ß", "user with space"])
def test_user_round_trip_with_special_characters(mechanism: ScramMechanism, username: str) -> None:
    lookup = Lookup().add_user(username, "s3cret,=ü", mechanism)
    server = ScramServer(mechanism, lookup, FakeClock(NOW))
    client = ScramClient(mechanism, username, "s3cret,=ü")
    exchange(client, server)
    assert server.complete and client.complete
    assert server.state is ScramServerState.COMPLETE
    assert client.state is ScramClientState.COMPLETE
    assert server.username == username
    assert server.principal == KafkaPrincipal.user(username)
    assert not server.token_requested and not server.token_authenticated


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_token_round_trip_authenticates_as_owner(mechanism: ScramMechanism) -> None:
    client, server = token_setup(mechanism, token_info(), FakeClock(NOW))
    exchange(client, server)
    assert server.token_authenticated and server.token_requested
    assert server.token_id == TOKEN_ID
    assert server.principal == KafkaPrincipal("User", "alice", True)
    assert server.principal.token_authenticated


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_token_owner_with_special_characters_becomes_principal(mechanism: ScramMechanism) -> None:
    owner = KafkaPrincipal.user("ö,w=n")
    info = TokenInformation(TOKEN_ID, owner, owner, (), NOW, NOW + 1000, NOW + 2000)
    client, server = token_setup(mechanism, info, FakeClock(NOW))
    exchange(client, server)
    assert server.principal == KafkaPrincipal("User", "ö,w=n", token_authenticated=True)


def test_extensions_go_after_nonce_in_given_order_and_reach_the_server() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_token(token_info(), TOKEN_PASSWORD, mechanism)
    client = ScramClient(
        mechanism, TOKEN_ID, TOKEN_PASSWORD, extensions={"zz": "1", "tokenauth": "TRUE"}, nonce="n0"
    )
    server = ScramServer(mechanism, lookup, FakeClock(NOW))
    first = client.first_message()
    assert first == f"n,,n={TOKEN_ID},r=n0,zz=1,tokenauth=TRUE".encode()
    client.verify_server_final(server.evaluate(client.final_message(server.evaluate(first))))
    assert server.extensions == {"zz": "1", "tokenauth": "TRUE"}
    assert server.token_authenticated


def test_authzid_equal_to_username_is_accepted() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    server = ScramServer(mechanism, Lookup().add_user("a,b", "pencil", mechanism), FakeClock(NOW))
    first = "n,a=a=2Cb,n=a=2Cb,r=abc"
    server_first = server.evaluate(first.encode()).decode()
    server.evaluate(hand_made_final(mechanism, first, server_first, "pencil"))
    assert server.complete and server.principal == KafkaPrincipal.user("a,b")


def test_client_final_extensions_are_part_of_the_auth_message() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    server = ScramServer(mechanism, Lookup().add_user("alice", "pencil", mechanism), FakeClock(NOW))
    first = "n,,n=alice,r=abc"
    server_first = server.evaluate(first.encode()).decode()
    final = hand_made_final(mechanism, first, server_first, "pencil", extensions={"ext": "v"})
    assert b",ext=v,p=" in final
    assert server.evaluate(final).startswith(b"v=")
    assert server.complete


def test_scramp_client_authenticates_against_our_server() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    server = ScramServer(mechanism, Lookup().add_user("carol", "pencil", mechanism), FakeClock(NOW))
    other = scramp.ScramClient(["SCRAM-SHA-256"], "carol", "pencil")
    server_first = server.evaluate(other.get_client_first().encode())
    other.set_server_first(server_first.decode())
    server_final = server.evaluate(other.get_client_final().encode())
    other.set_server_final(server_final.decode())
    assert server.complete and server.principal == KafkaPrincipal.user("carol")


def test_our_client_authenticates_against_scramp_server() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    stored = credential("pencil", mechanism)
    other = scramp.ScramMechanism("SCRAM-SHA-512").make_server(
        lambda _user: (stored.salt, stored.stored_key, stored.server_key, stored.iterations)
    )
    client = ScramClient(mechanism, "dave", "pencil")
    other.set_client_first(client.first_message().decode())
    final = client.final_message(other.get_server_first().encode())
    other.set_client_final(final.decode())
    client.verify_server_final(other.get_server_final().encode())
    assert client.complete


def test_password_is_utf8_without_saslprep_like_kafka() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    password = "pass\u00a0word\u00ad"  # SASLprep would map NBSP to space and drop the soft hyphen
    stored = derive_credential(password, mechanism, 4096, SALT)
    raw = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), SALT, 4096)
    assert stored == derive_credential_from_raw(mechanism, raw)
    lookup = Lookup()
    lookup.users[("eve", mechanism)] = stored
    client = ScramClient(mechanism, "eve", password)
    server = ScramServer(mechanism, lookup, FakeClock(NOW))
    exchange(client, server)
    assert server.complete


def test_salted_password_cache_skips_pbkdf2_on_reuse() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user("alice", "pencil", mechanism)
    cache: dict = {}
    for _ in range(3):
        client = ScramClient(mechanism, "alice", "pencil", salted_password_cache=cache)
        exchange(client, ScramServer(mechanism, lookup, FakeClock(NOW)))
    assert list(cache) == [(mechanism, "pencil", SALT, 4096)]
    # A poisoned entry is what the client uses: proof that the cache is consulted.
    cache[(mechanism, "pencil", SALT, 4096)] = b"\x00" * 32
    client = ScramClient(mechanism, "alice", "pencil", salted_password_cache=cache)
    server = ScramServer(mechanism, lookup, FakeClock(NOW))
    fails_with("bad_proof", exchange, client, server)


# -- server failures -------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_is_bad_proof_at_client_final(mechanism: ScramMechanism) -> None:
    client, server = user_setup(mechanism, password="not-pencil")
    server_first = server.evaluate(client.first_message())
    assert server.state is ScramServerState.RECEIVE_CLIENT_FINAL
    fails_with("bad_proof", server.evaluate, client.final_message(server_first))
    assert server.state is ScramServerState.FAILED
    assert server.failure_reason == "bad_proof"
    assert server.principal is None and not server.complete


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_nonce_not_matching_server_first_is_nonce_mismatch(mechanism: ScramMechanism) -> None:
    client, server = user_setup(mechanism)
    server_first = server.evaluate(client.first_message())
    tampered = server_first.replace(b",s=", b"X,s=", 1)
    final = client.final_message(tampered)
    fails_with("nonce_mismatch", server.evaluate, final)
    assert server.failure_reason == "nonce_mismatch"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_unknown_user_fails_only_at_final_like_a_wrong_password(mechanism: ScramMechanism) -> None:
    lookup = Lookup().add_user("alice", "pencil", mechanism)
    unknown = ScramServer(mechanism, lookup, FakeClock(NOW))
    client = ScramClient(mechanism, "mallory", "pencil")
    server_first = ServerFirstMessage.parse(unknown.evaluate(client.first_message()).decode())
    assert len(server_first.salt) == 32 and server_first.iterations == 4096
    unknown_error = fails_with(
        "unknown_user", unknown.evaluate, client.final_message(server_first.to_text().encode())
    )
    assert unknown.failure_reason == "unknown_user"

    wrong_client, wrong = user_setup(mechanism, password="nope")
    wrong_error = fails_with(
        "bad_proof",
        wrong.evaluate,
        wrong_client.final_message(wrong.evaluate(wrong_client.first_message())),
    )
    assert type(unknown_error) is type(wrong_error)
    assert str(unknown_error) == str(wrong_error)
    assert unknown_error.error == wrong_error.error


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_unknown_user_even_with_the_right_proof_shape_never_succeeds(
    mechanism: ScramMechanism,
) -> None:
    server = ScramServer(mechanism, Lookup(), FakeClock(NOW))
    first = "n,,n=ghost,r=abc"
    server_first = server.evaluate(first.encode()).decode()
    fails_with(
        "unknown_user", server.evaluate, hand_made_final(mechanism, first, server_first, "x")
    )


def test_fake_salt_is_stable_per_name_across_connections_and_differs_between_names() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256

    def salt_for(name: str, secret: bytes | None = None) -> bytes:
        server = ScramServer(mechanism, Lookup(), FakeClock(NOW), fake_salt_secret=secret)
        return ServerFirstMessage.parse(
            server.evaluate(f"n,,n={name},r=abc".encode()).decode()
        ).salt

    assert salt_for("ghost") == salt_for("ghost")
    assert salt_for("ghost") != salt_for("phantom")
    assert salt_for("ghost", b"k" * 32) == salt_for("ghost", b"k" * 32) != salt_for("ghost")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_unknown_token_fails_only_at_final(mechanism: ScramMechanism) -> None:
    server = ScramServer(mechanism, Lookup(), FakeClock(NOW))
    client = ScramClient(mechanism, TOKEN_ID, TOKEN_PASSWORD, extensions={"tokenauth": "true"})
    server_first = server.evaluate(client.first_message())
    assert server.state is ScramServerState.RECEIVE_CLIENT_FINAL
    assert server.token_requested
    fails_with("unknown_token", server.evaluate, client.final_message(server_first))
    assert server.failure_reason == "unknown_token"
    assert server.token_id is None and server.principal is None


def test_token_id_is_not_looked_up_as_a_user_and_vice_versa() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user(TOKEN_ID, TOKEN_PASSWORD, mechanism)
    server = ScramServer(mechanism, lookup, FakeClock(NOW))
    client = ScramClient(mechanism, TOKEN_ID, TOKEN_PASSWORD, extensions={"tokenauth": "true"})
    fails_with("unknown_token", exchange, client, server)

    lookup = Lookup().add_token(token_info(), TOKEN_PASSWORD, mechanism)
    server = ScramServer(mechanism, lookup, FakeClock(NOW))
    fails_with("unknown_user", exchange, ScramClient(mechanism, TOKEN_ID, TOKEN_PASSWORD), server)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize(
    ("offset", "ok"), [(-1, True), (0, True), (1, False)], ids=["before", "at", "after"]
)
def test_token_expiry_boundary(mechanism: ScramMechanism, offset: int, ok: bool) -> None:
    expiry = NOW + 60_000
    client, server = token_setup(mechanism, token_info(expiry=expiry), FakeClock(expiry + offset))
    if ok:
        exchange(client, server)
        assert server.token_authenticated
    else:
        server_first = server.evaluate(client.first_message())
        fails_with("expired_token", server.evaluate, client.final_message(server_first))
        assert server.failure_reason == "expired_token" and server.principal is None


@pytest.mark.parametrize(("offset", "ok"), [(0, True), (1, False)], ids=["at", "after"])
def test_token_max_lifetime_boundary(offset: int, ok: bool) -> None:
    info = token_info(expiry=NOW + 60_000, max_timestamp=NOW + 30_000)
    client, server = token_setup(
        ScramMechanism.SCRAM_SHA_512, info, FakeClock(NOW + 30_000 + offset)
    )
    if ok:
        exchange(client, server)
        assert server.complete
    else:
        fails_with("expired_token", exchange, client, server)


def test_token_expiring_between_first_and_final_fails() -> None:
    clock = FakeClock(NOW)
    client, server = token_setup(ScramMechanism.SCRAM_SHA_256, token_info(expiry=NOW), clock)
    server_first = server.evaluate(client.first_message())
    clock.advance(1)
    fails_with("expired_token", server.evaluate, client.final_message(server_first))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_authzid_different_from_user_fails_at_first(mechanism: ScramMechanism) -> None:
    _, server = user_setup(mechanism)
    fails_with("authzid_mismatch", server.evaluate, b"n,a=admin,n=alice,r=abc")
    assert server.state is ScramServerState.FAILED
    assert server.failure_reason == "authzid_mismatch"


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("iterations", [4095, 16385])
def test_stored_iterations_out_of_range_fail(mechanism: ScramMechanism, iterations: int) -> None:
    lookup = Lookup().add_user("alice", "pencil", mechanism, iterations=iterations)
    server = ScramServer(mechanism, lookup, FakeClock(NOW))
    fails_with(
        "iterations", server.evaluate, ScramClient(mechanism, "alice", "pencil").first_message()
    )


def test_min_iterations_setting_is_enforced() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    lookup = Lookup().add_user("alice", "pencil", mechanism, iterations=4096)
    server = ScramServer(mechanism, lookup, FakeClock(NOW), min_iterations=8192)
    fails_with("iterations", server.evaluate, b"n,,n=alice,r=abc")


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"n,,",
        b"n,,n=alice",
        b"n,,r=abc,n=alice",
        b"n,,n=al=ice,r=abc",
        b"n,,n=alice,r=",
        b"n,,n=alice,r=abc,m=x",
        b"\xff\xfe",
        b"n,,n=\xc3(,r=abc",
        b"n,,n=alice,r=abc\x00",
    ],
)
def test_malformed_client_first_fails(mechanism: ScramMechanism, message: bytes) -> None:
    _, server = user_setup(mechanism)
    fails_with("malformed", server.evaluate, message)
    assert server.state is ScramServerState.FAILED


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize(
    "mutate",
    [
        lambda final: b"",
        lambda final: final.split(b",p=")[0],
        lambda final: final.split(b",p=")[0] + b",p=!!notbase64",
        lambda final: final.split(b",p=")[0] + b",p=AAB=",
        lambda final: final.replace(b"c=biws,", b""),
        lambda final: final + b"\xff",
    ],
    ids=["empty", "no-proof", "bad-base64", "non-canonical-base64", "no-channel", "non-utf8"],
)
def test_malformed_client_final_fails(mechanism: ScramMechanism, mutate) -> None:
    client, server = user_setup(mechanism)
    final = client.final_message(server.evaluate(client.first_message()))
    fails_with("malformed", server.evaluate, mutate(final))
    assert server.failure_reason == "malformed"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_short_proof_is_bad_proof(mechanism: ScramMechanism) -> None:
    client, server = user_setup(mechanism)
    final = client.final_message(server.evaluate(client.first_message()))
    fails_with("bad_proof", server.evaluate, final.split(b",p=")[0] + b",p=AAAA")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_oversized_messages_fail_at_either_step(mechanism: ScramMechanism) -> None:
    lookup = Lookup().add_user("alice", "pencil", mechanism)
    server = ScramServer(mechanism, lookup, FakeClock(NOW), max_message_bytes=64)
    fails_with("malformed", server.evaluate, b"n,,n=alice,r=" + b"x" * 60)

    server = ScramServer(mechanism, lookup, FakeClock(NOW), max_message_bytes=200)
    client = ScramClient(mechanism, "alice", "pencil")
    server_first = server.evaluate(client.first_message())
    final = client.final_message(server_first)
    oversized = final.split(b",p=")[0] + b",pad=" + b"x" * 200 + b",p=AAAA"
    fails_with("malformed", server.evaluate, oversized)


def test_message_exactly_at_the_size_limit_is_accepted() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    message = b"n,,n=alice,r=" + b"x" * 51
    server = ScramServer(
        mechanism,
        Lookup().add_user("alice", "pencil", mechanism),
        FakeClock(NOW),
        max_message_bytes=len(message),
    )
    assert server.evaluate(message).startswith(b"r=" + b"x" * 51)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("message", [b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc"])
def test_channel_binding_request_is_refused(mechanism: ScramMechanism, message: bytes) -> None:
    _, server = user_setup(mechanism)
    fails_with("channel_binding", server.evaluate, message)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_client_final_channel_binding_must_repeat_the_gs2_header(mechanism: ScramMechanism) -> None:
    client, server = user_setup(mechanism)
    final = client.final_message(server.evaluate(client.first_message()))
    fails_with("channel_binding", server.evaluate, final.replace(b"c=biws", b"c=eSws", 1))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_evaluate_after_complete_is_bad_state(mechanism: ScramMechanism) -> None:
    client, server = user_setup(mechanism)
    exchange(client, server)
    fails_with("bad_state", server.evaluate, b"n,,n=alice,r=abc")
    assert server.state is ScramServerState.FAILED
    assert not server.complete


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_evaluate_after_failure_is_bad_state_and_keeps_the_first_reason(
    mechanism: ScramMechanism,
) -> None:
    client, server = user_setup(mechanism, password="wrong")
    fails_with("bad_proof", exchange, client, server)
    fails_with("bad_state", server.evaluate, b"c=biws,r=abc,p=AAAA")
    assert server.failure_reason == "bad_proof"


def test_errors_never_carry_secret_material() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    client, server = token_setup(mechanism, token_info(), FakeClock(NOW))
    server_first = server.evaluate(client.first_message())
    final = client.final_message(server_first)
    tampered = final.split(b",p=")[0] + b",p=" + base64.b64encode(b"\x01" * 32)
    error = fails_with("bad_proof", server.evaluate, tampered)
    text = f"{error} {error!r} {error.args}"
    proof = final.split(b",p=")[1].decode()
    for secret in (
        TOKEN_PASSWORD,
        proof,
        base64.b64encode(credential(TOKEN_PASSWORD, mechanism).stored_key).decode(),
    ):
        assert secret not in text
    assert "pencil" not in repr(ScramClient(mechanism, "alice", "pencil"))


# -- client failures -------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_client_refuses_wrong_server_signature(mechanism: ScramMechanism) -> None:
    client, server = user_setup(mechanism)
    server.evaluate(client.final_message(server.evaluate(client.first_message())))
    fails_with(
        "bad_server_signature", client.verify_server_final, b"v=" + base64.b64encode(b"\x00" * 32)
    )
    assert client.state is ScramClientState.FAILED


def test_client_raises_on_server_error_value() -> None:
    client, server = user_setup(ScramMechanism.SCRAM_SHA_256)
    client.final_message(server.evaluate(client.first_message()))
    fails_with("server_error", client.verify_server_final, b"e=invalid-proof")


def test_client_refuses_server_nonce_not_extending_its_own() -> None:
    client = ScramClient(ScramMechanism.SCRAM_SHA_256, "alice", "pencil", nonce="abc")
    client.first_message()
    fails_with("nonce_mismatch", client.final_message, b"r=xyzabc,s=c2FsdA==,i=4096")
    client = ScramClient(ScramMechanism.SCRAM_SHA_256, "alice", "pencil", nonce="abc")
    client.first_message()
    fails_with("nonce_mismatch", client.final_message, b"r=abc,s=c2FsdA==,i=4096")


def test_client_refuses_weak_iteration_count() -> None:
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, "alice", "pencil", nonce="abc")
    client.first_message()
    fails_with("iterations", client.final_message, b"r=abcdef,s=c2FsdA==,i=4095")


@pytest.mark.parametrize("message", [b"", b"\xff", b"r=abcdef,s=c2FsdA==", b"r=abcdef,s=!,i=4096"])
def test_client_refuses_malformed_server_first(message: bytes) -> None:
    client = ScramClient(ScramMechanism.SCRAM_SHA_256, "alice", "pencil", nonce="abc")
    client.first_message()
    fails_with("malformed", client.final_message, message)
    assert client.state is ScramClientState.FAILED


def test_client_calls_out_of_order_are_bad_state() -> None:
    client = ScramClient(ScramMechanism.SCRAM_SHA_256, "alice", "pencil", nonce="abc")
    fails_with("bad_state", client.final_message, b"r=abcdef,s=c2FsdA==,i=4096")
    client = ScramClient(ScramMechanism.SCRAM_SHA_256, "alice", "pencil", nonce="abc")
    client.first_message()
    fails_with("bad_state", client.first_message)
    assert client.state is ScramClientState.FAILED


@pytest.mark.parametrize(
    "kwargs",
    [
        {"username": ""},
        {"nonce": "a,b"},
        {"nonce": ""},
        {"extensions": {"m": "x"}},
        {"extensions": {"token-auth": "true"}},
        {"extensions": {"tokenauth": "a,b"}},
    ],
)
def test_client_refuses_invalid_construction(kwargs: dict) -> None:
    args = {"username": "alice", **kwargs}
    with pytest.raises(ValueError):
        ScramClient(ScramMechanism.SCRAM_SHA_256, args.pop("username"), "pencil", **args)


# -- fuzz ------------------------------------------------------------------------------

_FUZZ_LOOKUP = Lookup().add_user("alice", "pencil", ScramMechanism.SCRAM_SHA_256)
_FUZZ_LOOKUP.add_token(token_info(), TOKEN_PASSWORD, ScramMechanism.SCRAM_SHA_256)
_scram_ish = st.one_of(
    st.binary(max_size=300),
    st.text(alphabet="nrcpmasiev=,y!AZ09+/\x00é", max_size=120).map(str.encode),
    st.sampled_from(
        [b"n,,n=alice,r=", b"c=biws,r=", b"n,,n=" + TOKEN_ID.encode() + b",r=x,tokenauth=true"]
    ).flatmap(lambda prefix: st.binary(max_size=80).map(lambda tail: prefix + tail)),
)


@settings(max_examples=200, deadline=None)
@given(first=_scram_ish, final=_scram_ish, start_valid=st.booleans())
def test_only_authentication_errors_escape_the_server(
    first: bytes, final: bytes, start_valid: bool
) -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    server = ScramServer(mechanism, _FUZZ_LOOKUP, FakeClock(NOW), max_message_bytes=256)
    if start_valid:
        first = b"n,,n=alice,r=fuzz"
    try:
        server.evaluate(first)
        server.evaluate(final)
    except ScramAuthenticationError as exc:
        assert server.state is ScramServerState.FAILED
        assert server.failure_reason is not None
        assert exc.reason
    assert not server.complete
