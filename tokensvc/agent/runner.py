"""The agent's shell: does what :mod:`tokensvc.agent.schedule` says, with real I/O.

Owns the loop (ask the schedule, wait, act, record), the admin client, retries, the
sinks and the state file, and how the agent ends. It decides no timing itself.

How each action is carried out (see :mod:`tokensvc.agent.state` for the kill -9 story):

* create / replace -- mark the state, create (the agent's own principal is added as a
  renewer when the token is for another owner, so it may renew and describe it; the token
  gets the agent's labels, over the labels of the token it succeeds, see
  :func:`successor_labels`), record
  the token as unpublished, wait until every live broker of the cluster metadata logs in
  with it, write every sink, then make it current (the old one retires);
* renew -- renew, record the new expiry, rewrite the sinks (their dates change);
* expire -- expire a retiring token now (``ExpireDelegationToken`` with a negative
  period: the brokers close its live sessions).

Retries: a failed attempt (broker unreachable, timed out, NOT_CONTROLLER past the admin
client's own retries) is retried with jittered exponential backoff (0.2 s doubling to 5 s)
through the other bootstrap servers, until the action's deadline -- the current token's
expiry. Refusals that no retry can fix (the agent's password or JWT was refused, its
identity matches no OAUTHBEARER mapping, it may not create tokens for that owner, tokens
are disabled) end the agent at once.

An OAUTHBEARER agent (``--oauthbearer-token-file``) logs in with the JWT the file holds
at each login (the admin client reads it again), and is the principal the brokers'
mapping gives it, which it names as the owner (``--owner-principal``).

Time (issue #36): the agent schedules by the cluster's time, not only its host's clock.
Every CreateDelegationToken answer carries its issue time, stamped by the controller's
clock (itself corrected to ZooKeeper's time) while the request was in flight: the time
before the request and after the answer bracket it, a sample for
:class:`~tokensvc.core.clocksync.ClusterTimeEstimator` (this host's clock as the local
timeline). :meth:`Agent.now_ms` is the host's clock plus the offset so measured, so a host
ten minutes off renews and replaces on time. The offset is kept in the state file for a
restart and logged when it changes by more than ``OFFSET_NOTICE_MS``. Until the first
create (or a saved offset) the host's clock is used as it is.

Exit statuses: 0 (stopped by SIGTERM/SIGINT, tokens expired unless ``keep_on_exit``; or
``--once`` done), 3 (refused: credentials or permissions), 4 (lost: no valid token could be
kept -- the cluster stayed unreachable until the expiry, or no successor before the max
lifetime), 5 (a file could not be written), 6 (the cluster's token lifetimes do not fit the
policy). Each end is one log line naming the cause.
"""

from __future__ import annotations

import base64
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TypeVar

from tokensvc.admin import AdminClient, AdminError, PropagationTimeout, token_logs_in
from tokensvc.admin.results import BrokerUnreachableError, TokenDescription
from tokensvc.agent import schedule
from tokensvc.agent.credentials import Credentials, render
from tokensvc.agent.files import write_atomic
from tokensvc.agent.metrics import AgentMetrics
from tokensvc.agent.schedule import Action, Kind, Policy
from tokensvc.agent.state import AgentState, HeldToken, StateFile
from tokensvc.client_config import ClientConfig
from tokensvc.core.clocksync import ClusterTimeEstimator, TimeSample
from tokensvc.core.errors import Errors
from tokensvc.core.labels import LabelError, Labels, check_value, format_labels, validate
from tokensvc.core.principal import KafkaPrincipal

log = logging.getLogger("tokensvc.agent")

