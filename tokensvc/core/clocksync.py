"""Cluster time: where the cluster's clock stands, seen from this host, and how sure we are.

Owns :class:`ClusterTimeEstimator` (samples in, an estimate of the cluster's time out) and
the skew rule :func:`skew_state` (is this host's clock within ``max.clock.skew.ms`` of the
cluster's?). Pure: numbers in, numbers out; the caller reads the clocks and talks to
ZooKeeper (the broker: :mod:`zk.clock` and :mod:`tokensvc.broker.gates.clockskew`; the agent:
:mod:`tokensvc.agent.runner`).

The model:

- **The reference** is a clock every broker shares. For brokers it is ZooKeeper's
  transaction time: the ``mtime`` ZooKeeper stamps on a write (the leader's wall clock
  when it turned the request into a transaction). For the agent it is the issue time a
  CreateDelegationToken answer carries (the controller's corrected clock).
- **A sample** is one reference time bracketed by two readings of a *local timeline*,
  taken before the request was sent and after its answer arrived. The reference time was
  stamped in between, so at the midpoint the cluster's time is ``reference + 0.5`` ms
  (``mtime`` is whole milliseconds) give or take half the round trip plus that half
  millisecond: the sample's uncertainty.
- **The local timeline** is any clock that runs at the true rate. The broker uses
  CLOCK_BOOTTIME, which is never set: a step of the host's wall clock between two samples
  moves the *offset* reported (cluster time minus the wall clock, read at the same
  moment) but not the cluster time estimated. The agent uses its wall clock.
- **Ageing.** A sample's uncertainty grows by ``drift`` (500 ppm: the largest rate
  error NTP corrects by slewing) times the local time since it was taken, so an old
  estimate is trusted less; this is also how the staleness of the estimate shows.
- **The basis** is the sample whose aged uncertainty is smallest. All samples age at the
  same rate, so the best one stays best until a better one arrives: the estimator keeps
  only it. A new sample replaces it when it is at least as certain, or when the two
  disagree by more than both uncertainties together (the reference was stepped, or the
  ZooKeeper leader changed to a server with another clock): then the newer wins and
  ``resets`` counts it.

Thread safety: the basis is one immutable object replaced by a single assignment, so
readers in any thread see either the old or the new basis; ``add`` is meant for one
writer at a time.

Must not: read any clock, sleep, or do I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

# The local timeline may run this much fast or slow (NTP slews a clock by at most 500 ppm).
DRIFT = 500e-6
# ZooKeeper's mtime is whole milliseconds: the reference instant lies in [mtime, mtime + 1).
RESOLUTION_MS = 1.0


@dataclass(frozen=True)
class TimeSample:
    """One reference time (epoch ms) bracketed by the local timeline (ms) before the
    request was sent and after the answer arrived."""

    sent_ms: float
    received_ms: float
    reference_ms: int

    def __post_init__(self) -> None:
        if self.received_ms < self.sent_ms:
            raise ValueError("a sample's answer cannot arrive before its request was sent")

    @property
    def midpoint_ms(self) -> float:
        return (self.sent_ms + self.received_ms) / 2.0

    @property
    def half_round_trip_ms(self) -> float:
        return (self.received_ms - self.sent_ms) / 2.0


class ClusterTime(NamedTuple):
    """The cluster's time at one local instant: ``now_ms`` (epoch ms) ± ``uncertainty_ms``;
    ``age_ms`` is the local time since the sample it rests on."""

    now_ms: float
    uncertainty_ms: float
    age_ms: float


class ClockOffset(NamedTuple):
    """This host's wall clock against the cluster's: ``offset_ms`` is cluster time minus
    the wall clock (positive: the host is behind), ± ``uncertainty_ms``."""

    offset_ms: float
    uncertainty_ms: float
    age_ms: float


class _Basis(NamedTuple):
    """The basis sample, reduced to what an estimate needs (computed once per sample: the
    clocks of every login read it)."""

    sample: TimeSample
    midpoint_ms: float
    delta_ms: float  # cluster time minus local time
    uncertainty_ms: float  # at the midpoint


class ClockState(enum.Enum):
    WITHIN = "within"  # the offset is known to be within the bound (or there is no bound)
    SKEWED = "skewed"  # the offset is known to be beyond the bound
    UNCHECKED = "unchecked"  # never measured, or too uncertain to tell


class ClusterTimeEstimator:
    """See the module docstring."""

    def __init__(self, *, drift: float = DRIFT, resolution_ms: float = RESOLUTION_MS) -> None:
        if drift < 0 or resolution_ms < 0:
            raise ValueError("drift and resolution must not be negative")
        self._drift = drift
        self._half_resolution = resolution_ms / 2.0
        self._basis: _Basis | None = None
        self.samples = 0
        self.resets = 0
        self.last_sample_ms: float | None = None  # local time of the newest sample's answer

    @property
    def basis(self) -> TimeSample | None:
        """The sample the estimate rests on (None before the first)."""
        basis = self._basis
        return None if basis is None else basis.sample

    def _reduce(self, sample: TimeSample) -> _Basis:
        midpoint = sample.midpoint_ms
        return _Basis(sample, midpoint, sample.reference_ms + self._half_resolution - midpoint,
                      sample.half_round_trip_ms + self._half_resolution)

    def _estimate(self, basis: _Basis, local_ms: float) -> ClusterTime:
        age = local_ms - basis.midpoint_ms
        return ClusterTime(local_ms + basis.delta_ms,
                           basis.uncertainty_ms + self._drift * abs(age), age)

    def add(self, sample: TimeSample) -> bool:
        """Take one sample; True when it became the basis."""
        self.samples += 1
        if self.last_sample_ms is None or sample.received_ms > self.last_sample_ms:
            self.last_sample_ms = sample.received_ms
        basis, candidate = self._basis, self._reduce(sample)
        if basis is None:
            self._basis = candidate
            return True
        fresh = self._estimate(candidate, candidate.midpoint_ms)
        held = self._estimate(basis, candidate.midpoint_ms)
        if abs(fresh.now_ms - held.now_ms) > fresh.uncertainty_ms + held.uncertainty_ms:
            self.resets += 1
            self._basis = candidate
            return True
        if fresh.uncertainty_ms <= held.uncertainty_ms:
            self._basis = candidate
            return True
        return False

    def at(self, local_ms: float) -> ClusterTime | None:
        """The cluster's time at ``local_ms`` on the local timeline (None: no sample yet)."""
        basis = self._basis
        return None if basis is None else self._estimate(basis, local_ms)

    def cluster_ms(self, local_ms: float) -> float | None:
        """Just the cluster's time at ``local_ms`` (None: no sample yet): the fast path of
        :class:`~tokensvc.core.clock.CorrectedClock`."""
        basis = self._basis
        return None if basis is None else local_ms + basis.delta_ms

    def offset(self, local_ms: float, wall_ms: float) -> ClockOffset | None:
        """The wall clock's offset, given the local timeline and the wall clock read at
        the same moment (None: no sample yet)."""
        estimate = self.at(local_ms)
        if estimate is None:
            return None
        return ClockOffset(estimate.now_ms - wall_ms, estimate.uncertainty_ms, estimate.age_ms)


def skew_state(offset: ClockOffset | None, bound_ms: int) -> ClockState:
    """Whether a clock with ``offset`` is within ``bound_ms`` of the cluster's.

    ``bound_ms < 0`` means no bound: always WITHIN. Otherwise SKEWED when the offset is
    beyond the bound even at the near end of its uncertainty (``|offset| - uncertainty >
    bound``); UNCHECKED when there is no measurement or its uncertainty alone exceeds the
    bound (it cannot tell); else WITHIN.
    """
    if bound_ms < 0:
        return ClockState.WITHIN
    if offset is None:
        return ClockState.UNCHECKED
    if abs(offset.offset_ms) - offset.uncertainty_ms > bound_ms:
        return ClockState.SKEWED
    if offset.uncertainty_ms > bound_ms:
        return ClockState.UNCHECKED
    return ClockState.WITHIN
