"""The agent's credentials file, as a client's wrapper or the agent's ``--check`` reads
it back (tokensvc.agent.credentials.parse, in each of its formats).

The first byte picks the format (recognised from the content, properties, json, env).
Properties: only CredentialsError escapes; credentials read are written in every format
and read again the same (labels travel in json only; the properties reader trims every
value, as tokensvc.properties does for every file, so there the texts come back trimmed).
"""

from __future__ import annotations

from dataclasses import replace

from tokensvc.agent.credentials import FORMATS, Credentials, CredentialsError, parse, render

ERRORS = (CredentialsError,)
DICTIONARY = "json.dict"
_CHOICES = (None, *FORMATS)
_TEXTS = ("token_id", "hmac_b64", "owner", "sasl_mechanism", "security_protocol")


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    creds = parse(data[1:], _CHOICES[data[0] % len(_CHOICES)])
    for fmt in FORMATS:
        again = parse(render(creds, fmt, 1_700_000_000_000), fmt)
        expected = creds if fmt == "json" else replace(creds, labels=())
        if fmt == "properties":
            expected = replace(expected, **{name: getattr(expected, name).strip()
                                            for name in _TEXTS})
        assert again == expected, f"{fmt} round trip differs"


def seeds() -> dict[str, bytes]:
    """Files as the agent writes them (render), in each format."""
    creds = Credentials("Zl0YT9kvSLaHtdxp5pMVbA", "c2VjcmV0LWhtYWMtb2YtdGhlLXRva2Vu==",
                        "User:alice", 1_700_000_000_000, 1_700_086_400_000, 1_700_604_800_000,
                        labels=(("job", "etl"),))
    return {f"agent-{fmt}": bytes([i + 1]) + render(creds, fmt, 1_700_000_000_000)
            for i, fmt in enumerate(FORMATS)}
