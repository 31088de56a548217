"""Broker settings every broker the tests start gets unless the test says otherwise.

The stall meter samples every 50 ms, not 5 (``metrics.stall.sample.interval.ms``): an
idle broker's meter costs 4.3% of a core at 5 ms and 0.5% at 50 (docs/performance.md),
and a run keeps many brokers up at once on two cores. The meter's own tests set the
broker's default again.
Used by the local clusters of ``tests/integration/conftest.py`` and by the in-process
brokers of :mod:`tests.support.inproc`.
"""

TEST_BROKER_DEFAULTS = {"metrics.stall.sample.interval.ms": "50"}
