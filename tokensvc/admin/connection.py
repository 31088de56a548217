"""One blocking, authenticated connection to one broker.

Owns the connection's life: TCP connect, TLS (when the protocol says so), ApiVersions
(to learn the broker's version ranges, falling back when the broker refuses our
ApiVersions version), SaslHandshake v1 and SaslAuthenticate with
:class:`~tokensvc.scram.client.ScramClient` (``tokenauth=true`` for token logins), then
one request at a time. Requests use the highest version both sides support.

Failures are reported as two kinds: :class:`ConnectionLost` (this broker could not be
reached or dropped us: the caller may try another one) and :class:`AdminError` (the
broker answered and refused: retrying elsewhere will not help, e.g. bad credentials).
Messages name the address and never contain a password or a token HMAC.
This module does not retry and does not choose brokers; that is the client's job.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any

from tokensvc.admin.results import AdminError
from tokensvc.client_config import ClientConfig
from tokensvc.core.errors import Errors
from tokensvc.oauth.client import TokenUnavailable, read_token_file
from tokensvc.oauth.exchange import MECHANISM, client_first_message, client_reply
from tokensvc.protocol import (
    SUPPORTED,
    ApiKey,
    FrameDecoder,
    ProtocolError,
    RequestHeader,
    decode_response,
    encode_request,
    frame,
)
from tokensvc.scram.client import SaltedPasswordCache, ScramClient
from tokensvc.scram.messages import ScramAuthenticationError

MAX_RESPONSE_BYTES = 100 * 1024 * 1024
CLIENT_SOFTWARE_NAME = "tokensvc-admin"
CLIENT_SOFTWARE_VERSION = "0.1.0"


class ConnectionLost(ConnectionError):
    """The broker at ``address`` could not be reached or closed the connection."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"{address}: {reason}")
        self.address = address
        self.reason = reason


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a pair; ValueError when malformed."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bootstrap server {address!r} is not host:port")
    return host.strip("[]"), int(port)


