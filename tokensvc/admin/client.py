"""The blocking admin client: delegation tokens, SCRAM users, ACLs and the cluster.

Owns which broker to talk to and what to do when it fails. The client keeps one
:class:`~tokensvc.admin.connection.BrokerConnection`; to (re)connect it tries the
bootstrap servers in turn, starting after the last one that failed, each with its share
of the time left (at least 1 s): one broker that accepts but never answers does not use up
the deadline. Every call has a
deadline (``timeout_s``): within it, a lost connection is retried on the next broker and
a retriable Kafka error (NOT_CONTROLLER, COORDINATOR_LOAD_IN_PROGRESS, REQUEST_TIMED_OUT,
...) is retried with backoff; past it, the call raises :class:`AdminError`.

It speaks only standard Kafka protocol, so it works against Apache Kafka brokers too.
It must not import click or print: callers render results and errors.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Self

from tokensvc.admin.connection import BrokerConnection, ConnectionLost, split_address
from tokensvc.admin.propagation import Check, Propagation, wait_all_brokers
from tokensvc.admin.results import (
    AdminError,
    BrokerUnreachableError,
    ClusterDescription,
    Revocation,
    ScramCredentialInfo,
    TokenDescription,
    acl_creation,
    acl_filter_fields,
    binding_from_matching,
    bindings_from_describe,
    cluster_from_describe,
    create_token_body,
    needs_pattern_types,
    principal_of,
    principal_struct,
    raise_for,
    revocation_from,
    scram_credentials_from_describe,
    token_from_create,
    tokens_from_describe,
)
from tokensvc.authz.acl import AclBinding, AclBindingFilter, AclDeleteResult
from tokensvc.client_config import ClientConfig
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import ApiKey
from tokensvc.scram.formatter import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism

INITIAL_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
MIN_ATTEMPT_S = 1.0  # the least time one bootstrap server gets to connect and log in
SALT_BYTES = 32


class AdminClient:
    """A Kafka-protocol admin client for one cluster. Not thread-safe; close when done."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        config: ClientConfig,
        *,
        timeout_s: float = 30,
        client_id: str = "tokensvc-admin",
    ) -> None:
        if isinstance(bootstrap_servers, str):
            bootstrap_servers = bootstrap_servers.split(",")
        self.bootstrap = [a.strip() for a in bootstrap_servers if a.strip()]
        if not self.bootstrap:
            raise ValueError("bootstrap_servers is empty")
        for address in self.bootstrap:
            split_address(address)
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.config = config
        self.timeout_s = timeout_s
        self.client_id = config.client_id or client_id
        self._conn: BrokerConnection | None = None
        self._next = 0

    # -- life ------------------------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected_to(self) -> str | None:
        """The address of the broker of the current connection, if there is one."""
        return self._conn.address if self._conn is not None and self._conn.is_open else None

    # -- delegation tokens -------------------------------------------------------------

    def create_token(
        self,
        renewers: Iterable[str | KafkaPrincipal] = (),
        owner: str | KafkaPrincipal | None = None,
        max_lifetime_ms: int = -1,
        labels: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> TokenDescription:
        """Create a token (for ``owner``, default the caller); ``max_lifetime_ms`` <= 0 means
        the server's maximum. ``labels`` (``{"job": "etl"}`` or pairs) are tokensvc's
        tagged field: the broker checks them (AdminError INVALID_REQUEST naming the label,
        nothing created). A broker that does not know labels (Apache Kafka) creates the
        token without them: this client then expires that token at once and raises, so a
        labelled create never leaves an unlabelled token behind."""
        renewer_principals = tuple(principal_of(r) for r in renewers)
        owner_principal = principal_of(owner) if owner is not None else None
        label_pairs = list(labels.items()) if isinstance(labels, Mapping) else list(labels)

        def send(conn: BrokerConnection, deadline: float) -> tuple[dict[str, Any], int]:
            version = conn.version_for(ApiKey.CREATE_DELEGATION_TOKEN)
            if owner_principal is not None and version < 3:
                raise AdminError(
                    Errors.UNSUPPORTED_VERSION,
                    f"the broker at {conn.address} cannot create tokens for another owner "
                    "(needs CreateDelegationToken v3)",
                )
            if label_pairs and version < 2:
                raise AdminError(
                    Errors.UNSUPPORTED_VERSION,
                    f"the broker at {conn.address} cannot take labels (they are tagged "
                    "fields: needs CreateDelegationToken v2)",
                )
            body = create_token_body(renewer_principals, owner_principal, max_lifetime_ms)
            if label_pairs:
                body["Labels"] = [{"Key": str(k), "Value": str(v)} for k, v in label_pairs]
            return conn.request(ApiKey.CREATE_DELEGATION_TOKEN, body, deadline, version), version

        response, version = self._call(send, "create token")
        token = token_from_create(response, version, renewer_principals)
        if label_pairs and response.get("Labels") is None:
            self.expire_token(token.hmac, -1)
            raise AdminError(Errors.UNSUPPORTED_VERSION,
                             f"the broker ignored the labels (they are a tokensvc extension): "
                             f"the unlabelled token {token.token_id} it created was expired again")
        return token

    def renew_token(self, hmac: bytes, renew_period_ms: int = -1) -> int:
        """Renew the token with this HMAC; returns its new expiry (epoch ms)."""
        body = {"Hmac": bytes(hmac), "RenewPeriodMs": renew_period_ms}
        response, _ = self._call(self._simple(ApiKey.RENEW_DELEGATION_TOKEN, body), "renew token")
        return response["ExpiryTimestampMs"]

    def expire_token(self, hmac: bytes, expiry_period_ms: int = -1) -> int:
        """Set the token's expiry to now + period (a negative period removes it now)."""
        body = {"Hmac": bytes(hmac), "ExpiryTimePeriodMs": expiry_period_ms}
        response, _ = self._call(self._simple(ApiKey.EXPIRE_DELEGATION_TOKEN, body), "expire token")
        return response["ExpiryTimestampMs"]

    def revoke_tokens(
        self,
        owner: str | KafkaPrincipal | None = None,
        token_ids: Iterable[str] = (),
        dry_run: bool = False,
        labels: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> Revocation:
        """Expire every token of ``owner``, every token carrying all of ``labels`` (of
        ``owner`` only, when both are given), or the tokens ``token_ids``, now, without
        their HMACs (tokensvc's tagged fields on ExpireDelegationToken v2;
        docs/protocol.md). The answering broker refuses them when this returns. ``dry_run``
        lists, changes nothing. Raises AdminError when refused (all of it: nothing
        changes), or when the broker does not know the tags (an Apache Kafka broker)."""
        ids = list(dict.fromkeys(token_ids))
        selector = list(labels.items()) if isinstance(labels, Mapping) else list(labels)
        selecting = owner is not None or bool(selector)
        if selecting == bool(ids):
            raise ValueError("give an owner and/or labels, or token ids (not both)")
        body: dict[str, Any] = {"Hmac": b"", "ExpiryTimePeriodMs": -1, "RevokeDryRun": dry_run,
                                "RevokeTokenIds": ids,
                                "RevokeLabels": [{"Key": str(k), "Value": str(v)}
                                                 for k, v in selector]}
        if owner is not None:
            body["RevokeOwner"] = principal_struct(principal_of(owner))

        def send(conn: BrokerConnection, deadline: float) -> tuple[dict[str, Any], int]:
            version = conn.version_for(ApiKey.EXPIRE_DELEGATION_TOKEN)
            if version < 2:
                raise AdminError(Errors.UNSUPPORTED_VERSION,
                                 f"the broker at {conn.address} cannot revoke without HMACs "
                                 "(needs ExpireDelegationToken v2)")
            response = conn.request(ApiKey.EXPIRE_DELEGATION_TOKEN, body, deadline, version)
            code = response["ErrorCode"]
            if response.get("RevokeMessage") and code and not _retriable(code):
                raise AdminError(code, f"{Errors(code).name}: {response['RevokeMessage']}")
            if response.get("Revoked") is None and response["ErrorCode"] in (
                    Errors.NONE, Errors.DELEGATION_TOKEN_NOT_FOUND):
                raise AdminError(Errors.UNSUPPORTED_VERSION,
                                 f"the broker at {conn.address} ignored the revocation fields: "
                                 "revoking by owner, label or id is a tokensvc extension "
                                 "(Apache Kafka needs --hmac)")
            return response, version

        try:
            response, _ = self._call(send, "revoke tokens")
        except AdminError as exc:
            if exc.error != Errors.DELEGATION_TOKEN_NOT_FOUND:
                raise
            return Revocation((), tuple(ids), (), dry_run)
        return revocation_from(response, dry_run)

    def describe_tokens(
        self,
        owners: Iterable[str | KafkaPrincipal] | None = None,
        labels: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> list[TokenDescription]:
        """Tokens the caller may see, of ``owners`` only when given (None: all owners), and
        carrying every label of ``labels`` when given. Each token comes with its labels
        (asked for with tokensvc's ``IncludeLabels`` tag on v2+; a broker that does not
        know labels shows none, and refuses a selector: AdminError)."""
        owner_structs = None
        if owners is not None:
            owner_structs = [principal_struct(principal_of(o)) for o in owners]
        selector = list(labels.items()) if isinstance(labels, Mapping) else list(labels)
        body: dict[str, Any] = {
            "Owners": owner_structs, "IncludeLabels": True,
            "LabelSelector": [{"Key": str(k), "Value": str(v)} for k, v in selector]}

        def send(conn: BrokerConnection, deadline: float) -> tuple[dict[str, Any], int]:
            version = conn.version_for(ApiKey.DESCRIBE_DELEGATION_TOKEN)
            if selector and version < 2:
                raise AdminError(Errors.UNSUPPORTED_VERSION,
                                 f"the broker at {conn.address} cannot select by label "
                                 "(needs DescribeDelegationToken v2)")
            return conn.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, body, deadline, version), version

        response, version = self._call(send, "describe tokens")
        tokens = tokens_from_describe(response, version)
        if selector:
            # A broker that ignored the selector (it does not know labels) answered every
            # token: nothing it shows carries labels, so keep only the matching ones.
            wanted = set(selector)
            tokens = [t for t in tokens if wanted <= set(t.labels)]
        return tokens

    def find_token(self, hmac: bytes) -> TokenDescription | None:
        """The token with this HMAC among those the caller may describe, or None."""
        return next((t for t in self.describe_tokens() if t.hmac == bytes(hmac)), None)

    def wait_all_brokers(self, check: Check, timeout_s: float | None = None) -> Propagation:
        """Block until every live broker of the cluster metadata passes ``check`` (see
        :mod:`tokensvc.admin.propagation`: ``token_logs_in``, ``expiry_visible``,
        ``token_refused``); PropagationTimeout names the brokers that lag."""
        brokers = list(self.describe_cluster().brokers)
        return wait_all_brokers(brokers, self.config, check, timeout_s or self.timeout_s)

    # -- SCRAM users -------------------------------------------------------------------

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, tuple[ScramCredentialInfo, ...]]:
        """Mechanisms and iterations per user (never a salt or key); None: every user."""
        body = {"Users": None if users is None else [{"Name": u} for u in users]}
        response, _ = self._call(
            self._simple(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body),
            "describe SCRAM credentials",
            error_of=lambda r: r["ErrorCode"],
        )
        return scram_credentials_from_describe(response)

    def upsert_user_scram_credential(
        self,
        user: str,
        mechanism: ScramMechanism | str,
        password: str,
        iterations: int = MIN_ITERATIONS,
    ) -> None:
        """Set ``user``'s credential for ``mechanism``: the salt and salted password are
        computed here, so the password itself never leaves this process."""
        mechanism = _mechanism(mechanism)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        salt = os.urandom(SALT_BYTES)
        salted = mechanism.salted_password(password, salt, iterations)
        body = {
            "Deletions": [],
            "Upsertions": [
                {
                    "Name": user,
                    "Mechanism": mechanism.wire_type,
                    "Iterations": iterations,
                    "Salt": salt,
                    "SaltedPassword": salted,
                }
            ],
        }
        self._alter_scram(body, user)

    def delete_user_scram_credential(self, user: str, mechanism: ScramMechanism | str) -> None:
        body = {
            "Deletions": [{"Name": user, "Mechanism": _mechanism(mechanism).wire_type}],
            "Upsertions": [],
        }
        self._alter_scram(body, user)

    def _alter_scram(self, body: dict[str, Any], user: str) -> None:
        response, _ = self._call(
            self._simple(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body),
            "alter SCRAM credentials",
            error_of=_first_result_error,
        )
        _expect_results(response["Results"], 1, f"user {user!r}")
        for result in response["Results"]:
            raise_for(result["ErrorCode"], result.get("ErrorMessage"), f"user {user!r}")

    # -- ACLs ------------------------------------------------------------------------

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Create ACL bindings; raises AdminError naming the first binding refused."""
        bindings = list(bindings)

        def send(conn: BrokerConnection, deadline: float) -> tuple[dict[str, Any], int]:
            version = _acl_version(conn, ApiKey.CREATE_ACLS, bindings)
            body = {"Creations": [acl_creation(b) for b in bindings]}
            return conn.request(ApiKey.CREATE_ACLS, body, deadline, version), version

        response, _ = self._call(send, "create ACLs", error_of=_first_result_error)
        _expect_results(response["Results"], len(bindings), "create ACLs")
        for binding, result in zip(bindings, response["Results"], strict=True):
            raise_for(result["ErrorCode"], result.get("ErrorMessage"), f"create ACL {binding}")

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        def send(conn: BrokerConnection, deadline: float) -> tuple[dict[str, Any], int]:
            version = _acl_version(conn, ApiKey.DESCRIBE_ACLS, [acl_filter])
            body = acl_filter_fields(acl_filter)
            return conn.request(ApiKey.DESCRIBE_ACLS, body, deadline, version), version

        response, _ = self._call(send, "describe ACLs")
        return bindings_from_describe(response)

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclDeleteResult]:
        """Delete the ACLs matching each filter; one result (with what it removed) per filter."""
        filters = list(filters)

        def send(conn: BrokerConnection, deadline: float) -> tuple[dict[str, Any], int]:
            version = _acl_version(conn, ApiKey.DELETE_ACLS, filters)
            body = {"Filters": [acl_filter_fields(f) for f in filters]}
            return conn.request(ApiKey.DELETE_ACLS, body, deadline, version), version

        response, _ = self._call(send, "delete ACLs", error_of=_first_filter_error)
        _expect_results(response["FilterResults"], len(filters), "delete ACLs")
        results = []
        for acl_filter, result in zip(filters, response["FilterResults"], strict=True):
            raise_for(result["ErrorCode"], result.get("ErrorMessage"), "delete ACLs")
            deleted = []
            for acl in result["MatchingAcls"]:
                raise_for(acl["ErrorCode"], acl.get("ErrorMessage"), "delete ACL")
                deleted.append(binding_from_matching(acl))
            results.append(AclDeleteResult(acl_filter, tuple(deleted)))
        return results

    # -- cluster ---------------------------------------------------------------------

    def describe_cluster(self, include_authorized_operations: bool = False) -> ClusterDescription:
        body = {"IncludeClusterAuthorizedOperations": include_authorized_operations}
        response, _ = self._call(self._simple(ApiKey.DESCRIBE_CLUSTER, body), "describe cluster")
        return cluster_from_describe(response)

    # -- the retry loop ----------------------------------------------------------------

    @staticmethod
    def _simple(
        api_key: ApiKey, body: dict[str, Any]
    ) -> Callable[[BrokerConnection, float], tuple[dict[str, Any], int]]:
        def send(conn: BrokerConnection, deadline: float) -> tuple[dict[str, Any], int]:
            version = conn.version_for(api_key)
            return conn.request(api_key, body, deadline, version), version

        return send

    def _call(
        self,
        send: Callable[[BrokerConnection, float], tuple[dict[str, Any], int]],
        what: str,
        error_of: Callable[[dict[str, Any]], int] = lambda r: r["ErrorCode"],
    ) -> tuple[dict[str, Any], int]:
        """Run ``send`` on a live connection until it answers without a retriable error.

        Returns (response body, version used) and raises AdminError for a non-retriable
        top-level error, or once the deadline passes.
        """
        deadline = time.monotonic() + self.timeout_s
        backoff = INITIAL_BACKOFF_S
        last: str | None = None
        unreachable: BrokerUnreachableError | None = None
        # One key for this call, sent with every attempt: a tokensvc broker applies the
        # write once however often it is retried (e.g. after an answer lost to a reset).
        request_key = uuid.uuid4().hex
        last_code: int | None = None
        while True:
            try:
                conn = self._connection(deadline)
                conn.request_key = request_key
                response, version = send(conn, deadline)
            except BrokerUnreachableError as exc:
                unreachable = exc
            except ConnectionLost as exc:
                self._drop(exc.address)
                unreachable, last = None, str(exc)
            else:
                code = error_of(response)
                if code == Errors.NONE:
                    return response, version
                if not _retriable(code):
                    raise_for(code, response.get("ErrorMessage"), what)
                unreachable, last = None, f"{Errors(code).name} from {conn.address}"
                last_code = code
                if code == Errors.REQUEST_TIMED_OUT and len(self.bootstrap) > 1:
                    # A broker that refuses retriably for a reason of its own (its clock,
                    # its view of ZooKeeper, its audit log) may refuse every retry: the
                    # next attempt goes to another bootstrap server.
                    self._drop(conn.address)
            if time.monotonic() + backoff >= deadline:
                if unreachable is not None:
                    raise unreachable
                raise AdminError(
                    Errors.REQUEST_TIMED_OUT,
                    f"{what} did not complete within {self.timeout_s:g}s (last: {last})"
                    + _RETRIABLE_CAUSES.get(last_code, ""),
                )
            time.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _connection(self, deadline: float) -> BrokerConnection:
        """The live connection, or a new one to the first bootstrap server that answers."""
        conn = self._conn
        if conn is not None and conn.is_open and not conn.session_expired(time.monotonic()):
            return conn
        self.close()
        failures = []
        count = len(self.bootstrap)
        for i in range(count):
            address = self.bootstrap[(self._next + i) % count]
            if time.monotonic() >= deadline:
                failures.append(f"{address} (not tried: out of time)")
                continue
            candidate = BrokerConnection(address, self.config, client_id=self.client_id)
            # A broker that accepts but never answers (stopped, overloaded) gets its share
            # of the time left, not all of it: the others are still tried.
            now = time.monotonic()
            share = max((deadline - now) / (count - i), MIN_ATTEMPT_S)
            try:
                candidate.open(min(deadline, now + share))
            except ConnectionLost as exc:
                failures.append(f"{address} ({exc.reason})")
                continue
            self._conn = candidate
            self._next = (self._next + i) % count
            return candidate
        raise BrokerUnreachableError(
            f"could not connect to any bootstrap server within {self.timeout_s:g}s: "
            + ", ".join(failures)
        )

    def _drop(self, address: str) -> None:
        self.close()
        if address in self.bootstrap:
            self._next = (self.bootstrap.index(address) + 1) % len(self.bootstrap)


# What a broker means by a retriable refusal that lasted until the deadline: the causes it
# logs (the Kafka response of a token write carries no message to say which).
_RETRIABLE_CAUSES: dict[int | None, str] = {
    Errors.REQUEST_TIMED_OUT: (
        "; a broker refuses this way while its clock is beyond max.clock.skew.ms from the "
        "cluster's time (its log says 'refusing token logins and token writes (clock_skew)'), "
        "its view of ZooKeeper is older than zookeeper.max.staleness.ms, or its required "
        "audit log cannot be written"),
    Errors.NOT_CONTROLLER: (
        "; no broker acts as the controller: the brokers may have lost ZooKeeper, or every "
        "broker's clock is beyond max.clock.skew.ms (a broker with a wrong clock does not "
        "stand for controller)"),
}


def _retriable(code: int) -> bool:
    try:
        return Errors(code).retriable
    except ValueError:
        return False


def _first_result_error(response: dict[str, Any]) -> int:
    """The error to retry on for per-item answers: a retriable one shared by the items."""
    for result in response["Results"]:
        if _retriable(result["ErrorCode"]):
            return result["ErrorCode"]
    return Errors.NONE


def _first_filter_error(response: dict[str, Any]) -> int:
    for result in response["FilterResults"]:
        if _retriable(result["ErrorCode"]):
            return result["ErrorCode"]
    return Errors.NONE


def _mechanism(mechanism: ScramMechanism | str) -> ScramMechanism:
    return mechanism if isinstance(mechanism, ScramMechanism) else ScramMechanism.from_name(mechanism)


def _acl_version(
    conn: BrokerConnection, api_key: ApiKey, items: Sequence[AclBinding | AclBindingFilter]
) -> int:
    version = conn.version_for(api_key)
    if version == 0 and needs_pattern_types(items):
        raise AdminError(
            Errors.UNSUPPORTED_VERSION,
            f"the broker at {conn.address} supports only literal ACL patterns",
        )
    return version


def _expect_results(results: list, expected: int, context: str) -> None:
    """A response with per-item results must have one per item sent: a shorter list is
    not a success (it is what an error answer without items looks like)."""
    if len(results) != expected:
        raise AdminError(Errors.UNKNOWN_SERVER_ERROR,
                         f"{context}: the broker answered {len(results)} results for "
                         f"{expected} sent")
