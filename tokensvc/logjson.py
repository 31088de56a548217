"""The broker's log as JSON lines (``log.format=json``): one object per record.

Owns the shape of a record for log shippers and SIEMs: ``time`` (ISO-8601 UTC, ms),
``level``, ``logger``, ``message``, ``broker_id``, the structured fields a log call passes
in ``extra`` (:data:`STRUCTURED_FIELDS`: ``client_host``, ``client_port``, ``listener``,
...) and ``error`` (the exception with its traceback, when there is one). Nothing else.

It never carries a secret: the audit log's rule applies to every string it writes (a run
of base64 long enough to hold 64 bytes -- an HMAC, a derived key -- becomes
``[redacted: ...]``), and no field is taken from the record but those named here.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from tokensvc.audit.events import redact_text

STRUCTURED_FIELDS = ("client_host", "client_port", "listener", "principal", "token_id",
                     "api", "error_code")


class JsonLogFormatter(logging.Formatter):
    def __init__(self, broker_id: int | None = None) -> None:
        super().__init__()
        self.broker_id = broker_id

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, tz=UTC)
        line: dict[str, object] = {
            "time": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
            "broker_id": self.broker_id,
        }
        for name in STRUCTURED_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = redact_text(value) if isinstance(value, str) else value
        if record.exc_info:
            line["error"] = redact_text(self.formatException(record.exc_info))
        elif record.__dict__.get("error") is not None:
            line["error"] = redact_text(str(record.__dict__["error"]))
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str, broker_id: int, log_format: str) -> None:
    """Set up the root logger on stderr in ``log_format`` (``text`` or ``json``)."""
    import sys

    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter(broker_id))
        logging.captureWarnings(True)  # warnings would otherwise be plain text on stderr
    else:
        handler.setFormatter(logging.Formatter(
            f"%(asctime)s %(levelname)s [broker {broker_id}] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
