"""Kafka clients that others wrote, each logging in with a delegation token to write and
read a topic: Apache kafka-clients (Java, ``tokenauth=true`` in its JAAS line), franz-go
(Go, ``scram.Auth{IsToken: true}``), kafka-python (with
:mod:`tokensvc.kafka_python_token`) and aiokafka (with :mod:`tokensvc.aiokafka_token`).

Every ``*_produce_consume`` function has one shape: it writes ``count`` distinct values
to ``topic``, reads the topic back from the beginning (assigned partitions, no consumer
group), and returns a :class:`ProduceConsumeResult` with what it wrote and what it read,
for the test to compare. A login the broker refuses raises :class:`LoginRefused` with the
client's own error text; any other failure raises :class:`ClientFailed`.

:func:`java_session` keeps a Java consumer's session open and reports when the broker
ends it (for re-authentication tests with ``connections.max.reauth.ms``).

The Java program (``tests/java/KafkaTokenClient.java``) is compiled against
kafka-clients from Maven Central, the Go one (``tests/go/kafkatoken``) is built from its
module; both once, cached by a hash of their sources (:mod:`tests.support.build_cache`).
The HMAC reaches them in the environment, never on a command line.

Owns running the clients; it must not start brokers or make tokens.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, SaslAuthenticationFailedError

from tests.support.build_cache import go_program, java_program
from tokensvc.jvm.java import find_java
from tokensvc.kafka import kafka_clients_jars

KAFKA_CLIENTS_VERSION = "3.9.1"
ROOT = Path(__file__).resolve().parents[2]
JAVA_SOURCE = ROOT / "tests" / "java" / "KafkaTokenClient.java"
GO_MODULE = ROOT / "tests" / "go" / "kafkatoken"
# JVM flags for a short-lived client: C1 only and the serial collector start faster.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx128m")
REFUSED_EXIT = 3  # the programs' exit status for an authentication failure
DEFAULT_TIMEOUT_S = 60.0


class LoginRefused(Exception):
    """The broker refused the client's login (SASL authentication failed)."""

    def __init__(self, client: str, message: str) -> None:
        super().__init__(f"{client}: login refused: {message}")
        self.client = client
        self.message = message


class ClientFailed(Exception):
    """The client failed otherwise (timeout, broker error, bad arguments)."""


@dataclass(frozen=True)
class ProduceConsumeResult:
    client: str
    sent: list[str]
    received: list[str]
    seconds: float


def _values(client: str, count: int) -> tuple[str, list[str]]:
    prefix = f"{client}-{uuid.uuid4().hex[:12]}"
    return prefix, [f"{prefix}-{i}" for i in range(count)]


# -- programs run as processes -----------------------------------------------------------


def java_classpath() -> str:
    """KafkaTokenClient compiled against kafka-clients (built once, then cached)."""
    return java_program(JAVA_SOURCE, kafka_clients_jars(KAFKA_CLIENTS_VERSION))


def franz_go_binary() -> Path:
    """The franz-go program (built once, then cached)."""
    return go_program(GO_MODULE)


def _token_env(token_id: str, hmac_b64: str) -> dict[str, str]:
    return {**os.environ, "TOKEN_ID": token_id, "TOKEN_HMAC": hmac_b64}