class BrokerConnection:
    """A logged-in connection to the broker at ``address`` (``host:port``)."""

    def __init__(self, address: str, config: ClientConfig, *, client_id: str,
                 salted_password_cache: SaltedPasswordCache | None = None) -> None:
        self.address = address
        self.config = config
        self.client_id = client_id
        # The key of the write call in progress (tokensvc's header tag): the admin client sets
        # it for each call and keeps it across the retries of that call.
        self.request_key: str | None = None
        self.versions: dict[int, tuple[int, int]] = {}
        self.session_deadline: float | None = None
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        self._correlation = 0
        # Salted passwords by (password, salt, iterations): a caller that logs in many
        # times with the same secrets (the fault drivers) hands one in to skip PBKDF2.
        self._salted = salted_password_cache

    # -- life ------------------------------------------------------------------------

    def open(self, deadline: float) -> None:
        """Connect, negotiate versions and log in, all before ``deadline`` (monotonic)."""
        host, port = split_address(self.address)
        try:
            raw = socket.create_connection((host, port), timeout=self._remaining(deadline))
        except TimeoutError:
            raise ConnectionLost(self.address, "connect timed out") from None
        except OSError as exc:
            raise ConnectionLost(self.address, _os_reason(exc)) from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = raw
        try:
            if self.config.uses_tls:
                self._sock = self._wrap_tls(raw, host, deadline)
            self._negotiate_versions(deadline)
            if self.config.uses_sasl:
                self._login(deadline)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def session_expired(self, now: float) -> bool:
        """True once the broker's SASL session lifetime (KIP-368) has run out."""
        return self.session_deadline is not None and now >= self.session_deadline

    # -- requests ----------------------------------------------------------------------

    def version_for(self, api_key: ApiKey) -> int:
        """The highest version of ``api_key`` that this client and the broker both speak."""
        ours = SUPPORTED[api_key]
        theirs = self.versions.get(int(api_key))
        if theirs is None:
            raise AdminError(
                Errors.UNSUPPORTED_VERSION,
                f"the broker at {self.address} does not support {_api_name(api_key)}",
            )
        lo, hi = max(ours[0], theirs[0]), min(ours[1], theirs[1])
        if lo > hi:
            raise AdminError(
                Errors.UNSUPPORTED_VERSION,
                f"the broker at {self.address} supports {_api_name(api_key)} "
                f"v{theirs[0]}-{theirs[1]}, this client v{ours[0]}-{ours[1]}",
            )
        return hi

    def request(
        self, api_key: ApiKey, body: dict[str, Any], deadline: float, version: int | None = None
    ) -> dict[str, Any]:
        """Send one request (at ``version``, default the negotiated one) and read its answer."""
        if version is None:
            version = self.version_for(api_key)
        return self._exchange(api_key, version, body, deadline)

    # -- internals -------------------------------------------------------------------

    def _exchange(
        self, api_key: int, version: int, body: dict[str, Any], deadline: float
    ) -> dict[str, Any]:
        correlation, payload = self._round_trip(api_key, version, body, deadline)
        try:
            got, decoded = decode_response(api_key, version, payload)
        except ProtocolError as exc:
            if api_key != ApiKey.API_VERSIONS or version == 0:
                self.close()
                raise ConnectionLost(self.address, f"unreadable answer ({exc.message})") from None
            # A broker that does not know our ApiVersions version answers in v0 format.
            got, decoded = self._decode_api_versions_v0(payload)
        if got != correlation:
            self.close()
            raise ConnectionLost(
                self.address, f"answer for request {got} while waiting for {correlation}"
            )
        return decoded

    def _decode_api_versions_v0(self, payload: bytes) -> tuple[int, dict[str, Any]]:
        try:
            return decode_response(ApiKey.API_VERSIONS, 0, payload)
        except ProtocolError as exc:
            self.close()
            raise ConnectionLost(self.address, f"unreadable answer ({exc.message})") from None

    def _round_trip(
        self, api_key: int, version: int, body: dict[str, Any], deadline: float
    ) -> tuple[int, bytes]:
        """Send one request frame and return (its correlation id, the next response frame)."""
        sock = self._sock
        if sock is None:
            raise ConnectionLost(self.address, "connection is closed")
        self._correlation += 1
        correlation = self._correlation
        header = RequestHeader(api_key, version, correlation, self.client_id, self.request_key)
        payload = frame(encode_request(header, body))
        try:
            sock.settimeout(self._remaining(deadline))
            sock.sendall(payload)
            while (response := self._decoder.next_frame()) is None:
                sock.settimeout(self._remaining(deadline))
                data = sock.recv(65536)
                if not data:
                    raise ConnectionLost(self.address, self._closed_reason())
                self._decoder.feed(data)
        except ConnectionLost:
            self.close()
            raise
        except TimeoutError:
            self.close()
            raise ConnectionLost(self.address, "no answer before the timeout") from None
        except ProtocolError as exc:
            self.close()
            raise ConnectionLost(self.address, f"unreadable answer ({exc.message})") from None
        except ssl.SSLError as exc:
            self.close()
            raise ConnectionLost(self.address, f"TLS error: {exc.reason or exc}") from None
        except OSError as exc:
            self.close()
            raise ConnectionLost(self.address, _os_reason(exc)) from None
        return correlation, response

    def _closed_reason(self) -> str:
        reason = "the broker closed the connection"
        if not self.config.uses_sasl:
            reason += (
                f" (security.protocol is {self.config.security_protocol}: "
                "does this listener need SASL_PLAINTEXT or SASL_SSL?)"
            )
        return reason

    def _wrap_tls(self, raw: socket.socket, host: str, deadline: float) -> ssl.SSLSocket:
        ctx = self.config.ssl_context()
        raw.settimeout(self._remaining(deadline))
        try:
            return ctx.wrap_socket(raw, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            raise AdminError(
                Errors.NETWORK_EXCEPTION,
                f"TLS certificate of {self.address} not trusted: {exc.verify_message} "
                "(check ssl.truststore.location / ssl.endpoint.identification.algorithm)",
            ) from None
        except TimeoutError:
            raise ConnectionLost(self.address, "TLS handshake timed out") from None
        except ssl.SSLError as exc:
            raise ConnectionLost(self.address, f"TLS handshake failed: {exc.reason or exc}") from None
        except OSError as exc:
            raise ConnectionLost(self.address, _os_reason(exc)) from None

    def _negotiate_versions(self, deadline: float) -> None:
        lo, version = SUPPORTED[ApiKey.API_VERSIONS]
        while True:
            body = {
                "ClientSoftwareName": CLIENT_SOFTWARE_NAME,
                "ClientSoftwareVersion": CLIENT_SOFTWARE_VERSION,
            }
            response = self._exchange(ApiKey.API_VERSIONS, version, body, deadline)
            code = response["ErrorCode"]
            if code == Errors.UNSUPPORTED_VERSION and version > lo:
                theirs = next(
                    (k for k in response["ApiKeys"] if k["ApiKey"] == ApiKey.API_VERSIONS), None
                )
                version = min(version - 1, theirs["MaxVersion"]) if theirs else lo
                continue
            if code != Errors.NONE:
                raise AdminError(code, f"ApiVersions refused by {self.address}")
            self.versions = {
                k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in response["ApiKeys"]
            }
            return

    def _login(self, deadline: float) -> None:
        config = self.config
        if config.oauth_token_file is not None or config.oauth_client is not None:
            self._login_oauth(deadline)
            return
        assert config.sasl_mechanism is not None and config.username is not None
        mechanism = config.sasl_mechanism.mechanism_name
        who = f"{'token' if config.token_auth else 'user'} {config.username!r}"
        handshake_version = min(1, self.version_for(ApiKey.SASL_HANDSHAKE))
        if handshake_version < 1:
            raise AdminError(
                Errors.UNSUPPORTED_VERSION,
                f"the broker at {self.address} does not support SaslAuthenticate",
            )
        hs = self.request(ApiKey.SASL_HANDSHAKE, {"Mechanism": mechanism}, deadline, 1)
        if hs["ErrorCode"] != Errors.NONE:
            offered = ", ".join(hs["Mechanisms"]) or "none"
            raise AdminError(
                hs["ErrorCode"],
                f"{mechanism} is not enabled on {self.address} (it offers: {offered}); "
                "change sasl.mechanism",
            )
        client = ScramClient(
            config.sasl_mechanism,
            config.username,
            config.password or "",
            extensions={"tokenauth": "true"} if config.token_auth else None,
            salted_password_cache=self._salted,
        )
        try:
            first = self._authenticate(client.first_message(), deadline, who)
            final = self._authenticate(client.final_message(first["AuthBytes"]), deadline, who)
            client.verify_server_final(final["AuthBytes"])
        except ScramAuthenticationError as exc:
            raise AdminError(
                Errors.SASL_AUTHENTICATION_FAILED,
                f"authentication as {who} at {self.address} failed: the broker's SCRAM answer "
                f"did not verify ({exc.reason})",
            ) from None
        lifetime = final.get("SessionLifetimeMs") or 0
        if lifetime > 0:
            # Re-login a little before the broker would drop the session.
            self.session_deadline = time.monotonic() + lifetime / 1000 * 0.9

    def _login_oauth(self, deadline: float) -> None:
        """OAUTHBEARER with the JWT a file holds now (read at every login: a kubelet or a
        CI system replaces it before it expires), or one of a client-credentials grant."""
        path, grant = self.config.oauth_token_file, self.config.oauth_client
        if path is not None:
            who = f"the JWT of {path}"
        else:
            assert grant is not None
            who = f"OAuth client {grant.client_id!r}"
        try:
            first = client_first_message(read_token_file(path) if path is not None
                                         else grant.token())
        except (TokenUnavailable, ValueError) as exc:
            raise AdminError(Errors.SASL_AUTHENTICATION_FAILED, str(exc)) from None
        hs = self.request(ApiKey.SASL_HANDSHAKE, {"Mechanism": MECHANISM}, deadline, 1)
        if hs["ErrorCode"] != Errors.NONE:
            offered = ", ".join(hs["Mechanisms"]) or "none"
            raise AdminError(hs["ErrorCode"], f"{MECHANISM} is not enabled on {self.address} "
                             f"(it offers: {offered})")
        answer = self._authenticate(first, deadline, who)
        reply = client_reply(answer["AuthBytes"] or b"")
        if reply is not None:  # the error challenge: acknowledge, read the reason
            self._authenticate(reply, deadline, who)
            raise AdminError(Errors.SASL_AUTHENTICATION_FAILED,
                             f"authentication as {who} at {self.address} failed")
        lifetime = answer.get("SessionLifetimeMs") or 0
        if lifetime > 0:
            self.session_deadline = time.monotonic() + lifetime / 1000 * 0.9

    def _authenticate(self, auth_bytes: bytes, deadline: float, who: str) -> dict[str, Any]:
        response = self.request(ApiKey.SASL_AUTHENTICATE, {"AuthBytes": auth_bytes}, deadline)
        if response["ErrorCode"] != Errors.NONE:
            detail = response.get("ErrorMessage") or "authentication failed"
            raise AdminError(
                response["ErrorCode"],
                f"authentication as {who} at {self.address} failed: {detail}",
            )
        return response

    def _remaining(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConnectionLost(self.address, "timed out")
        return left


def _api_name(api_key: ApiKey) -> str:
    return "".join(part.capitalize() for part in api_key.name.split("_"))


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host ({exc.strerror})"
    return exc.strerror or exc.__class__.__name__
