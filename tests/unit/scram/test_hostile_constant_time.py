"""Secrets a client can probe are compared in constant time.

A client controls the SCRAM proof (checked against the stored key), the nonce it echoes
and, on the client side, the server signature it verifies; a logged-in user also sends
token HMACs (renew, expire). These tests check the code paths:

* a real exchange (our ScramClient against our ScramServer, for a user and for a token)
  goes through ``hmac.compare_digest`` for the proof, the nonce and the server
  signature, with the full-length values;
* no ``==``/``!=`` in the SCRAM modules compares a proof, key, signature, verifier,
  nonce or salted password (comparing lengths is fine: they are public);
* ``TokenCache.by_hmac`` finds a token with a dictionary lookup and compares no HMAC
  bytes itself. Why a dictionary lookup leaks no HMAC bits through timing is argued in
  ``docs/security.md`` ("Threat model", timing).
"""

from __future__ import annotations

import ast
import hmac
import inspect
import textwrap
from pathlib import Path

import pytest

from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import FakeClock
from tokensvc.core.keys import MasterKeys
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram import client as scram_client
from tokensvc.scram import formatter as scram_formatter
from tokensvc.scram import server as scram_server
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism, derive_credential
from tokensvc.scram.server import ScramServer

NOW = 1_700_000_000_000
SENSITIVE = ("proof", "stored_key", "server_key", "signature", "verifier", "client_key",
             "salted", "nonce", "hmac")


class _Lookup:
    def __init__(self, cache: TokenCache, users: dict) -> None:
        self._cache = cache
        self._users = users

    def user_credential(self, username, mechanism):
        return self._users.get((username, mechanism))

    def token_salt(self, token_id, mechanism):
        return self._cache.scram_salt(token_id, mechanism)

    def token_credential(self, token_id, mechanism):
        return self._cache.scram_credential(token_id, mechanism)

    def derived_count(self) -> int:
        return self._cache.derived_count()


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes]]:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def recording(a, b):
        calls.append((bytes(a), bytes(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recording)
    return calls


def _exchange(mechanism: ScramMechanism, lookup: _Lookup, username: str, password: str,
              token: bool) -> ScramServer:
    server = ScramServer(mechanism, lookup, FakeClock(NOW))
    client = ScramClient(mechanism, username, password,
                         extensions={"tokenauth": "true"} if token else {})
    first = server.evaluate(client.first_message())
    final = server.evaluate(client.final_message(first))
    client.verify_server_final(final)
    assert server.complete
    return server


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize("token", [False, True])
def test_exchange_compares_proof_nonce_and_signature_with_compare_digest(
    recorded: list[tuple[bytes, bytes]], mechanism: ScramMechanism, token: bool
) -> None:
    keys = MasterKeys("constant-time-master-key")
    cache = TokenCache(keys)
    owner = KafkaPrincipal.user("alice")
    info = TokenInformation("tokenid0123456789abcde", owner, owner, (), NOW, NOW + 60_000,
                            NOW + 120_000, keys.current_id)
    delegation = cache.upsert(info)
    users = {("alice", mechanism): derive_credential("alice-secret", mechanism, 4096)}
    if token:
        server = _exchange(mechanism, _Lookup(cache, users), info.token_id,
                           delegation.hmac_b64, True)
        stored_key = cache.scram_credential(info.token_id, mechanism)[0].stored_key
    else:
        server = _exchange(mechanism, _Lookup(cache, users), "alice", "alice-secret", False)
        stored_key = users[("alice", mechanism)].stored_key
    assert server.principal == KafkaPrincipal("User", "alice", token)

    digest_size = len(mechanism.hash(b""))
    # The proof check: H(ClientKey) recovered from the proof against the stored key.
    assert any(b == stored_key and len(a) == digest_size for a, b in recorded)
    # The nonce echoed in client-final against the one the server sent.
    assert any(len(a) == len(b) > 32 and a == b and a.isascii() for a, b in recorded
               if b != stored_key)
    # The client's check of the server signature.
    assert sum(len(a) == len(b) == digest_size for a, b in recorded) >= 2


def _compares_of_secrets(module) -> list[str]:
    """Source of every ``==``/``!=`` in ``module`` with a secret-looking operand other than
    a ``len(...)``."""
    source = Path(inspect.getsourcefile(module)).read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            continue
        operands = [node.left, *node.comparators]
        texts = [ast.get_source_segment(source, o) or "" for o in operands
                 if not (isinstance(o, ast.Call) and getattr(o.func, "id", "") == "len")]
        if any(word in text.lower() for text in texts for word in SENSITIVE):
            found.append(ast.get_source_segment(source, node))
    return found


@pytest.mark.parametrize("module", [scram_server, scram_formatter, scram_client],
                         ids=lambda m: m.__name__)
def test_scram_modules_never_compare_secrets_with_equality(module) -> None:
    assert _compares_of_secrets(module) == []


def test_the_proof_check_itself_uses_compare_digest() -> None:
    tree = ast.parse(textwrap.dedent(inspect.getsource(scram_formatter.verify_client_proof)))
    calls = [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert "hmac.compare_digest" in calls


def test_token_lookup_by_hmac_is_a_dictionary_lookup_without_byte_comparison() -> None:
    tree = ast.parse(textwrap.dedent(inspect.getsource(TokenCache.by_hmac)))
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)
                and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in n.ops)]
    assert compares == []
    assert any(isinstance(n, ast.Call) and ast.unparse(n.func) == "self._by_hmac.get"
               for n in ast.walk(tree))
