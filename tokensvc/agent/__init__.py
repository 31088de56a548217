"""The token agent: keeps one live delegation token for a job and hands it to clients.

A client-side room (DESIGN.md, "A token's life outside the broker"):

* ``credentials`` -- the file contract running clients read (``properties``, ``json``,
  ``env``): render and parse, pure;
* ``files`` -- atomic writes (temporary file, fsync, rename, mode 0600);
* ``schedule`` -- the pure schedule: given the tokens the agent holds, the clock and the
  policy, the next action and when (create, renew, create the successor, expire the old);
* ``state`` -- the state file that lets an agent killed at any point resume;
* ``runner`` -- the shell: the admin client, retries, sinks, state, signals;
* ``metrics`` -- Prometheus text for a sidecar;
* ``clients`` -- helpers that make running clients take each new token.

Nothing here is imported by a broker.
"""
