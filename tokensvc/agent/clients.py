"""Running clients take each new token from the agent's credentials file.

:class:`CredentialsWatcher` follows one credentials file (any of the agent's formats) from a
thread of its own: it polls the file's identity (inode, size, mtime -- the agent replaces the
file by rename, so a new token is a new inode) and parses it; when the token id changes it
calls its listeners with the new :class:`~tokensvc.agent.credentials.Credentials`. A file
that cannot be parsed (written by something else, or missing for a moment) is logged and
the current token kept: a listener never sees half a token.

The ``follow_*`` functions connect a running client to a watcher (the ``*_applier``
functions give the callable they register, for a job with its own source of tokens):

* confluent-kafka ``Producer``, ``Consumer``, ``AdminClient``:
  ``set_sasl_credentials`` (librdkafka's ``rd_kafka_sasl_set_credentials``) -- used at the
  next authentication: a reconnect, or a KIP-368 re-authentication;
* kafka-python (tested with 3.0.12) ``KafkaProducer``, ``KafkaConsumer``,
  ``KafkaAdminClient``: the connection manager's configuration, from which every new
  connection copies its SASL settings -- used at the next connection;
* aiokafka (tested with 0.14.0) producer, consumer, admin client: the ``AIOKafkaClient``'s
  SASL user and password, which it passes to every connection it creates -- used at the next
  connection;
* tokensvc's :class:`~tokensvc.admin.AdminClient`: its client configuration -- used at the
  next connection.

kafka-python and aiokafka offer no public way to change credentials of a running client,
so the functions for them set the attributes named above; a version that renames them makes
the function raise ``TypeError`` at once rather than silently keep the old token.

``*_config(creds)`` give the settings each client takes at construction, so a job writes::

    watcher = CredentialsWatcher("/run/tokensvc/job.properties").start()
    producer = confluent_kafka.Producer({"bootstrap.servers": ..., **confluent_config(watcher.current)})
    follow_confluent(producer, watcher)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Self

from tokensvc.agent.credentials import Credentials, CredentialsError, parse

log = logging.getLogger("tokensvc.agent.clients")
Listener = Callable[[Credentials], None]


class CredentialsWatcher:
    """Follows a credentials file; calls listeners with each new token."""

    def __init__(self, path: str | os.PathLike[str], poll_interval_s: float = 0.5) -> None:
        self.path = os.fspath(path)
        self.poll_interval_s = poll_interval_s
        self._listeners: list[Listener] = []
        self._identity: tuple[int, int, int] | None = None
        self._current: Credentials | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def current(self) -> Credentials:
        """The token in force (the file must have been read: see :meth:`start`)."""
        if self._current is None:
            raise CredentialsError(f"no credentials read from {self.path} yet")
        return self._current

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def start(self) -> Self:
        """Read the file now (raises CredentialsError or OSError if it is not usable), then
        follow it in a daemon thread."""
        self.poll(strict=True)
        self._thread = threading.Thread(target=self._run, name=f"credentials-{self.path}",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop following the file and let go of the listeners: they hold the clients,
        and a librdkafka client (confluent-kafka) has no close of its own; it closes its
        connections when the last reference to it goes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self._listeners.clear()

    def __enter__(self) -> Self:
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def poll(self, strict: bool = False) -> bool:
        """Look at the file once; True if it holds a new token (listeners were called)."""
        try:
            stat = os.stat(self.path)
            identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if identity == self._identity:
                return False
            with open(self.path, "rb") as handle:
                creds = parse(handle.read())
        except (OSError, CredentialsError) as exc:
            if strict:
                raise
            log.warning("credentials file %s not usable now (%s); keeping the current token",
                        self.path, exc)
            return False
        self._identity = identity
        if self._current is not None and creds.token_id == self._current.token_id:
            self._current = creds  # renewed: same token, new dates
            return False
        self._current = creds
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(creds)
            except Exception:  # one client's failure must not stop the others
                log.exception("applying token %s failed", creds.token_id)
        log.info("token %s from %s applied to %d client(s)", creds.token_id, self.path,
                 len(listeners))
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            self.poll()


# -- configuration at construction ---------------------------------------------------------


def confluent_config(creds: Credentials) -> dict[str, str]:
    """confluent-kafka (librdkafka) settings for a token login."""
    return {"security.protocol": creds.security_protocol, "sasl.mechanism": creds.sasl_mechanism,
            "sasl.username": creds.token_id, "sasl.password": creds.hmac_b64}


def kafka_python_config(creds: Credentials) -> dict[str, str]:
    """kafka-python keyword arguments for a token login."""
    return {"security_protocol": creds.security_protocol, "sasl_mechanism": creds.sasl_mechanism,
            "sasl_plain_username": creds.token_id, "sasl_plain_password": creds.hmac_b64}


def aiokafka_config(creds: Credentials) -> dict[str, str]:
    """aiokafka keyword arguments for a token login."""
    return kafka_python_config(creds)


# -- following a running client ------------------------------------------------------------


def confluent_applier(client: Any) -> Listener:
    """What hands a token to a confluent-kafka client: ``set_sasl_credentials``."""
    if not hasattr(client, "set_sasl_credentials"):
        raise TypeError(f"{type(client).__name__} has no set_sasl_credentials "
                        "(confluent-kafka >= 2.x is needed)")
    return lambda c: client.set_sasl_credentials(c.token_id, c.hmac_b64)


def kafka_python_applier(client: Any) -> Listener:
    """What hands a token to a kafka-python client: its connection settings."""
    inner = getattr(client, "_client", None)
    manager = getattr(client, "_manager", None) or getattr(inner, "_manager", None)
    config = getattr(manager, "config", None)
    if not isinstance(config, dict) or "sasl_plain_password" not in config:
        raise TypeError(f"cannot find the connection settings of {type(client).__name__} "
                        "(kafka-python 3.0 is what this was tested with)")

    def apply(creds: Credentials) -> None:
        config["sasl_plain_username"] = creds.token_id
        config["sasl_plain_password"] = creds.hmac_b64

    return apply


def aiokafka_applier(client: Any) -> Listener:
    """What hands a token to an aiokafka client: its connection settings."""
    inner = client
    if not hasattr(inner, "_sasl_plain_password"):  # a producer, consumer or admin client
        inner = getattr(client, "_client", None) or getattr(client, "client", None)
    if not hasattr(inner, "_sasl_plain_password"):
        raise TypeError(f"cannot find the connection settings of {type(client).__name__} "
                        "(aiokafka 0.14 is what this was tested with)")

    def apply(creds: Credentials) -> None:
        inner._sasl_plain_username = creds.token_id
        inner._sasl_plain_password = creds.hmac_b64

    return apply


def admin_applier(admin: Any) -> Listener:
    """What hands a token to a tokensvc AdminClient: its configuration."""

    def apply(creds: Credentials) -> None:
        admin.config = dataclasses.replace(admin.config, username=creds.token_id,
                                           password=creds.hmac_b64, token_auth=True)

    return apply


def follow_confluent(client: Any, watcher: CredentialsWatcher) -> None:
    """Each new token goes to a confluent-kafka client (next login or re-authentication)."""
    watcher.add_listener(confluent_applier(client))


def follow_kafka_python(client: Any, watcher: CredentialsWatcher) -> None:
    """Each new token goes into a kafka-python client's settings (next connection)."""
    watcher.add_listener(kafka_python_applier(client))


def follow_aiokafka(client: Any, watcher: CredentialsWatcher) -> None:
    """Each new token goes into an aiokafka client's settings (next connection)."""
    watcher.add_listener(aiokafka_applier(client))


def follow_admin(admin: Any, watcher: CredentialsWatcher) -> None:
    """Each new token goes into a tokensvc AdminClient's configuration (next connection)."""
    watcher.add_listener(admin_applier(admin))
