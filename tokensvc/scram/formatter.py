"""SCRAM mechanisms and credentials: the crypto of RFC 5802, nothing else.

Owns ``ScramMechanism`` (SHA-256, SHA-512), ``ScramCredential`` (salt, stored
key, server key, iterations) and its Kafka text form
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``, plus the
RFC 5802 key schedule (client proof, server signature, proof check) used by the
server and client state machines. Passwords are UTF-8 encoded as they are, with
no SASLprep, exactly as Kafka's ScramFormatter does, so credentials agree with
Java clients for any password. No state machines here (see server/client).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tokensvc.core.token import TokenInformation

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DERIVED_SALT_BYTES = 32


class ScramMechanism(Enum):
    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, mechanism_name: str, hash_name: str, wire_type: int) -> None:
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        # Kafka's ScramMechanism type byte (DescribeUserScramCredentials).
        self.wire_type = wire_type

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism:
        mech = _BY_NAME.get(name)
        if mech is None:
            raise ValueError(f"unknown SCRAM mechanism {name!r}")
        return mech

    @classmethod
    def from_wire_type(cls, wire_type: int) -> ScramMechanism:
        for mech in cls:
            if mech.wire_type == wire_type:
                return mech
        raise ValueError(f"unknown SCRAM mechanism type {wire_type}")

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


# Every handshake names its mechanism: a dict, not a walk over the enum.
_BY_NAME: dict[str, ScramMechanism] = {m.mechanism_name: m for m in ScramMechanism}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka_string(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        try:
            fields = dict(part.split("=", 1) for part in text.split(","))
            return cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError("malformed SCRAM credential") from exc


class TokenSalt(NamedTuple):
    """What a server-first message needs of a token, had without running PBKDF2."""

    salt: bytes
    iterations: int
    info: TokenInformation
    # True when the credential is derived already (no PBKDF2 at client-final).
    derived: bool = False


def derive_credential(
    password: str,
    mechanism: ScramMechanism,
    iterations: int = MIN_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """Salt (32 random bytes unless given), PBKDF2 and the stored/server keys."""
    salt = salt if salt is not None else os.urandom(32)
    salted = mechanism.salted_password(password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


def derived_salt(secret: bytes, mechanism: ScramMechanism, name: str) -> bytes:
    """The salt of a SCRAM name whose credential the broker derives itself.

    A keyed hash of the mechanism and the name: the same on every broker that
    holds ``secret`` and across restarts, unpredictable without it. Token
    credentials and the fake credentials of unknown names both use it, so a
    server-first message cannot tell a live token id from an unknown name.
    """
    data = f"salt\x00{mechanism.mechanism_name}\x00{name}".encode()
    return mechanism.hmac(secret, data)[:DERIVED_SALT_BYTES]


def credential_from_salted_password(
    mechanism: ScramMechanism, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """StoredKey = H(HMAC(salted, "Client Key")), ServerKey = HMAC(salted, "Server Key")."""
    client_key = mechanism.hmac(salted_password, b"Client Key")
    server_key = mechanism.hmac(salted_password, b"Server Key")
    return ScramCredential(salt, mechanism.hash(client_key), server_key, iterations)


def client_proof(mechanism: ScramMechanism, salted_password: bytes, auth_message: bytes) -> bytes:
    """ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)."""
    client_key = mechanism.hmac(salted_password, b"Client Key")
    signature = mechanism.hmac(mechanism.hash(client_key), auth_message)
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


def server_signature(mechanism: ScramMechanism, server_key: bytes, auth_message: bytes) -> bytes:
    """ServerSignature = HMAC(ServerKey, AuthMessage)."""
    return mechanism.hmac(server_key, auth_message)


def verify_client_proof(
    mechanism: ScramMechanism, stored_key: bytes, auth_message: bytes, proof: bytes
) -> bool:
    """Recover ClientKey from the proof and compare H(ClientKey) with StoredKey in constant time."""
    signature = mechanism.hmac(stored_key, auth_message)
    if len(proof) != len(signature):
        return False
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    return hmac.compare_digest(mechanism.hash(client_key), stored_key)
