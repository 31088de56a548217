"""The token cache snapshot: a broker's restart from a local copy of its cache.

``format`` is the pure core (encode, decode and validate a snapshot, and the rules
that decide whether one may be used); ``files`` is the shell (the file on disk,
written atomically, and the thread that writes it periodically). See
docs/performance.md, "How a restart works at 1M tokens".
"""
