"""The agent's state file: which tokens the job holds, so a restarted agent resumes.

One JSON object, written atomically (mode 0600: it holds HMACs) after every change that
matters, in an order that covers a kill -9 at any point:

1. ``create_started_ms`` is written *before* a create is sent. If the agent dies before it
   learns the new token, the restarted agent looks for tokens it requested in that window
   (describe: requester = the agent, owner = the job's owner) and expires them;
2. the created token is written as ``unpublished`` as soon as the create returns; a
   restarted agent finishes publishing it (every broker serves it, the sinks), or drops it
   if the cluster no longer has it;
3. once published it becomes ``current``; the token it replaced joins ``retiring`` with
   its retirement time, and is expired after the overlap, by this agent or the next.

Fields: ``version`` (1), ``owner``, ``period_ms`` (the cluster's renewal period as the
first token showed it), ``current``, ``unpublished`` (a token or null), ``retiring``
(tokens), ``create_started_ms``, ``clock_offset_ms`` and ``clock_uncertainty_ms`` (the
cluster's time minus this host's clock as last measured, so a restarted agent schedules by
the cluster's time before its next create; absent or null: not measured), ``labels`` (an
object: the labels of the last token created, which its successor carries; absent in files
written before labels existed). A token: ``token_id``, ``hmac`` (base64), ``issue_ms``,
``expiry_ms``, ``max_ms``, ``renew_at_ms``, ``retire_at_ms``.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tokensvc.agent.files import write_atomic
from tokensvc.agent.schedule import Held

VERSION = 1


class StateError(ValueError):
    """A state file that cannot be read back (never names a secret)."""


@dataclass(frozen=True)
class HeldToken:
    """A held token with its secret (the schedule sees only :attr:`held`)."""

    held: Held
    hmac: bytes = field(repr=False)

    @property
    def token_id(self) -> str:
        return self.held.token_id

    def to_json(self) -> dict:
        return {**asdict(self.held), "hmac": base64.b64encode(self.hmac).decode("ascii")}

    @classmethod
    def from_json(cls, raw: dict) -> HeldToken:
        try:
            hmac = base64.b64decode(raw["hmac"], validate=True)
            held = Held(
                token_id=str(raw["token_id"]), issue_ms=int(raw["issue_ms"]),
                expiry_ms=int(raw["expiry_ms"]), max_ms=int(raw["max_ms"]),
                renew_at_ms=None if raw.get("renew_at_ms") is None else int(raw["renew_at_ms"]),
                retire_at_ms=None if raw.get("retire_at_ms") is None else int(raw["retire_at_ms"]),
            )
        except (KeyError, TypeError, ValueError, OverflowError):  # Overflow: JSON's Infinity
            raise StateError("a token entry is incomplete") from None
        return cls(held, hmac)


@dataclass
class AgentState:
    owner: str
    period_ms: int | None = None
    current: HeldToken | None = None
    unpublished: HeldToken | None = None
    retiring: list[HeldToken] = field(default_factory=list)
    create_started_ms: int | None = None
    clock_offset_ms: int | None = None
    clock_uncertainty_ms: int | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def tokens(self) -> list[HeldToken]:
        """Every token the job holds (current, unpublished, retiring)."""
        held = [t for t in (self.current, self.unpublished) if t is not None]
        return held + list(self.retiring)

    def to_json(self) -> dict:
        return {
            "version": VERSION,
            "owner": self.owner,
            "period_ms": self.period_ms,
            "current": None if self.current is None else self.current.to_json(),
            "unpublished": None if self.unpublished is None else self.unpublished.to_json(),
            "retiring": [t.to_json() for t in self.retiring],
            "create_started_ms": self.create_started_ms,
            "clock_offset_ms": self.clock_offset_ms,
            "clock_uncertainty_ms": self.clock_uncertainty_ms,
            "labels": dict(self.labels),
        }

    @classmethod
    def from_json(cls, raw: object) -> AgentState:
        if not isinstance(raw, dict) or raw.get("version") != VERSION:
            raise StateError(f"not a version-{VERSION} agent state")

        def token(value: object) -> HeldToken | None:
            return None if value is None else HeldToken.from_json(value)  # type: ignore[arg-type]

        try:
            return cls(
                owner=str(raw["owner"]),
                period_ms=None if raw.get("period_ms") is None else int(raw["period_ms"]),
                current=token(raw.get("current")),
                unpublished=token(raw.get("unpublished")),
                retiring=[HeldToken.from_json(t) for t in raw.get("retiring") or []],
                create_started_ms=(None if raw.get("create_started_ms") is None
                                   else int(raw["create_started_ms"])),
                clock_offset_ms=(None if raw.get("clock_offset_ms") is None
                                 else int(raw["clock_offset_ms"])),
                clock_uncertainty_ms=(None if raw.get("clock_uncertainty_ms") is None
                                      else int(raw["clock_uncertainty_ms"])),
                labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            if isinstance(exc, StateError):
                raise
            raise StateError("the state file is incomplete") from None


class StateFile:
    """Where the state lives; without a path it lives only in memory (``--once`` without
    ``--state-file`` is refused by the CLI: it would leak a token per run)."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None

    def load(self, owner: str) -> AgentState:
        if self.path is None or not self.path.exists():
            return AgentState(owner=owner)
        try:
            state = AgentState.from_json(json.loads(self.path.read_bytes()))
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, not UTF-8
            raise StateError(f"cannot read the state file {self.path}: {exc}") from None
        if state.owner != owner:
            raise StateError(
                f"the state file {self.path} belongs to a job of {state.owner}, not {owner}")
        return state

    def save(self, state: AgentState) -> None:
        if self.path is not None:
            write_atomic(self.path, (json.dumps(state.to_json(), indent=2) + "\n").encode())

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
