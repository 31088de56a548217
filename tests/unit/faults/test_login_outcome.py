"""How the fault tools read a failed token login (faults.cluster.refusal_outcome): a
refusal of the credential, a retriable refusal (the broker could not decide then), or
no answer at all."""

from __future__ import annotations

import pytest

from faults.cluster import refusal_outcome


@pytest.mark.parametrize(("message", "outcome"), [
    ("login refused: SASL_AUTHENTICATION_FAILED", "refused"),
    ("login refused: REQUEST_TIMED_OUT", "refused: REQUEST_TIMED_OUT"),
    ("handshake refused: UNSUPPORTED_SASL_MECHANISM", "connection"),
    ("connect: connection refused", "connection"),
    ("request: connection closed", "connection"),
])
def test_a_failed_login_is_read_as_its_kind(message: str, outcome: str) -> None:
    assert refusal_outcome(message) == outcome
