"""The agent's schedule: what to do next with the job's tokens, and when.

Pure: no I/O and no clock of its own -- the caller passes ``now_ms`` and a random source
(for jitter). The shell (:mod:`tokensvc.agent.runner`) asks :func:`next_action`, waits
until the action's time, does it, records the result and asks again.

The rules, for one job:

* The job holds one **current** token (the one the sinks hold) and, during an overlap,
  **retiring** tokens (replaced, still valid so that clients can move over).
* **Renew** a token once ``renew_fraction`` of its renewal period has passed since it was
  issued or last renewed, give or take ``jitter_fraction`` of the period (drawn once per
  renewal, so a thousand agents started together spread out). A token whose expiry has
  reached its max lifetime is not renewed: a renewal could not extend it.
* Create the **successor** once the current token's max lifetime leaves less than its
  *lead*: one renewal period (or the overlap, if longer) plus a margin. The successor is
  published, the old token retires, and it is **expired** ``overlap_ms`` later.
* A retiring token is still renewed if its expiry would come before its retirement.
* With no current token (first start, or the current one vanished): **create** at once.

Every action has a *deadline*: the time after which failing at it means the job has no
valid token (the current token's expiry). The shell retries within it and gives up
loudly past it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

DEFAULT_RENEW_FRACTION = 0.75
DEFAULT_JITTER_FRACTION = 0.05
# Defaults that follow the cluster's renewal period (1 day in Kafka's defaults): an overlap
# of a quarter of it, at most 10 minutes; a margin of a tenth, at most 5 minutes.
_OVERLAP_SHARE, _OVERLAP_CAP_MS = 0.25, 600_000
_MARGIN_SHARE, _MARGIN_CAP_MS = 0.10, 300_000


class Kind(enum.Enum):
    CREATE = "create"  # no current token: create one
    REPLACE = "replace"  # create the successor of the current token
    RENEW = "renew"
    EXPIRE = "expire"  # a retiring token's overlap is over
    WAIT = "wait"  # nothing due before ``at_ms``


@dataclass(frozen=True)
class Policy:
    """How the agent keeps its token; ``None`` for overlap/margin follows the period."""

    renew_fraction: float = DEFAULT_RENEW_FRACTION
    jitter_fraction: float = DEFAULT_JITTER_FRACTION
    overlap_ms: int | None = None
    margin_ms: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.renew_fraction < 1:
            raise ValueError("the renew fraction must be between 0 and 1 (exclusive)")
        if not 0 <= self.jitter_fraction < min(self.renew_fraction, 1 - self.renew_fraction):
            raise ValueError("the jitter must be smaller than the renew fraction's distance "
                             "from 0 and 1")
        for name in ("overlap_ms", "margin_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative")

    def overlap(self, period_ms: int) -> int:
        if self.overlap_ms is not None:
            return self.overlap_ms
        return min(int(period_ms * _OVERLAP_SHARE), _OVERLAP_CAP_MS)

    def margin(self, period_ms: int) -> int:
        if self.margin_ms is not None:
            return self.margin_ms
        return min(int(period_ms * _MARGIN_SHARE), _MARGIN_CAP_MS)


@dataclass(frozen=True)
class Held:
    """A token the agent holds (times in epoch ms). ``renew_at_ms`` is None when the
    token cannot be renewed further; ``retire_at_ms`` is set once it was replaced."""

    token_id: str
    issue_ms: int
    expiry_ms: int
    max_ms: int
    renew_at_ms: int | None
    retire_at_ms: int | None = None

    def valid_at(self, now_ms: int) -> bool:
        return now_ms < self.expiry_ms


@dataclass(frozen=True)
class Action:
    kind: Kind
    at_ms: int
    token_id: str | None = None
    deadline_ms: int | None = None  # past it, failing means the job has no valid token


def renewal_period(issue_ms: int, expiry_ms: int) -> int:
    """The cluster's renewal period as a fresh token shows it (expiry - issue)."""
    return max(expiry_ms - issue_ms, 1)


def lead_ms(lifetime_ms: int, period_ms: int, policy: Policy) -> int:
    """How long before the max lifetime the successor is created."""
    overlap, margin = policy.overlap(period_ms), policy.margin(period_ms)
    lead = max(period_ms, overlap) + margin
    if lead >= lifetime_ms:
        # A period as long as the lifetime (max lifetime <= expiry time): renewals cannot
        # extend the token, so only the overlap and the margin matter.
        lead = overlap + margin
    return lead


