"""Token audit: the event schema, the brokers' non-blocking audit log writer,
the synthetic event generator and the Spark report job (see docs/audit.md)."""
