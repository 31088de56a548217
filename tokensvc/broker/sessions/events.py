"""The audit event of a session that ends or is refused: written in one place.

Owns the ``session`` audit event's fields (``action``, ``principal``, ``token_id``,
``client_host``, ``listener``, ``reason``). Its actions: ``revoked`` (the session
registry closed a connection whose token or user credential went away), ``expired``
(a request after the session's lifetime) and ``refused`` (a request held for a fresh
view that could not be confirmed). Must not decide when a session ends.
"""

from __future__ import annotations

from typing import Any

from tokensvc.broker.sessions.session import Session


def audit_session(audit: Any, action: str, session: Session, reason: str) -> None:
    """Emit ``session`` with ``action`` for ``session`` on ``audit`` (an AuditLog)."""
    audit.emit(
        "session",
        action=action,
        principal=str(session.principal),
        token_id=session.token_id,
        client_host=session.client_host,
        listener=session.listener,
        reason=reason,
    )
