"""Broker configuration at the edge: read ``server.properties`` and what it points at.

This module owns the I/O the pure table (:mod:`tokensvc.core.config`) must not do:
it reads the properties file (through :mod:`tokensvc.properties`), resolves
relative paths against the file's own directory, reads the master key from
``delegation.token.secret.key.file`` (refusing a file that group or others may
access) or from the environment variable named by ``delegation.token.secret.key.env``,
reads the ZooKeeper JAAS file (``zookeeper.sasl.jaas.file``, private like the key file),
checks that the SSL files exist, and reads the ZooKeeper key and trust stores (JKS,
PKCS12 or PEM, :mod:`zk.tls`) so that a wrong password or type stops the start. :func:`load_zk_security` reads the same ZooKeeper
keys for a tool's ``--zk-tls-config-file``. It returns the checked configuration with the
notices the broker logs once at start: the keys it ignores (names only) and that
tokens are disabled.

Every problem is one :class:`ConfigError` line naming the file and the key; no
secret value ever appears in it. It changes nothing on disk.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tokensvc.core.config import (
    BROKER_CONFIG,
    SECRET_KEY_ENV,
    SECRET_KEY_FILE,
    BrokerConfig,
    ConfigError,
    master_key_source,
)
from tokensvc.core.configdef import PathKind
from tokensvc.core.zk_security import (
    JAAS_FILE,
    ZK_CLIENT_CONFIG,
    ZkSecurity,
    zk_security_from_values,
)
from tokensvc.properties import read_properties
from zk.tls import check_stores

TOKENS_DISABLED = (
    "delegation.token.secret.key is empty: delegation tokens are disabled "
    "(requests get DELEGATION_TOKEN_AUTH_DISABLED)"
)


@dataclass(frozen=True)
class LoadedBrokerConfig:
    """A checked configuration, where it came from, and what to log once at start."""

    config: BrokerConfig
    path: str
    notices: tuple[str, ...]


def load_broker_config(
    path: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> LoadedBrokerConfig:
    """Read and check ``path``; ``env`` (default ``os.environ``) serves
    ``delegation.token.secret.key.env``."""
    source = os.fspath(path)
    try:
        props = read_properties(path)
        return _load(props, source, os.environ if env is None else env)
    except ConfigError as exc:
        raise exc if exc.source else exc.in_file(source) from None


def _load(props: dict[str, str], source: str, env: Mapping[str, str]) -> LoadedBrokerConfig:
    base_dir = os.path.dirname(os.path.abspath(source))
    ignored = BROKER_CONFIG.ignored_keys(props)
    props = BROKER_CONFIG.resolve_paths(props, base_dir)
    resolved = {}
    indirection = master_key_source(props)
    if indirection == SECRET_KEY_FILE:
        resolved[SECRET_KEY_FILE] = read_key_file(props[SECRET_KEY_FILE].strip())
    elif indirection == SECRET_KEY_ENV:
        variable = props[SECRET_KEY_ENV].strip()
        value = env.get(variable, "").strip()
        if not value:
            raise ConfigError(SECRET_KEY_ENV, f"environment variable {variable} is unset or empty")
        resolved[SECRET_KEY_ENV] = value
    for name, key in BROKER_CONFIG.keys.items():
        location = props.get(name, "").strip()
        if key.path is PathKind.FILE and location and not _readable_file(location):
            raise ConfigError(name, f"{location} is not a readable file")
    if props.get(JAAS_FILE, "").strip():
        resolved[JAAS_FILE] = read_private_text(props[JAAS_FILE].strip(), JAAS_FILE)
    config = BrokerConfig.from_properties(props, resolved=resolved)
    _check_zk_stores(config.zookeeper_security)
    notices = []
    if ignored:
        notices.append(
            f"{source}: ignoring {len(ignored)} key(s) tokensvc does not use: {', '.join(ignored)}"
        )
    if not config.master_keys.enabled:
        notices.append(TOKENS_DISABLED)
    return LoadedBrokerConfig(config, source, tuple(notices))


def _check_zk_stores(security: ZkSecurity) -> None:
    if security.tls is not None:
        check_stores(security.tls)


def _readable_file(location: str) -> bool:
    return os.path.isfile(location) and os.access(location, os.R_OK)


def read_key_file(location: str) -> str:
    """The master key held in ``location``: a private (no group/other access), non-empty
    UTF-8 file, surrounding blanks removed."""
    return read_private_text(location, SECRET_KEY_FILE).strip()


def read_private_text(location: str, key: str) -> str:
    """The text of ``location``, a private (no group/other access), non-empty UTF-8 file
    named by ``key``; errors name the key and the file, never the content."""
    try:
        mode = stat.S_IMODE(os.stat(location).st_mode)
        if mode & 0o077:
            raise ConfigError(
                key,
                f"{location} has mode {mode:04o}: it must not be readable or writable "
                "by group or others (chmod 600)",
            )
        text = Path(location).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(key, f"cannot read {location}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(key, f"{location} is not UTF-8 text") from None
    if not text.strip():
        raise ConfigError(key, f"{location} is empty")
    return text


def load_zk_security(path: str | os.PathLike[str]) -> tuple[dict[str, object], ZkSecurity]:
    """A tool's ``--zk-tls-config-file``: the ZooKeeper keys of a properties file (a
    broker's ``server.properties`` will do; other keys are ignored), checked as the broker
    checks them. Returns the typed values (``zookeeper.connect`` and the timeouts, None
    when absent) and the security they give."""
    source = os.fspath(path)
    try:
        props = read_properties(path)
        base_dir = os.path.dirname(os.path.abspath(source))
        props = {k: v for k, v in props.items() if k in ZK_CLIENT_CONFIG.names()}
        props = ZK_CLIENT_CONFIG.resolve_paths(props, base_dir)
        for name, key in ZK_CLIENT_CONFIG.keys.items():
            location = props.get(name, "").strip()
            if key.path is PathKind.FILE and location and not _readable_file(location):
                raise ConfigError(name, f"{location} is not a readable file")
        values = ZK_CLIENT_CONFIG.parse(props)
        jaas = None
        if values[JAAS_FILE] is not None:
            jaas = read_private_text(str(values[JAAS_FILE]), JAAS_FILE)
        security = zk_security_from_values(values, jaas)
        _check_zk_stores(security)
        return values, security
    except ConfigError as exc:
        raise exc if exc.source else exc.in_file(source) from None
