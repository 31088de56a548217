"""Kafka principals (``Type:name``) and Kafka's Sanitizer encoding.

A principal names who a session acts as. ``token_authenticated`` marks sessions
that logged in with a delegation token: those may not manage tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str
    token_authenticated: bool = False

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @property
    def is_user(self) -> bool:
        return self.principal_type == USER_TYPE

    def without_token_flag(self) -> KafkaPrincipal:
        """This principal as a plain one (itself when it is one already: no new object)."""
        if not self.token_authenticated:
            return self
        return KafkaPrincipal(self.principal_type, self.name)

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """Parse ``Type:name``; raise ValueError naming the problem."""
        if not isinstance(text, str) or ":" not in text:
            raise ValueError(f"principal {text!r} is not of the form Type:name")
        principal_type, name = text.split(":", 1)
        if not principal_type or not name:
            raise ValueError(f"principal {text!r} is not of the form Type:name")
        return cls(principal_type, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encode (UTF-8), space as %20, '*' as %2A."""
    encoded = quote(name, safe="-._~")
    # Java's URLEncoder leaves '*' alone and turns ' ' into '+'; Kafka then
    # rewrites '+' to %20 and '*' to %2A, which is what quote() with this safe
    # set already produces, except '~' which URLEncoder encodes.
    return encoded.replace("~", "%7E")


def desanitize(name: str) -> str:
    return unquote(name)
