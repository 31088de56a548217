"""Describing client quotas (KIP-546) as a ZooKeeper-mode Kafka broker does: pure logic.

Kafka keeps client quotas in the same config znodes as SCRAM credentials
(``/config/users/<user>``), and beside them in ``/config/users/<user>/clients/<client-id>``,
``/config/clients/<client-id>`` and ``/config/ips/<ip>``; ``<default>`` names an entity
type's default. tokensvc never writes a quota (they are Kafka's), but it answers
DescribeClientQuotas over the same znodes, so that ``kafka-configs.sh --describe`` and
``Admin.describeClientQuotas`` give the answer a Kafka broker on the same ZooKeeper gives.

This module is that answer's rules, after Kafka 3.9's ``ZkAdminManager.describeClientQuotas``:

- :func:`quota_filter` reads the request's components: each entity type at most once,
  ``user`` and ``client-id`` never with ``ip``; an unknown type is UNSUPPORTED_VERSION,
  the rest INVALID_REQUEST (:class:`QuotaFilterError`).
- :func:`describe` asks a :class:`QuotaConfigs` source (the znodes) for exactly the
  entities the filter can match -- one znode for an exact name, a listing otherwise --
  and keeps those whose components match and that hold at least one quota key of their
  kind, each value a float.

Where Kafka answers UNKNOWN_SERVER_ERROR without a word (an exact match without a name,
an empty name, a match type it does not know), the answer here is INVALID_REQUEST saying
what is wrong; a value in ZooKeeper that is not a number fails the request, as in Kafka,
but naming the entity and key.

Must not: do I/O (the source does), or write anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.principal import desanitize, sanitize

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

# The znode folders under /config, and a default entity's znode name (Kafka's
# ZooKeeperInternals.DEFAULT_STRING).
USERS = "users"
CLIENTS = "clients"
IPS = "ips"
DEFAULT_NAME = "<default>"

# Kafka's QuotaConfig: the keys a user or client-id entity's quota may have; an ip's.
USER_CLIENT_QUOTA_KEYS = frozenset({
    "producer_byte_rate", "consumer_byte_rate", "request_percentage",
    "controller_mutation_rate",
})
IP_QUOTA_KEYS = frozenset({"connection_creation_rate"})

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

# A component's match: a name, the default entity (None), or any specified name.
ANY = object()
# An entity's name for a type it does not have (None is the default entity's name).
ABSENT = object()

# An entity: its (type, name) pairs in type order; a None name is the type's default.
Entity = tuple[tuple[str, str | None], ...]

# Java's Double.parseDouble for what Kafka's config validation lets through: decimal
# literals with an optional exponent and f/d suffix, NaN and Infinity, after trimming.
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)")


class QuotaFilterError(KafkaError):
    """A filter or a stored quota this broker cannot answer for: the response's error."""


@dataclass(frozen=True)
class Component:
    """One filter component: ``match`` is a name, None (the default entity) or :data:`ANY`."""

    entity_type: str
    match: object

    @property
    def exact(self) -> bool:
        """A name or the default: Kafka reads one znode instead of listing them."""
        return self.match is not ANY

    def matches(self, name: object) -> bool:
        """Whether an entity's name of this type (None: default) satisfies the component."""
        return True if self.match is ANY else name == self.match


@dataclass(frozen=True)
class QuotaFilter:
    user: Component | None
    client_id: Component | None
    ip: Component | None
    strict: bool


def quota_filter(components: Sequence[Mapping[str, object]], strict: bool) -> QuotaFilter:
    """The request's components as a filter; :class:`QuotaFilterError` for one Kafka refuses
    (or answers with an unknown server error)."""
    found: dict[str, Component] = {}
    for raw in components:
        entity_type = raw.get("EntityType")
        if not isinstance(entity_type, str) or entity_type == "":
            raise QuotaFilterError(Errors.INVALID_REQUEST,
                                   "Unexpected empty filter component entity type")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaFilterError(Errors.UNSUPPORTED_VERSION,
                                   f"Custom entity type '{entity_type}' not supported")
        if entity_type in found:
            short = "client" if entity_type == CLIENT_ID else entity_type
            raise QuotaFilterError(Errors.INVALID_REQUEST,
                                   f"Duplicate {short} filter component entity type")
        found[entity_type] = Component(entity_type, _match(entity_type, raw))
    if IP in found and (USER in found or CLIENT_ID in found):
        raise QuotaFilterError(
            Errors.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not be "
            "used with user or clientId filter component.")
    return QuotaFilter(found.get(USER), found.get(CLIENT_ID), found.get(IP), bool(strict))


def _match(entity_type: str, raw: Mapping[str, object]) -> object:
    match_type, name = raw.get("MatchType"), raw.get("Match")
    if match_type == MATCH_EXACT:
        if not isinstance(name, str):
            raise QuotaFilterError(Errors.INVALID_REQUEST,
                                   f"an exact {entity_type} match needs a name")
        if name == "":
            raise QuotaFilterError(Errors.INVALID_REQUEST, f"Empty {entity_type} not supported")
        return name
    if match_type == MATCH_DEFAULT:
        return None
    if match_type == MATCH_SPECIFIED:
        return ANY
    raise QuotaFilterError(Errors.INVALID_REQUEST,
                           f"unknown match type {match_type!r} for {entity_type} "
                           "(0 exact, 1 default, 2 any specified)")