EXIT_OK, EXIT_REFUSED, EXIT_LOST, EXIT_FILE, EXIT_LIFETIME = 0, 3, 4, 5, 6
CLIENT_ID = "tokensvc-agent"
_FATAL = frozenset({
    Errors.SASL_AUTHENTICATION_FAILED, Errors.UNSUPPORTED_SASL_MECHANISM,
    Errors.ILLEGAL_SASL_STATE, Errors.DELEGATION_TOKEN_AUTH_DISABLED,
    Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED, Errors.DELEGATION_TOKEN_OWNER_MISMATCH,
    Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, Errors.CLUSTER_AUTHORIZATION_FAILED,
    Errors.INVALID_PRINCIPAL_TYPE, Errors.SECURITY_DISABLED, Errors.UNSUPPORTED_VERSION,
})
_GONE = frozenset({Errors.DELEGATION_TOKEN_NOT_FOUND, Errors.DELEGATION_TOKEN_EXPIRED})
_BACKOFF_S = (0.2, 5.0)
# A create whose answer was lost may still commit: tokens this agent requested for its
# owner from just before the mark until this long after it count as its own.
_ORPHAN_SLACK_MS = 2_000
# A measured clock offset is logged when it moved by more than this since the last line.
OFFSET_NOTICE_MS = 1_000
# The label the agent adds to every token it creates, naming the host it runs on
# (docs/agent.md: where the job's credentials file and renewing process are).
HOST_LABEL = "agent/host"
T = TypeVar("T")


def host_label(hostname: str) -> tuple[str, str] | None:
    """``(HOST_LABEL, hostname)`` when ``hostname`` is a valid label value (cut to the
    value limit), else None."""
    try:
        return HOST_LABEL, check_value(HOST_LABEL, hostname[:255])
    except LabelError:
        return None


def successor_labels(predecessor: dict[str, str], configured: Labels) -> Labels:
    """The labels of a new token: its predecessor's, with the agent's configured labels
    over them (a label given on the command line wins; one the predecessor had and the
    command line no longer names is kept, so a successor never loses what the job's
    tokens carried). LabelError if the union breaks a rule (e.g. more than 16)."""
    return validate({**predecessor, **dict(configured)})


