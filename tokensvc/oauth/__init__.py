"""SASL/OAUTHBEARER logins (KIP-768): JWTs checked against an issuer's JWKS, and the
declared mappings from a workload's identity to a Kafka principal and its token policy.

Rooms inside:

- :mod:`~tokensvc.oauth.refusals`: why a JWT is refused (one table: reason -> message);
- :mod:`~tokensvc.oauth.validator`: the JWT checks (pure: the key and the time come in);
- :mod:`~tokensvc.oauth.jwks`: where keys come from (a JWKS file, an HTTPS endpoint);
- :mod:`~tokensvc.oauth.mappings`: the mappings file and the token policy of a mapping;
- :mod:`~tokensvc.oauth.exchange`: the RFC 7628 message exchange (pure, both sides);
- :mod:`~tokensvc.oauth.authenticator`: the broker's edge that puts them together.
"""