class QuotaConfigs(Protocol):
    """Entity configs as ZooKeeper holds them: folder paths and names sanitized, each
    config the znode's ``config`` map (empty where the znode is missing)."""

    def entity(self, path: str) -> Mapping[str, str]:
        """The config at ``/config/<path>``, e.g. ``users/alice/clients/app``."""

    def entities(self, folder: str) -> Mapping[str, Mapping[str, str]]:
        """Every child of ``/config/<folder>`` by its znode name, with its config."""

    def user_clients(self) -> Mapping[tuple[str, str], Mapping[str, str]]:
        """Every ``/config/users/<user>/clients/<client>`` by (user, client) znode names."""


def znode_name(name: str | None) -> str:
    """An entity name as its znode is named (Kafka's Sanitizer; None is the default)."""
    return DEFAULT_NAME if name is None else sanitize(name)


def entity_name(znode: str) -> str | None:
    """A znode's entity name: None for the default."""
    return None if znode == DEFAULT_NAME else desanitize(znode)


def describe(flt: QuotaFilter, configs: QuotaConfigs) -> dict[Entity, dict[str, float]]:
    """The quotas the filter selects, by entity: what Kafka 3.9 answers in ZooKeeper mode."""
    out: dict[Entity, dict[str, float]] = {}
    if flt.ip is None:
        out.update(_user_client_quotas(flt, configs))
    if flt.user is None and flt.client_id is None:
        out.update(_ip_quotas(flt, configs))
    return out


def _user_client_quotas(flt: QuotaFilter, configs: QuotaConfigs
                        ) -> dict[Entity, dict[str, float]]:
    user, client = flt.user, flt.client_id
    user_match = user.match if user is not None else ANY
    client_match = client.match if client is not None else ANY
    exact_user = user is not None and user.exact
    exact_client = client is not None and client.exact
    no_user = flt.strict and user is None  # strict: entities with a user are left out
    no_client = flt.strict and client is None
    # (user, client, config); ABSENT where the entity has no such component.
    found: list[tuple[object, object, Mapping[str, str]]] = []
    if exact_user and no_client:
        found.append((user_match, ABSENT, configs.entity(_path(USERS, user_match))))
    elif not no_user and not exact_client:
        found += [(entity_name(n), ABSENT, c) for n, c in configs.entities(USERS).items()]
    if exact_client and no_user:
        found.append((ABSENT, client_match, configs.entity(_path(CLIENTS, client_match))))
    elif not exact_user and not no_client:
        found += [(ABSENT, entity_name(n), c) for n, c in configs.entities(CLIENTS).items()]
    if exact_user and exact_client:
        path = f"{_path(USERS, user_match)}/{_path(CLIENTS, client_match)}"
        found.append((user_match, client_match, configs.entity(path)))
    elif not no_user and not no_client:
        found += [(entity_name(u), entity_name(c), config)
                  for (u, c), config in configs.user_clients().items()]

    def matches(component: Component | None, name: object) -> bool:
        if component is None:
            return name is ABSENT or not flt.strict
        return name is not ABSENT and component.matches(name)

    out: dict[Entity, dict[str, float]] = {}
    for user_name, client_name, config in found:
        if not (matches(user, user_name) and matches(client, client_name)):
            continue
        entity = _entity((USER, user_name), (CLIENT_ID, client_name))
        values = _values(entity, config, USER_CLIENT_QUOTA_KEYS)
        if values:
            out[entity] = values
    return out


def _path(folder: str, name: object) -> str:
    assert name is None or isinstance(name, str)
    return f"{folder}/{znode_name(name)}"


def _entity(*parts: tuple[str, object]) -> Entity:
    return tuple((kind, name) for kind, name in parts  # type: ignore[misc]
                 if name is not ABSENT)


def _ip_quotas(flt: QuotaFilter, configs: QuotaConfigs) -> dict[Entity, dict[str, float]]:
    ip = flt.ip
    found: dict[object, Mapping[str, str]]
    if ip is not None and ip.exact:
        found = {ip.match: configs.entity(_path(IPS, ip.match))}
    elif ip is not None or not flt.strict:
        found = {entity_name(n): c for n, c in configs.entities(IPS).items()}
    else:
        found = {}
    out: dict[Entity, dict[str, float]] = {}
    for name, config in found.items():
        entity = _entity((IP, name))
        values = _values(entity, config, IP_QUOTA_KEYS)
        if values:
            out[entity] = values
    return out


def _values(entity: Entity, config: Mapping[str, str], keys: frozenset[str]
            ) -> dict[str, float]:
    values: dict[str, float] = {}
    for key, raw in config.items():
        if key not in keys:
            continue
        text = str(raw).strip()
        if not _JAVA_DOUBLE.fullmatch(text):
            shown = ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)
            raise QuotaFilterError(
                Errors.UNKNOWN_SERVER_ERROR,
                f"the quota {key} of {shown} in ZooKeeper is not a number")
        values[key] = float(text.rstrip("fFdD"))
    return values