class AgentExit(Exception):
    """The agent ends: ``code`` is its exit status, the message one line for a person."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Stopped(Exception):
    pass


class _TokenGone(Exception):
    pass


@dataclass(frozen=True)
class AgentOptions:
    bootstrap: str
    config: ClientConfig
    sinks: Sequence[tuple[str, str]]  # (path, format)
    state_path: str | None = None
    owner: KafkaPrincipal | None = None
    renewers: tuple[KafkaPrincipal, ...] = ()
    max_lifetime_ms: int = -1
    policy: Policy = field(default_factory=Policy)
    once: bool = False
    keep_on_exit: bool = False
    timeout_s: float = 30.0
    metrics_port: int | None = None
    client_id: str = CLIENT_ID
    # Labels of every token the agent creates (checked: tokensvc.core.labels.validate).
    labels: Labels = ()


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Agent:
    """One job's agent. :meth:`run` returns the exit status; ``stop`` ends it cleanly."""

    def __init__(
        self, options: AgentOptions, *, clock: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random, stop: threading.Event | None = None,
    ) -> None:
        self.options = options
        self.policy = options.policy
        self._clock = clock
        self._rng = rng
        self.stop = stop or threading.Event()
        username = options.config.username or ""
        # An OAUTHBEARER agent is the principal its mapping gives it: the owner it names.
        self.me = (options.owner if options.config.oauth_token_file is not None
                   and options.owner is not None else KafkaPrincipal.user(username))
        self.owner = options.owner or self.me
        renewers = list(options.renewers)
        if self.owner != self.me and self.me not in renewers:
            renewers.append(self.me)  # so that this agent may renew and describe the token
        self.renewers = tuple(renewers)
        self.state_file = StateFile(options.state_path)
        self.state = AgentState(owner=str(self.owner))
        self.cluster_time = ClusterTimeEstimator()
        self._noticed_offset_ms = 0.0
        self.metrics = AgentMetrics(self._seconds_left, self._offset_seconds)
        self.admin = AdminClient(options.bootstrap, options.config, timeout_s=options.timeout_s,
                                 client_id=options.client_id)

    # -- the loop ----------------------------------------------------------------------

    def now_ms(self) -> int:
        """The cluster's time as this agent knows it (see the module docstring)."""
        host = self._host_ms()
        estimate = self.cluster_time.at(host)
        return int(host if estimate is None else estimate.now_ms)

    def _host_ms(self) -> float:
        return self._clock() * 1000

    def _offset_seconds(self) -> float:
        host = self._host_ms()
        offset = self.cluster_time.offset(host, host)
        return 0.0 if offset is None else offset.offset_ms / 1000

    def _learn_cluster_time(self, sample: TimeSample) -> None:
        """Take a create's bracketed issue time; keep and (on a change) log the offset."""
        self.cluster_time.add(sample)
        host = self._host_ms()
        offset = self.cluster_time.offset(host, host)
        if offset is None:
            return
        self.state.clock_offset_ms = round(offset.offset_ms)
        self.state.clock_uncertainty_ms = max(1, round(offset.uncertainty_ms))
        if abs(offset.offset_ms - self._noticed_offset_ms) > OFFSET_NOTICE_MS:
            self._noticed_offset_ms = offset.offset_ms
            side = "behind" if offset.offset_ms > 0 else "ahead of"
            log.warning("this host's clock is %.1f s %s the cluster's (token issue time); "
                        "scheduling by the cluster's time", abs(offset.offset_ms) / 1000, side)

    def _resume_cluster_time(self) -> None:
        """The offset a previous run measured, as a sample as uncertain as it was."""
        state = self.state
        if state.clock_offset_ms is None:
            return
        host = self._host_ms()
        spread = state.clock_uncertainty_ms or 1
        self.cluster_time.add(TimeSample(host - spread, host + spread,
                                         round(host + state.clock_offset_ms)))
        self._noticed_offset_ms = float(state.clock_offset_ms)

    def run(self) -> int:
        try:
            if self.options.metrics_port is not None:
                self.metrics.serve(self.options.metrics_port)
            self.state = self.state_file.load(str(self.owner))
            self._resume_cluster_time()
            self._recover()
            while not self.stop.is_set():
                action = self._next()
                if action.kind is Kind.WAIT:
                    if self.options.once:
                        return EXIT_OK
                    self.stop.wait(max(action.at_ms - self.now_ms(), 0) / 1000)
                    continue
                self._do(action)
        except _Stopped:
            pass
        except AgentExit as exc:
            self.metrics.up.set(0)
            log.error("agent gives up: %s", exc)
            raise
        finally:
            self.admin.close()
        return self._shutdown()

    def _next(self) -> Action:
        state = self.state
        current = state.current.held if state.current is not None else None
        return schedule.next_action(current, [t.held for t in state.retiring], state.period_ms,
                                    self.policy, self.now_ms())

    def _do(self, action: Action) -> None:
        if action.kind in (Kind.CREATE, Kind.REPLACE):
            if action.kind is Kind.CREATE and self.state.current is not None:
                self.metrics.failures.labels("token_gone").inc()
                log.error("token %s expired at %s before it could be renewed or replaced; "
                          "creating a new one", self.state.current.token_id,
                          _iso(self.state.current.held.expiry_ms))
                self.state.current = None
            self._create(deadline_ms=action.deadline_ms)
        elif action.kind is Kind.RENEW:
            self._renew(action.token_id, action.deadline_ms)
        elif action.kind is Kind.EXPIRE:
            self._expire_retiring(action.token_id)

    def _shutdown(self) -> int:
        if self.options.keep_on_exit:
            log.info("stopping; keeping %d token(s) (--keep-on-exit)", len(self.state.tokens()))
            return EXIT_OK
        self.stop = threading.Event()  # the attempts below must not see the stop
        deadline = self.now_ms() + int(self.options.timeout_s * 1000)
        for token in self.state.tokens():
            try:
                self._attempt(f"expire token {token.token_id}",
                              lambda t=token: self.admin.expire_token(t.hmac, -1), deadline)
            except _TokenGone:
                pass
            except AgentExit as exc:
                log.error("stopping: could not expire token %s: %s (state file kept)",
                          token.token_id, exc)
                raise
            self.metrics.expired.inc()
            log.info("expired token %s", token.token_id)
        self.admin.close()
        self.state_file.remove()
        log.info("stopped; no token left")
        return EXIT_OK

    # -- actions -----------------------------------------------------------------------

    def _create(self, deadline_ms: int | None) -> None:
        started = self.now_ms()
        deadline = deadline_ms or started + int(self.options.timeout_s * 1000)
        self.state.create_started_ms = started
        self._save()
        failed_before = self._failures_seen()
        try:
            labels = successor_labels(self.state.labels, self.options.labels)
        except LabelError as exc:
            raise AgentExit(EXIT_REFUSED, f"the token's labels: {exc.message}") from None

        def create() -> tuple[TokenDescription, float, float]:
            sent = self._host_ms()
            created = self.admin.create_token(renewers=self.renewers, owner=self.owner,
                                              max_lifetime_ms=self.options.max_lifetime_ms,
                                              labels=labels)
            return created, sent, self._host_ms()

        desc, sent, received = self._attempt("create a token", create, deadline)
        if received >= sent:  # else this host's clock was set back meanwhile: no sample
            self._learn_cluster_time(TimeSample(sent, received, desc.issue_ms))
        self.state.labels = dict(desc.labels)
        self.metrics.created.inc()
        log.info("created token %s (owner %s, expires %s, max %s, labels %s)", desc.token_id,
                 desc.owner, _iso(desc.expiry_ms), _iso(desc.max_ms),
                 format_labels(desc.labels) or "none")
        period = self._learn_period(desc)
        held = schedule.after_create(desc.token_id, desc.issue_ms, desc.expiry_ms, desc.max_ms,
                                     period, self.policy, self._rng)
        self.state.unpublished = HeldToken(held, desc.hmac)
        self.state.create_started_ms = None if self._failures_seen() == failed_before else started
        self._save()
        if self.state.create_started_ms is not None:
            # An earlier attempt may have committed although its answer was lost.
            self._expire_orphans(started, keep={desc.token_id})
        problem = schedule.check_lifetime(desc.max_ms - desc.issue_ms, period, self.policy)
        if problem is not None:
            self._expire_now(self.state.unpublished)
            self.state.unpublished = None
            self._save()
            raise AgentExit(EXIT_LIFETIME, problem)
        self._publish(deadline)

    def _learn_period(self, desc: TokenDescription) -> int:
        if desc.expiry_ms < desc.max_ms or self.state.period_ms is None:
            self.state.period_ms = schedule.renewal_period(desc.issue_ms, desc.expiry_ms)
        return self.state.period_ms

    def _publish(self, deadline_ms: int) -> None:
        token = self.state.unpublished
        assert token is not None
        self._wait_all_brokers(token, deadline_ms)
        self._write_sinks(token, deadline_ms)
        now = self.now_ms()
        old = self.state.current
        retired = None
        if old is not None:
            retired = schedule.retire(old.held, now, self.state.period_ms or 0, self.policy)
            self.state.retiring.append(HeldToken(retired, old.hmac))
            self.metrics.replacements.inc()
        self.state.current, self.state.unpublished = token, None
        self._save()
        # Logged once the state file names the token: a reader that sees the line finds it.
        if old is not None and retired is not None:
            log.info("published token %s; token %s retires at %s", token.token_id,
                     old.token_id, _iso(retired.retire_at_ms or now))
        else:
            log.info("published token %s", token.token_id)

    def _wait_all_brokers(self, token: HeldToken, deadline_ms: int) -> None:
        desc = TokenDescription(token.token_id, token.hmac, self.owner, self.me, (),
                                token.held.issue_ms, token.held.expiry_ms, token.held.max_ms)
        while True:
            wait_s = max(min(self.options.timeout_s, (deadline_ms - self.now_ms()) / 1000), 1.0)
            try:
                served = self._attempt(
                    "read the cluster's brokers",
                    lambda s=wait_s: self.admin.wait_all_brokers(token_logs_in(desc), timeout_s=s),
                    deadline_ms)
            except PropagationTimeout as exc:
                self.metrics.failures.labels("lagging_broker").inc()
                if self.now_ms() >= deadline_ms - 1000 or self.state.current is None:
                    log.warning("publishing token %s although %s", token.token_id, exc)
                    return
                log.warning("token %s not yet served everywhere: %s", token.token_id, exc)
                continue
            log.info("token %s served by all %d brokers after %.0f ms", token.token_id,
                     len(served.brokers), served.seconds * 1000)
            return

    def _write_sinks(self, token: HeldToken, deadline_ms: int) -> None:
        config = self.options.config
        mechanism = config.sasl_mechanism.mechanism_name if config.sasl_mechanism else (
            "SCRAM-SHA-512")
        creds = Credentials(
            token_id=token.token_id, hmac_b64=_b64(token.hmac), owner=str(self.owner),
            issue_ms=token.held.issue_ms, expiry_ms=token.held.expiry_ms,
            max_ms=token.held.max_ms, sasl_mechanism=mechanism,
            security_protocol=config.security_protocol.upper(),
            labels=tuple(sorted(self.state.labels.items())),
        )
        for path, fmt in self.options.sinks:
            backoff = _BACKOFF_S[0]
            while True:
                try:
                    write_atomic(path, render(creds, fmt, self.now_ms()))
                    break
                except OSError as exc:
                    self.metrics.failures.labels("file").inc()
                    message = f"cannot write {path}: {exc.strerror or exc}"
                    if self.now_ms() + backoff * 1000 >= deadline_ms or self.stop.is_set():
                        raise AgentExit(EXIT_FILE, message) from None
                    log.warning("%s; retrying", message)
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, _BACKOFF_S[1])

    def _renew(self, token_id: str | None, deadline_ms: int | None) -> None:
        token = self._held(token_id)
        deadline = deadline_ms or token.held.expiry_ms
        try:
            expiry = self._attempt(f"renew token {token.token_id}",
                                   lambda: self.admin.renew_token(token.hmac, -1), deadline)
        except _TokenGone:
            self._forget(token, "it was expired or removed by someone else")
            return
        now = self.now_ms()
        renewed = HeldToken(schedule.after_renew(token.held, now, expiry, self.state.period_ms or 1,
                                                 self.policy, self._rng), token.hmac)
        self._swap(token, renewed)
        self.metrics.renewals.inc()
        log.info("renewed token %s until %s", token.token_id, _iso(expiry))
        if self.state.current is renewed:
            self._write_sinks(renewed, expiry)

    def _expire_retiring(self, token_id: str | None) -> None:
        token = self._held(token_id)
        self._expire_now(token)
        self.state.retiring = [t for t in self.state.retiring if t.token_id != token.token_id]
        self._save()

    def _expire_now(self, token: HeldToken) -> None:
        deadline = self.now_ms() + int(self.options.timeout_s * 1000)
        try:
            self._attempt(f"expire token {token.token_id}",
                          lambda: self.admin.expire_token(token.hmac, -1), deadline)
        except _TokenGone:
            pass
        self.metrics.expired.inc()
        log.info("expired token %s", token.token_id)

    # -- recovery ----------------------------------------------------------------------

    def _recover(self) -> None:
        """Reconcile a state file from an earlier run with what the cluster has."""
        state = self.state
        if not state.tokens() and state.create_started_ms is None:
            return
        deadline = self.now_ms() + int(self.options.timeout_s * 1000)
        described = self._attempt("describe the job's tokens",
                                  lambda: self.admin.describe_tokens(owners=[self.owner]),
                                  deadline)
        live = {t.token_id: t for t in described if t.expiry_ms > self.now_ms()}
        if state.create_started_ms is not None:
            self._expire_orphans(state.create_started_ms, keep={t.token_id for t in
                                                               state.tokens()}, described=described)
            state.create_started_ms = None
        for token in state.tokens():
            seen = live.get(token.token_id)
            if seen is None:
                self._forget(token, "the cluster no longer has it")
            elif seen.expiry_ms != token.held.expiry_ms:
                # Renewed by a run that died before recording it.
                self._swap(token, HeldToken(replace(token.held, expiry_ms=seen.expiry_ms),
                                            token.hmac))
        self._save()
        log.info("resumed: current %s, %d retiring, %s",
                 state.current.token_id if state.current else None, len(state.retiring),
                 "one unpublished" if state.unpublished else "none unpublished")
        if state.unpublished is not None:
            self._publish(state.unpublished.held.expiry_ms)
        elif state.current is not None:
            self._write_sinks(state.current, state.current.held.expiry_ms)

    def _expire_orphans(self, since_ms: int, keep: set[str],
                        described: list[TokenDescription] | None = None) -> None:
        """Expire tokens this agent requested for its owner around ``since_ms`` that it
        does not hold: created by an attempt whose answer was lost."""
        until = since_ms + int(self.options.timeout_s * 1000) + _ORPHAN_SLACK_MS
        if described is None:
            deadline = self.now_ms() + int(self.options.timeout_s * 1000)
            described = self._attempt("describe the job's tokens",
                                      lambda: self.admin.describe_tokens(owners=[self.owner]),
                                      deadline)
        for t in described:
            if (t.token_id not in keep and t.requester == self.me and t.owner == self.owner
                    and since_ms - _ORPHAN_SLACK_MS <= t.issue_ms <= until):
                log.warning("expiring token %s: created by an attempt whose answer was lost",
                            t.token_id)
                held = schedule.Held(t.token_id, t.issue_ms, t.expiry_ms, t.max_ms, None)
                self._expire_now(HeldToken(held, t.hmac))

    # -- helpers -----------------------------------------------------------------------

    def _attempt(self, what: str, call: Callable[[], T], deadline_ms: int) -> T:
        backoff = _BACKOFF_S[0]
        while True:
            if self.stop.is_set():
                raise _Stopped
            left_s = (deadline_ms - self.now_ms()) / 1000
            self.admin.timeout_s = max(min(self.options.timeout_s, left_s), 1.0)
            try:
                return call()
            except PropagationTimeout:
                raise
            except AdminError as exc:
                if exc.error in _FATAL:
                    self.metrics.failures.labels("refused").inc()
                    raise AgentExit(EXIT_REFUSED, f"{what}: {exc}") from None
                if exc.error in _GONE:
                    raise _TokenGone from None
                cause = "unreachable" if isinstance(exc, BrokerUnreachableError) else "timeout"
                self.metrics.failures.labels(cause).inc()
                if self.now_ms() + backoff * 1000 >= deadline_ms:
                    raise AgentExit(
                        EXIT_LOST, f"could not {what} before {_iso(deadline_ms)}: {exc}"
                    ) from None
                log.warning("could not %s (%s); retrying", what, exc)
            self.stop.wait(backoff * (0.5 + self._rng()))
            backoff = min(backoff * 2, _BACKOFF_S[1])

    def _failures_seen(self) -> float:
        return sum(s.value for m in self.metrics.failures.collect() for s in m.samples
                   if s.name.endswith("_total"))

    def _held(self, token_id: str | None) -> HeldToken:
        for token in self.state.tokens():
            if token.token_id == token_id:
                return token
        raise KeyError(token_id)

    def _swap(self, old: HeldToken, new: HeldToken) -> None:
        state = self.state
        if state.current is old:
            state.current = new
        elif state.unpublished is old:
            state.unpublished = new
        else:
            state.retiring = [new if t is old else t for t in state.retiring]
        self._save()

    def _forget(self, token: HeldToken, why: str) -> None:
        log.warning("dropping token %s: %s", token.token_id, why)
        self.metrics.failures.labels("token_gone").inc()
        state = self.state
        if state.current is token:
            state.current = None
        elif state.unpublished is token:
            state.unpublished = None
        else:
            state.retiring = [t for t in state.retiring if t is not token]
        self._save()

    def _save(self) -> None:
        try:
            self.state_file.save(self.state)
        except OSError as exc:
            raise AgentExit(EXIT_FILE, f"cannot write the state file: {exc.strerror or exc}"
                            ) from None

    def _seconds_left(self) -> tuple[float, float]:
        current = self.state.current
        if current is None:
            return math.nan, math.nan
        now = self.now_ms()
        return (current.held.expiry_ms - now) / 1000, (current.held.max_ms - now) / 1000


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
