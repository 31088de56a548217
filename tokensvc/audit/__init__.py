"""Token audit: the event schema, the brokers' non-blocking audit log writer,
the synthetic event generator, the token export format and the Spark report job
(see docs/audit.md)."""