def check_lifetime(lifetime_ms: int, period_ms: int, policy: Policy) -> str | None:
    """Why tokens of this lifetime cannot be kept with this policy (one line), or None."""
    overlap, margin = policy.overlap(period_ms), policy.margin(period_ms)
    if lifetime_ms <= overlap:
        return (f"the tokens' max lifetime ({lifetime_ms} ms) is not longer than the "
                f"overlap ({overlap} ms): old and new could never both be valid")
    if lead_ms(lifetime_ms, period_ms, policy) >= lifetime_ms:
        return (f"the tokens' max lifetime ({lifetime_ms} ms) leaves no time between the "
                f"overlap ({overlap} ms) and the margin ({margin} ms)")
    return None


def renew_time(
    base_ms: int, expiry_ms: int, max_ms: int, period_ms: int, policy: Policy,
    rng: Callable[[], float],
) -> int | None:
    """When to renew a token issued or last renewed at ``base_ms`` (None: never again)."""
    if expiry_ms >= max_ms:
        return None
    jitter = (rng() * 2 - 1) * policy.jitter_fraction * period_ms
    at = int(base_ms + policy.renew_fraction * period_ms + jitter)
    return min(at, expiry_ms - 1)


def successor_time(current: Held, period_ms: int, policy: Policy) -> int:
    lifetime = current.max_ms - current.issue_ms
    return current.max_ms - lead_ms(lifetime, period_ms, policy)


def after_create(
    token_id: str, issue_ms: int, expiry_ms: int, max_ms: int, period_ms: int, policy: Policy,
    rng: Callable[[], float],
) -> Held:
    """The new token as the agent holds it."""
    return Held(token_id, issue_ms, expiry_ms, max_ms,
                renew_time(issue_ms, expiry_ms, max_ms, period_ms, policy, rng))


def after_renew(
    held: Held, now_ms: int, expiry_ms: int, period_ms: int, policy: Policy,
    rng: Callable[[], float],
) -> Held:
    """``held`` renewed at ``now_ms`` to ``expiry_ms``."""
    return replace(held, expiry_ms=expiry_ms,
                   renew_at_ms=renew_time(now_ms, expiry_ms, held.max_ms, period_ms, policy, rng))


def retire(held: Held, now_ms: int, period_ms: int, policy: Policy) -> Held:
    """``held`` replaced at ``now_ms``: expire it after the overlap."""
    return replace(held, retire_at_ms=now_ms + policy.overlap(period_ms))


def next_action(
    current: Held | None, retiring: Sequence[Held], period_ms: int | None, policy: Policy,
    now_ms: int,
) -> Action:
    """The next thing to do (at ``at_ms``, which may be in the past: do it now)."""
    candidates: list[Action] = []
    for old in retiring:
        retire_at = old.retire_at_ms if old.retire_at_ms is not None else now_ms
        candidates.append(Action(Kind.EXPIRE, retire_at, old.token_id))
        if old.renew_at_ms is not None and old.expiry_ms < retire_at:
            candidates.append(Action(Kind.RENEW, old.renew_at_ms, old.token_id, old.expiry_ms))
    if current is None or period_ms is None or not current.valid_at(now_ms):
        candidates.append(Action(Kind.CREATE, now_ms))
    else:
        successor_at = successor_time(current, period_ms, policy)
        candidates.append(Action(Kind.REPLACE, successor_at, current.token_id, current.expiry_ms))
        if current.renew_at_ms is not None and current.renew_at_ms < successor_at:
            candidates.append(
                Action(Kind.RENEW, current.renew_at_ms, current.token_id, current.expiry_ms))
    # Expiring old tokens first keeps "never two live tokens beyond the overlap"; then the
    # earliest action.
    order = {Kind.EXPIRE: 0, Kind.CREATE: 1, Kind.REPLACE: 2, Kind.RENEW: 3}
    due = [a for a in candidates if a.at_ms <= now_ms]
    if due:
        return min(due, key=lambda a: (order[a.kind], a.at_ms))
    upcoming = min(candidates, key=lambda a: a.at_ms)
    return Action(Kind.WAIT, upcoming.at_ms)
