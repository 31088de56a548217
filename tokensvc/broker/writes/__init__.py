"""The broker's writes room: how a write reaches ZooKeeper exactly once.

``path`` (the controller's write path: store call under the controller guard, then this
broker's caches caught up), ``groupcommit`` (token writes sharing one transaction),
``ledger`` (exactly-once application by request key), ``forwarding`` (a
non-controller's EnvelopeRequests to the controller) and ``channel`` (the pipelined
broker-to-broker connection the forwarder uses).
"""