def _run_program(client: str, argv: list[str], env: dict[str, str], count: int,
                 timeout_s: float) -> ProduceConsumeResult:
    started = time.monotonic()
    try:
        ran = subprocess.run(argv, env=env, capture_output=True, text=True,
                             timeout=timeout_s + 30, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ClientFailed(f"{client} did not finish within {timeout_s + 30:.0f}s") from exc
    seconds = time.monotonic() - started
    sent: list[str] = []
    received: list[str] = []
    for line in ran.stdout.splitlines():
        event, _, detail = line.partition("\t")
        if event == "sent":
            sent.append(detail)
        elif event == "received":
            received.append(detail)
        elif event == "login-refused" and ran.returncode == REFUSED_EXIT:
            raise LoginRefused(client, detail)
    if ran.returncode != 0:
        raise ClientFailed(f"{client} exited {ran.returncode}:\n{ran.stdout[-3000:]}\n"
                           f"{ran.stderr[-3000:]}")
    if len(received) < count:
        raise ClientFailed(f"{client} read {len(received)} of {count} values in time")
    return ProduceConsumeResult(client, sent, received, seconds)


def java_produce_consume(bootstrap: str, token_id: str, hmac_b64: str, topic: str, count: int,
                         *, mechanism: str = "SCRAM-SHA-512",
                         timeout_s: float = DEFAULT_TIMEOUT_S) -> ProduceConsumeResult:
    """kafka-clients' KafkaProducer and KafkaConsumer with ``tokenauth=true``."""
    prefix, _ = _values("java", count)
    argv = [find_java(), *JVM_FLAGS, "-cp", java_classpath(), "KafkaTokenClient",
            "produce-consume", bootstrap, mechanism, topic, str(count), prefix,
            str(int(timeout_s * 1000))]
    return _run_program("java", argv, _token_env(token_id, hmac_b64), count, timeout_s)


def franz_go_produce_consume(bootstrap: str, token_id: str, hmac_b64: str, topic: str,
                             count: int, *, mechanism: str = "SCRAM-SHA-512",
                             timeout_s: float = DEFAULT_TIMEOUT_S) -> ProduceConsumeResult:
    """franz-go's kgo client with ``scram.Auth{IsToken: true}``."""
    prefix, _ = _values("franz-go", count)
    argv = [str(franz_go_binary()), "produce-consume", bootstrap, mechanism, topic, str(count),
            prefix, str(int(timeout_s * 1000))]
    return _run_program("franz-go", argv, _token_env(token_id, hmac_b64), count, timeout_s)


# -- Python clients, in this process ------------------------------------------------------


def kafka_python_produce_consume(bootstrap: str, token_id: str, hmac_b64: str, topic: str,
                                 count: int, *, mechanism: str = "SCRAM-SHA-512",
                                 timeout_s: float = DEFAULT_TIMEOUT_S) -> ProduceConsumeResult:
    """kafka-python's KafkaProducer and KafkaConsumer with tokensvc.kafka_python_token.

    A Kafka broker that refuses a SCRAM login sends its error and closes the connection at
    once; kafka-python 3.0 drops bytes that arrive with the close, so it never sees the
    error and reports only that it could not bootstrap. A refusal is therefore told from
    kafka-python's own log: every connection lost while its SaslAuthenticate request was
    unanswered, and none authenticated."""
    from tokensvc.kafka_python_token import token_login_config

    started = time.monotonic()
    _, values = _values("kafka-python", count)
    login = {"bootstrap_servers": bootstrap.split(","), "security_protocol": "SASL_PLAINTEXT",
             "client_id": "kafka-token-client",
             **token_login_config(token_id, hmac_b64, mechanism)}
    timeout_ms = int(timeout_s * 1000)
    with _client_log("kafka.net.connection", logging.DEBUG) as log:
        try:
            producer = KafkaProducer(acks="all", max_block_ms=timeout_ms,
                                     bootstrap_timeout_ms=timeout_ms, **login)
            try:
                for value in values:
                    producer.send(topic, value.encode()).get(timeout=timeout_s)
            finally:
                producer.close(timeout=5)
            consumer = KafkaConsumer(group_id=None, enable_auto_commit=False,
                                     bootstrap_timeout_ms=timeout_ms, **login)
            try:
                received = _kafka_python_read(consumer, topic, values, started + timeout_s)
            finally:
                consumer.close()
        except SaslAuthenticationFailedError as exc:
            raise LoginRefused("kafka-python", str(exc)) from exc
        except KafkaError as exc:
            if _kafka_python_sasl_cut(log):
                raise LoginRefused("kafka-python", f"{exc}: the broker closed each connection "
                                   "in SASL authentication, its SaslAuthenticate unanswered "
                                   f"(kafka-python's last word: {log[-1]})") from exc
            raise ClientFailed(f"kafka-python: {exc!r}") from exc
    return ProduceConsumeResult("kafka-python", values, received, time.monotonic() - started)


def _kafka_python_sasl_cut(log: list[str]) -> bool:
    """kafka-python's connection log says: it never authenticated, and each connection it
    lost had a SaslAuthenticate request unanswered."""
    pending, cut = False, 0
    for message in log:
        if "Authenticated with" in message:
            return False
        if "Request" in message and "SaslAuthenticateRequest" in message:
            pending = True
        elif "Received response" in message:
            pending = False
        elif "Connection lost" in message:
            if not pending:
                return False
            cut, pending = cut + 1, False
    return cut > 0


def _kafka_python_read(consumer: KafkaConsumer, topic: str, values: list[str],
                       deadline: float) -> list[str]:
    partitions = None
    while not partitions and time.monotonic() < deadline:
        partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        raise ClientFailed(f"kafka-python: no partitions of {topic} in the metadata")
    assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    wanted, received = set(values), []
    while len(received) < len(values) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            received += [r.value.decode() for r in records if r.value.decode() in wanted]
    if len(received) < len(values):
        raise ClientFailed(f"kafka-python read {len(received)} of {len(values)} values in time")
    return received


def aiokafka_produce_consume(bootstrap: str, token_id: str, hmac_b64: str, topic: str,
                             count: int, *, mechanism: str = "SCRAM-SHA-512",
                             timeout_s: float = DEFAULT_TIMEOUT_S) -> ProduceConsumeResult:
    """aiokafka's AIOKafkaProducer and AIOKafkaConsumer with tokensvc.aiokafka_token."""
    from aiokafka.errors import KafkaError as AioKafkaError
    from aiokafka.errors import SaslAuthenticationFailed

    started = time.monotonic()
    _, values = _values("aiokafka", count)
    with _client_log("aiokafka", logging.ERROR) as log:
        try:
            received = asyncio.run(asyncio.wait_for(
                _aiokafka_round(bootstrap, token_id, hmac_b64, topic, values, mechanism),
                timeout_s))
        except SaslAuthenticationFailed as exc:
            raise LoginRefused("aiokafka", str(exc)) from exc
        except AioKafkaError as exc:
            # aiokafka logs why each bootstrap connection failed, then raises only
            # KafkaConnectionError("Unable to bootstrap").
            refusals = [m for m in log if "SaslAuthenticationFailed" in m]
            if refusals:
                raise LoginRefused("aiokafka", refusals[-1]) from exc
            raise ClientFailed(f"aiokafka: {exc!r}") from exc
        except TimeoutError as exc:
            raise ClientFailed(f"aiokafka did not finish within {timeout_s:.0f}s") from exc
    return ProduceConsumeResult("aiokafka", values, received, time.monotonic() - started)


async def _aiokafka_round(bootstrap: str, token_id: str, hmac_b64: str, topic: str,
                          values: list[str], mechanism: str) -> list[str]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    from tokensvc.aiokafka_token import token_login_config

    login = {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT",
             "client_id": "kafka-token-client",
             **token_login_config(token_id, hmac_b64, mechanism)}
    producer = AIOKafkaProducer(acks="all", **login)
    try:
        await producer.start()
        for value in values:
            await producer.send_and_wait(topic, value.encode())
        partitions = await producer.partitions_for(topic)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **login)
    try:
        await consumer.start()
        assigned = [AioTopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        wanted, received = set(values), []
        while len(received) < len(values):
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                received += [r.value.decode() for r in records if r.value.decode() in wanted]
        return received
    finally:
        await consumer.stop()


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


@contextmanager
def _client_log(name: str, level: int) -> Iterator[list[str]]:
    """The messages a client library logs under ``name`` at ``level`` or above meanwhile."""
    messages: list[str] = []
    logger = logging.getLogger(name)
    handler, previous = _Collect(messages), logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


# -- a Java session held open -----------------------------------------------------------


@dataclass(frozen=True)
class SessionEnd:
    """How a held session ended: ``refused`` when the broker ended it (re-authentication
    or a new login refused), with kafka-clients' message; else it outlived ``max_s``."""

    refused: bool
    at: float  # time.time() of the end, as the client saw it
    message: str


class JavaSession:
    """A kafka-clients consumer that logged in with a token and keeps polling."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._events: queue.Queue[tuple[str, str]] = queue.Queue()
        self._output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._output.append(line)
            event, _, detail = line.rstrip("\n").partition("\t")
            self._events.put((event, detail))
        self._events.put(("exit", ""))

    def _next(self, timeout_s: float) -> tuple[str, str]:
        try:
            return self._events.get(timeout=timeout_s)
        except queue.Empty:
            raise ClientFailed(f"java session: nothing within {timeout_s:.0f}s; output so far:"
                               f" {''.join(self._output)[-2000:]}") from None

    def wait_open(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
        """The time.time() the session was open; LoginRefused when the login was refused."""
        event, detail = self._next(timeout_s)
        if event == "session-open":
            return int(detail) / 1000
        if event == "login-refused":
            raise LoginRefused("java", detail)
        raise ClientFailed(f"java session: {event} {detail} {''.join(self._output)[-2000:]}")

    def wait_end(self, timeout_s: float) -> SessionEnd:
        event, detail = self._next(timeout_s)
        if event == "session-ended":
            at, _, message = detail.partition("\t")
            return SessionEnd(True, int(at) / 1000, message)
        if event == "session-alive":
            return SessionEnd(False, int(detail) / 1000, "")
        raise ClientFailed(f"java session: {event} {detail} {''.join(self._output)[-2000:]}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        assert self.process.stdout is not None
        self.process.stdout.close()


def java_session(bootstrap: str, token_id: str, hmac_b64: str, topic: str, *,
                 mechanism: str = "SCRAM-SHA-512", max_s: float = 120.0) -> JavaSession:
    """Start a kafka-clients consumer of ``topic`` that logs in with the token and polls
    until the broker ends its session or ``max_s`` passed. Close it when done."""
    argv = [find_java(), *JVM_FLAGS, "-cp", java_classpath(), "KafkaTokenClient", "session",
            bootstrap, mechanism, topic, str(int(max_s * 1000))]
    process = subprocess.Popen(argv, env=_token_env(token_id, hmac_b64), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL)
    return JavaSession(process)


CLIENTS = {
    "java": java_produce_consume,
    "franz-go": franz_go_produce_consume,
    "kafka-python": kafka_python_produce_consume,
    "aiokafka": aiokafka_produce_consume,
}
