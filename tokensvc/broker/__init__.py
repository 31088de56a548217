"""The broker: Kafka's wire in, the token rules applied, ZooKeeper written; in rooms.

- ``broker`` -- the lifecycle (start, stop, in order) on the parts ``assembly`` built;
- ``assembly`` -- every part built once, in dependency order (``LocalParts``,
  ``BrokerParts``; frozen); ``gauges`` -- the gauges read from those parts;
- ``dispatch`` -- where a decoded request goes (handler table, freshness hold, the
  ledger on the controller, the forwarder elsewhere);
- ``network/`` -- listeners, connections, the receive buffer, the request memory pool,
  precomputed replies, request decoding;
- ``sessions/`` -- the session state machine (what may be sent, and how it is routed),
  the live-session registry, the session audit event, SCRAM derivations off the loop;
- ``writes/`` -- the write path, the group commit, the exactly-once ledger, the
  forwarder and its broker-to-broker channel;
- ``gates/`` -- the clock gate and the freshness gate;
- ``loop/`` -- the event loop, its stall meter, work moved off it;
- ``handlers/`` -- one module per API family and THE ApiKey table; ``services`` -- what
  a handler may use; ``context`` -- what a handler knows of a request; ``describe`` --
  DescribeDelegationToken at scale; ``metrics`` -- Prometheus.
"""
