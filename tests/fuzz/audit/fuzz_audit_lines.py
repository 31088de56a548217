"""Audit lines as tokensvc's Python readers take them: the live watch's label memory
(tokensvc.audit.watch.TokenLabels, fed the lines of each spool chunk that carry labels)
and the token export the report reads (tokensvc.audit.token_export.read_tokens).

The input is a chunk: lines of bytes. Properties: the label memory never raises (an
unreadable line is skipped) and keeps only text labels, at most its bound; the export
reader raises only TokenExportError, and a token read is written and read again the
same. The ingest's own parse of a line is Spark's JSON reader (tokensvc.audit.lines),
a JVM this coverage cannot see: ``tests/fuzz/audit/corpus/audit_lines`` is its input too
(docs/security.md).
"""

from __future__ import annotations

from pathlib import Path

from tokensvc.audit.token_export import TokenExportError, decode_token, encode_token, read_tokens
from tokensvc.audit.watch import TokenLabels

ERRORS = (TokenExportError,)
DICTIONARY = "json.dict"
_MARK = b'"labels"'


def fuzz_one(data: bytes) -> None:
    memory = TokenLabels(Path("/nonexistent"), memory=4)
    for line in data.splitlines():
        if _MARK in line:
            memory.learn(line)
    for labels in memory._labels.values():
        assert all(type(k) is str and type(v) is str for k, v in labels.items())
    assert len(memory._labels) <= 4
    text = data.decode("utf-8", "replace").splitlines()
    for token in read_tokens(text):
        assert decode_token(encode_token(token)) == token, "export round trip differs"


def seeds() -> dict[str, bytes]:
    """Lines as a broker's audit writer emits them (docs/audit.md) and a token export
    as ``tokensvc tokens export`` writes it."""
    create = (b'{"schema":1,"ts":1700000000000,"broker_id":1,"event_id":"1-1","type":"token",'
              b'"action":"create","outcome":"success","token_id":"Zl0YT9kvSLaHtdxp5pMVbA",'
              b'"principal":"User:alice","owner":"User:alice","renewers":["User:bob"],'
              b'"expiry_ms":1700086400000,"max_ms":1700604800000,"labels":{"job":"etl"}}')
    login = (b'{"schema":1,"ts":1700000000001,"broker_id":1,"event_id":"1-2","type":'
             b'"authentication","outcome":"success","mechanism":"SCRAM-SHA-256","kind":"token",'
             b'"token_id":"Zl0YT9kvSLaHtdxp5pMVbA","principal":"User:alice",'
             b'"client_host":"127.0.0.1","client_port":50000,"listener":"SASL_PLAINTEXT"}')
    export = (b'{"expiry_ms":1704088800000,"issue_ms":1704067200000,"labels":{"job":"etl"},'
              b'"max_ms":1704153600000,"owner":"User:alice","renewers":["User:bob"],'
              b'"requester":"User:alice","token_id":"Zl0YT9kvSLaHtdxp5pMVbA"}')
    return {"audit-chunk": create + b"\n" + login + b"\n", "token-export": export + b"\n"}
