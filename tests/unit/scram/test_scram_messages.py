"""SCRAM message grammar: parse and format, escapes, extensions, strictness."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokensvc.core.errors import Errors, KafkaError
from tokensvc.scram.messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ScramAuthenticationError,
    ServerFinalMessage,
    ServerFirstMessage,
    escape_saslname,
    unescape_saslname,
    validate_extensions,
)


def reason_of(excinfo: pytest.ExceptionInfo[ScramAuthenticationError]) -> str:
    return excinfo.value.reason


def test_saslname_escapes_comma_and_equals() -> None:
    assert escape_saslname("a,b=c") == "a=2Cb=3Dc"
    assert unescape_saslname("a=2Cb=3Dc") == "a,b=c"


def test_saslname_escape_of_escape_text_round_trips() -> None:
    assert unescape_saslname(escape_saslname("=2C")) == "=2C"


@pytest.mark.parametrize("text", ["", "a=", "a=2", "a=2c", "a=3d", "a=41", "=", "x=2Cy=ZZ"])
def test_bad_saslname_escapes_are_malformed(text: str) -> None:
    with pytest.raises(ScramAuthenticationError) as excinfo:
        unescape_saslname(text)
    assert reason_of(excinfo) == "malformed"


def test_client_first_with_token_extension_parses_and_keeps_bare_text() -> None:
    text = "n,,n=Ab3dEf-hIjKlMnOpQrStUv,r=rOprNGfwEbeRWgbNEkqO,tokenauth=true"
    message = ClientFirstMessage.parse(text)
    assert message.username == "Ab3dEf-hIjKlMnOpQrStUv"
    assert message.nonce == "rOprNGfwEbeRWgbNEkqO"
    assert message.authzid is None
    assert message.extensions == {"tokenauth": "true"}
    assert message.token_authentication
    assert message.gs2_header == "n,,"
    assert message.bare == text[3:]
    assert message.to_text() == text


@pytest.mark.parametrize("value", ["true", "TRUE", "True"])
def test_tokenauth_is_case_insensitive(value: str) -> None:
    message = ClientFirstMessage.parse(f"n,,n=t,r=abc,tokenauth={value}")
    assert message.token_authentication
    assert message.bare.endswith(f"tokenauth={value}")


@pytest.mark.parametrize("value", ["false", "yes", "1"])
def test_tokenauth_other_values_mean_user_login(value: str) -> None:
    assert not ClientFirstMessage.parse(f"n,,n=t,r=abc,tokenauth={value}").token_authentication


def test_client_first_with_authzid_and_escaped_username() -> None:
    message = ClientFirstMessage.parse("n,a=a=2Cb,n=a=2Cb,r=xyz")
    assert message.authzid == "a,b"
    assert message.username == "a,b"
    assert message.gs2_header == "n,a=a=2Cb,"


def test_client_first_extensions_keep_their_order() -> None:
    text = "n,,n=u,r=abc,zeta=1,alpha=2,tokenauth=true"
    message = ClientFirstMessage.parse(text)
    assert list(message.extensions) == ["zeta", "alpha", "tokenauth"]
    assert message.to_text() == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "n,,",
        "n,,n=user",
        "n,,r=abc,n=user",
        "x,,n=user,r=abc",
        "n,b=x,n=user,r=abc",
        "n,a=,n=user,r=abc",
        "n,,n=us=er,r=abc",
        "n,,n=,r=abc",
        "n,,n=user,r=",
        "n,,n=user,r=ab c",
        "n,,n=user,r=abc,novalue",
        "n,,n=user,r=abc,=x",
        "n,,n=user,r=abc,k=",
        "n,,n=user,r=abc,k1=v",
        "n,,n=user,r=abc,a=1,a=2",
        "n,,n=user,r=abc,m=mandatory",
        "n,,m=mandatory,n=user,r=abc",
        "n,,n=user\x00,r=abc",
        "n,,n=user,r=abc,",
    ],
)
def test_malformed_client_first_is_refused(text: str) -> None:
    with pytest.raises(ScramAuthenticationError) as excinfo:
        ClientFirstMessage.parse(text)
    assert reason_of(excinfo) == "malformed"


@pytest.mark.parametrize("text", ["y,,n=user,r=abc", "p=tls-unique,,n=user,r=abc"])
def test_client_first_asking_for_channel_binding_is_refused(text: str) -> None:
    with pytest.raises(ScramAuthenticationError) as excinfo:
        ClientFirstMessage.parse(text)
    assert reason_of(excinfo) == "channel_binding"


def test_server_first_round_trip() -> None:
    text = "r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    message = ServerFirstMessage.parse(text)
    assert (message.nonce, message.iterations) == ("abcdef", 4096)
    assert message.salt == base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    assert message.to_text() == text


@pytest.mark.parametrize(
    "text",
    [
        "r=abc,s=c2FsdA==",
        "r=abc,s=c2FsdA==,i=",
        "r=abc,s=c2FsdA==,i=-1",
        "r=abc,s=c2FsdA==,i=04096",
        "r=abc,s=c2FsdA==,i=1e4",
        "r=abc,s=c2FsdA,i=4096",
        "r=abc,s=,i=4096",
        "m=x,r=abc,s=c2FsdA==,i=4096",
        "s=c2FsdA==,r=abc,i=4096",
    ],
)
def test_malformed_server_first_is_refused(text: str) -> None:
    with pytest.raises(ScramAuthenticationError) as excinfo:
        ServerFirstMessage.parse(text)
    assert reason_of(excinfo) == "malformed"


def test_client_final_without_proof_is_the_auth_message_part() -> None:
    text = "c=biws,r=abcdef,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    message = ClientFinalMessage.parse(text)
    assert message.channel_binding == b"n,,"
    assert message.without_proof == "c=biws,r=abcdef"
    assert len(message.proof) == 32
    assert message.to_text() == text


def test_client_final_extensions_sit_before_the_proof() -> None:
    text = "c=biws,r=abc,ext=1,p=AAAA"
    message = ClientFinalMessage.parse(text)
    assert message.extensions == {"ext": "1"}
    assert message.without_proof == "c=biws,r=abc,ext=1"
    assert message.to_text() == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "c=biws,r=abc",
        "r=abc,c=biws,p=AAAA",
        "c=biws,r=abc,p=",
        "c=biws,r=abc,p=!!!!",
        "c=biws,r=abc,p=AAA",
        "c=biws,r=abc,p=AAB=",
        "c=bi ws,r=abc,p=AAAA",
        "c=biws,r=abc,p=AAAA,x=1",
    ],
)
def test_malformed_client_final_is_refused(text: str) -> None:
    with pytest.raises(ScramAuthenticationError) as excinfo:
        ClientFinalMessage.parse(text)
    assert reason_of(excinfo) == "malformed"


def test_server_final_verifier_and_error_forms() -> None:
    verifier = ServerFinalMessage.parse("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert verifier.error is None and verifier.verifier is not None and len(verifier.verifier) == 32
    error = ServerFinalMessage.parse("e=invalid-proof")
    assert error.error == "invalid-proof" and error.verifier is None
    assert error.to_text() == "e=invalid-proof"


@pytest.mark.parametrize("text", ["", "v=", "e=", "x=abc", "v=abc"])
def test_malformed_server_final_is_refused(text: str) -> None:
    with pytest.raises(ScramAuthenticationError) as excinfo:
        ServerFinalMessage.parse(text)
    assert reason_of(excinfo) == "malformed"


@pytest.mark.parametrize(
    "extensions", [{"m": "x"}, {"": "x"}, {"k1": "x"}, {"k": ""}, {"k": "a,b"}, {"k": "a\x00"}]
)
def test_invalid_extensions_are_refused_when_building(extensions: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        validate_extensions(extensions)


def test_authentication_error_maps_to_sasl_failed_and_hides_reason() -> None:
    unknown, bad = ScramAuthenticationError("unknown_user"), ScramAuthenticationError("bad_proof")
    assert isinstance(unknown, KafkaError)
    assert unknown.error is Errors.SASL_AUTHENTICATION_FAILED
    assert str(unknown) == str(bad)
    assert "unknown" not in str(unknown)
    assert unknown.reason == "unknown_user"


_names = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), min_size=1, max_size=20)
_nonces = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1).filter(
    lambda s: "," not in s
)
_extensions = st.dictionaries(
    st.from_regex(r"[A-Za-z]{1,10}", fullmatch=True).filter(lambda k: k != "m"),
    st.text(st.characters(blacklist_characters="\x00,", codec="utf-8"), min_size=1, max_size=10),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(username=_names, nonce=_nonces, extensions=_extensions, with_authzid=st.booleans())
def test_client_first_format_then_parse_is_identity(
    username: str, nonce: str, extensions: dict[str, str], with_authzid: bool
) -> None:
    message = ClientFirstMessage(username, nonce, username if with_authzid else None, extensions)
    assert ClientFirstMessage.parse(message.to_text()) == message
