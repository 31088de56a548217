"""TLS on the broker's listeners: the server context, and who a client certificate names.

Owns the ``ssl.SSLContext`` of the SSL and SASL_SSL listeners, built from the PEM
files the configuration names (``ssl.keystore.location``, ``ssl.truststore.location``,
``ssl.client.auth``), and the principal of a two-way TLS client: its certificate's
subject as Kafka's default principal builder writes it. Must not: open sockets.
"""

from __future__ import annotations

import ssl
from typing import Any

from tokensvc.core.config import BrokerConfig
from tokensvc.core.principal import KafkaPrincipal


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(config.ssl_keystore_location, password=config.ssl_key_password or None)
    mode = config.ssl_client_auth
    if mode in ("required", "requested"):
        if config.ssl_truststore_location:
            ctx.load_verify_locations(config.ssl_truststore_location)
        ctx.verify_mode = ssl.CERT_REQUIRED if mode == "required" else ssl.CERT_OPTIONAL
    return ctx


def cert_principal(ssl_object: Any) -> KafkaPrincipal | None:
    """The client certificate's subject as Kafka's default principal (two-way TLS)."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        for key, value in rdn:
            short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
                     "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}.get(key, key)
            rdns.append(f"{short}={value}")
    return KafkaPrincipal("User", ",".join(rdns)) if rdns else None
