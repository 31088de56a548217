"""The broker's sessions room: who is on a connection, and what happens to them.

``session`` (one connection's authentication state machine, without I/O, and the one
table of which API it may send in which state and how it is routed), ``registry``
(live sessions following their token or user credential), ``events`` (the ``session``
audit event) and ``derivations`` (SCRAM's PBKDF2 derivations off the event loop).
"""
