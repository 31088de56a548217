"""Captures the znodes a real Apache Kafka 3.9.1 broker and its tools write, as seeds of
the ZooKeeper harnesses: ``python -m tests.fuzz.capture_znodes [--keep]``.

It starts a managed ZooKeeper (:class:`zk.server.ManagedZooKeeper`) and one Kafka broker
in ZooKeeper mode (:class:`tokensvc.kafka.KafkaBroker`) on a chroot of it, with the admin
user written beforehand by :func:`zk.credential_store.bootstrap_user` (the broker logs in
to itself as that user). Kafka's own command-line tools then make the broker write:

* ``kafka-delegation-tokens.sh``: a token with no renewer (then renewed), one with a
  renewer and a max lifetime, one for another owner (``--owner-principal``);
* ``kafka-configs.sh``: a user with SCRAM-SHA-256 and -512 credentials, a user with a
  quota, a user with both, and a quota of one of that user's client ids;
* ``kafka-acls.sh``: literal ACLs (allow and deny) on a topic and a group, a prefixed
  topic ACL, an ACL on a delegation token, a cluster and user-principal ACL; then one
  entry removed.

What Kafka wrote (every znode created or changed after the admin user was written) is
read back with kazoo and written, in the input format of the harness whose parser takes
it, as ``tests/fuzz/zk/corpus/<harness>/kafka-live-<what>`` (a file whose bytes are
already in that corpus is skipped). Each corpus touched gets the note of
:data:`tests.fuzz.seeds.KAFKA_LIVE_NOTE` in its README. Each new file is then run
through its harness's ``fuzz_one``: anything but the harness's declared ``ERRORS`` is
reported (and the exit status is 1).

Everything runs in a temporary directory, removed at the end (``--keep`` keeps it, with
the broker's log); the passwords are throwaway, kept in that directory's files only,
and never printed, nor is a token's HMAC.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import secrets
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.exceptions import NoNodeError

from tests.fuzz.runner import corpus_dir, harness_module
from tests.fuzz.seeds import KAFKA_LIVE_NOTE
from tokensvc.kafka import KafkaBroker, run_tool
from tokensvc.kafka import tools as kafka_tools
from zk.client import ZkSettings, open_client
from zk.credential_store import bootstrap_user
from zk.server import ManagedZooKeeper

PREFIX = "kafka-live-"
CHROOT = "/capture"
ADMIN_USER = "admin"
BROKER_ID = 1
START_TIMEOUT_S = 300.0
TOOL_TIMEOUT_S = 180.0
# Short-lived tool JVMs: the client compiler only (unless the environment says otherwise).
TOOL_FLAGS = "-XX:TieredStopAtLevel=1"
# Where Kafka writes what the harnesses read (under the chroot).
ROOTS = ("/delegation_token", "/config", "/kafka-acl", "/kafka-acl-extended",
         "/kafka-acl-changes", "/kafka-acl-extended-changes", "/controller",
         "/controller_epoch", "/cluster", "/brokers/ids")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Session:
    """The running Kafka broker and what the tools were asked to make: ``labels`` names
    token ids and user names in file names (a token id is random; a name says its role)."""

    bootstrap: str
    command_config: Path
    hidden: list[str]
    labels: dict[str, str] = field(default_factory=dict)

    def redact(self, text: str) -> str:
        for secret in self.hidden:
            text = text.replace(secret, "***")
        return text

    def tool(self, script: str, *args: str) -> str:
        """Run ``script`` against the broker as the admin; its stdout (never printed)."""
        result = run_tool(script, ["--bootstrap-server", self.bootstrap, "--command-config",
                                   str(self.command_config), *args], timeout=TOOL_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError(f"{script} exited {result.returncode}: "
                               f"{self.redact(result.stderr)[:2000]}")
        print(f"  {script} {args[0]}: ok", flush=True)
        return result.stdout

    def password(self) -> str:
        secret = secrets.token_urlsafe(18)
        self.hidden.append(secret)
        return secret


# -- making Kafka write --------------------------------------------------------------------


def _create_token(session: Session, label: str, *args: str) -> tuple[str, str]:
    """A token made by kafka-delegation-tokens.sh: (token id, HMAC), the id labelled."""
    out = session.tool("kafka-delegation-tokens.sh", "--create", *args)
    found = re.search(r"tokenId\s*:\s*(\S+)", out)
    if found is None:
        raise RuntimeError("kafka-delegation-tokens.sh --create printed no token id")
    token_id = found.group(1)
    row = next((line for line in out.splitlines() if line.startswith(token_id)), "")
    fields = row.split()
    if len(fields) < 2:
        raise RuntimeError("kafka-delegation-tokens.sh --create printed no token row")
    session.hidden.append(fields[1])
    session.labels[token_id] = label
    return token_id, fields[1]


def make_tokens(session: Session) -> str:
    """Three tokens; the first renewed. Returns the first's id (for a token ACL)."""
    plain, hmac = _create_token(session, "plain-renewed", "--max-life-time-period", "-1")
    _create_token(session, "renewers", "--renewer-principal", "User:renewer",
                  "--renewer-principal", "User:ops team", "--max-life-time-period",
                  str(2 * 24 * 3600 * 1000))
    _create_token(session, "other-owner", "--owner-principal", "User:svc-etl",
                  "--renewer-principal", "User:ops", "--max-life-time-period", "-1")
    session.tool("kafka-delegation-tokens.sh", "--renew", "--hmac", hmac,
                 "--renew-time-period", str(3600 * 1000))
    return plain


def _configs(session: Session, *args: str) -> None:
    session.tool("kafka-configs.sh", "--alter", *args)


def make_users(session: Session) -> None:
    """A SCRAM user, a quota user, a user with both, and one of its client ids' quota."""
    session.labels.update({"alice": "scram", "carol": "quota", "dave": "scram-quota"})
    _configs(session, "--add-config",
             f"SCRAM-SHA-256=[password={session.password()}],"
             f"SCRAM-SHA-512=[password={session.password()}]",
             "--entity-type", "users", "--entity-name", "alice")
    _configs(session, "--add-config", "producer_byte_rate=1024",
             "--entity-type", "users", "--entity-name", "carol")
    _configs(session, "--add-config",
             f"SCRAM-SHA-512=[iterations=8192,password={session.password()}]",
             "--entity-type", "users", "--entity-name", "dave")
    _configs(session, "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048",
             "--entity-type", "users", "--entity-name", "dave")
    _configs(session, "--add-config", "request_percentage=50", "--entity-type", "users",
             "--entity-name", "dave", "--entity-type", "clients", "--entity-name", "app")


def make_acls(session: Session, token_id: str) -> None:
    """Literal, prefixed, token, cluster and user-principal ACLs; then one removed."""
    deny = ("--deny-principal", "User:mallory", "--deny-host", "10.0.0.1",
            "--operation", "Write", "--topic", "payments")
    session.tool("kafka-acls.sh", "--add", "--allow-principal", "User:alice",
                 "--allow-principal", "User:bob", "--operation", "Read", "--operation",
                 "Describe", "--topic", "payments", "--group", "billing")
    session.tool("kafka-acls.sh", "--add", *deny)
    session.tool("kafka-acls.sh", "--add", "--resource-pattern-type", "prefixed",
                 "--allow-principal", "User:alice", "--operation", "Read", "--operation",
                 "Write", "--topic", "pay")
    session.tool("kafka-acls.sh", "--add", "--allow-principal", "User:auditor",
                 "--operation", "Describe", "--delegation-token", token_id)
    session.tool("kafka-acls.sh", "--add", "--allow-principal", "User:ops", "--operation",
                 "CreateTokens", "--operation", "DescribeTokens", "--user-principal",
                 "User:svc-etl")
    session.tool("kafka-acls.sh", "--add", "--allow-principal", "User:ops", "--allow-host",
                 "127.0.0.1", "--operation", "Alter", "--operation", "DescribeConfigs",
                 "--cluster")
    session.tool("kafka-acls.sh", "--remove", "--force", *deny)


# -- reading what Kafka wrote --------------------------------------------------------------


def _walk(client, path: str) -> Iterator[tuple[str, bytes | None, int]]:
    """(path, data, mzxid) of ``path`` and everything under it that still exists."""
    try:
        data, stat = client.get(path)
        children = client.get_children(path)
    except NoNodeError:  # never made, or gone between two reads
        return
    yield path, data, stat.mzxid
    for child in sorted(children):
        yield from _walk(client, f"{path.rstrip('/')}/{child}")


def read_znodes(settings: ZkSettings) -> list[tuple[str, bytes | None, int]]:
    """(path, data, mzxid) of every znode under :data:`ROOTS`."""
    client = open_client(settings)
    try:
        return [z for root in ROOTS for z in _walk(client, root)]
    finally:
        client.stop()
        client.close()


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("_") or "x"


def seeds_of(znodes: dict[str, bytes], labels: dict[str, str]
             ) -> dict[str, dict[str, bytes]]:
    """Harness (``zk/<name>``) -> file name -> input, for the znodes harnesses read."""
    out: dict[str, dict[str, bytes]] = {}

    def put(target: str, what: str, data: bytes) -> None:
        names = out.setdefault(target, {})
        if data in names.values():
            return
        name, n = PREFIX + _safe(what), 2
        while name in names:
            name, n = f"{PREFIX}{_safe(what)}-{n}", n + 1
        names[name] = data

    def label(name: str) -> str:
        return labels.get(name, name)

    names_done: set[str] = set()

    def put_name(root: str, name: str, what: str) -> None:
        # One sequential name per notification root is seed enough.
        if root not in names_done:
            names_done.add(root)
            put("zk/notification_znode", f"{what}-name", b"\x02" + name.encode())

    for path, data in sorted(znodes.items()):
        parts = path.strip("/").split("/")
        if path == "/controller":
            put("zk/controller_znode", "controller", b"\x00" + data)
        elif path == "/controller_epoch":
            put("zk/controller_znode", "controller-epoch", b"\x01" + data)
        elif path == "/cluster/id":
            put("zk/controller_znode", "cluster-id", b"\x02" + data)
        elif parts[:2] == ["brokers", "ids"] and len(parts) == 3:
            put("zk/broker_znode", f"broker-{parts[2]}", b"\x00" + data)
        elif parts[:2] == ["delegation_token", "tokens"] and len(parts) == 3:
            put("zk/token_znode", f"token-{label(parts[2])}", data)
        elif parts[:2] == ["delegation_token", "token_changes"] and len(parts) == 3:
            token_id = data.decode("utf-8", "replace")
            put("zk/notification_znode", f"token-change-{label(token_id)}", b"\x00" + data)
            put_name(parts[1], parts[2], "token-change")
        elif parts[:2] == ["config", "users"] and len(parts) in (3, 5):
            what = f"user-{label(parts[2])}" + (f"-client-{parts[4]}" if len(parts) == 5 else "")
            put("zk/credential_znode", what, data)
        elif parts[:2] == ["config", "changes"] and len(parts) == 3:
            entity = re.search(rb'"entity_path"\s*:\s*"users/([^"/]*)((?:/clients/[^"]*)?)"', data)
            what = (f"user-{label(entity.group(1).decode())}"
                    f"{'-client' if entity.group(2) else ''}" if entity else "other")
            put("zk/notification_znode", f"config-change-{what}", b"\x01" + data)
            put_name(parts[1], parts[2], "config-change")
        elif parts[0] == "kafka-acl" and len(parts) == 3:
            put("zk/acl_znode", f"acls-{parts[1]}-{label(parts[2])}", b"\x00" + data)
        elif parts[0] == "kafka-acl-extended" and len(parts) == 4:
            put("zk/acl_znode", f"acls-{parts[1]}-{parts[2]}-{label(parts[3])}", b"\x00" + data)
        elif parts[0] == "kafka-acl-changes" and len(parts) == 2:
            kind, _, name = data.decode("utf-8", "replace").partition(":")
            put("zk/acl_znode", f"literal-change-{kind}-{label(name)}", b"\x01" + data)
            put_name(parts[0], parts[1], "acl-change")
        elif parts[0] == "kafka-acl-extended-changes" and len(parts) == 2:
            found = re.search(rb'"name"\s*:\s*"([^"]*)"', data)
            name = label(found.group(1).decode()) if found else "x"
            put("zk/acl_znode", f"extended-change-{name}", b"\x02" + data)
        else:
            print(f"  not a seed: {path} ({len(data)} bytes)", flush=True)
    return out


# -- the corpora ---------------------------------------------------------------------------


def write_seeds(seeds: dict[str, dict[str, bytes]]) -> dict[str, list[Path]]:
    """Write the new files (none whose bytes the corpus holds already) and the README
    note; returns the files written per harness."""
    written: dict[str, list[Path]] = {}
    for target, files in sorted(seeds.items()):
        directory = corpus_dir(target)
        # A file of the same name is replaced (a capture again); any other is kept.
        have = {p.read_bytes() for p in directory.iterdir()
                if p.is_file() and p.name != "README.md" and p.name not in files}
        for name, data in sorted(files.items()):
            path = directory / name
            if data in have or path.exists() and path.read_bytes() == data:
                continue
            path.write_bytes(data)
            have.add(data)
            written.setdefault(target, []).append(path)
        if any(directory.glob(f"{PREFIX}*")):
            readme = directory / "README.md"
            text = readme.read_text() if readme.exists() else ""
            if KAFKA_LIVE_NOTE not in text:
                readme.write_text(text.rstrip("\n") + f"\n\n{KAFKA_LIVE_NOTE}\n")
    return written


def check_seeds(written: dict[str, list[Path]]) -> list[str]:
    """Run each file through its harness; the failures (not a declared error), reported."""
    findings = []
    for target, paths in sorted(written.items()):
        harness = importlib.import_module(harness_module(target))
        fuzz_one: Callable[[bytes], None] = harness.fuzz_one
        for path in paths:
            try:
                fuzz_one(path.read_bytes())
                outcome = "ok"
            except harness.ERRORS as exc:
                outcome = f"refused ({type(exc).__name__}: {exc})"
            except Exception:  # noqa: BLE001 - anything else is a finding, reported whole
                findings.append(f"{path}: {path.read_bytes()!r}\n{traceback.format_exc()}")
                outcome = "FINDING"
            print(f"  {target} {path.name}: {outcome}", flush=True)
    return findings


# -- the run -------------------------------------------------------------------------------


def capture(directory: Path, start_timeout: float) -> tuple[dict[str, bytes], dict[str, str]]:
    """Start ZooKeeper and Kafka in ``directory``, make Kafka write, read what it wrote."""
    os.environ.setdefault(kafka_tools.JVMFLAGS_ENV, TOOL_FLAGS)
    server = ManagedZooKeeper(directory / "zookeeper", die_with_parent=True)
    broker: KafkaBroker | None = None
    try:
        server.start()
        settings = ZkSettings(server.connect + CHROOT)
        admin_password = secrets.token_urlsafe(18)
        bootstrap_user(settings, ADMIN_USER, admin_password)
        before = {path: mzxid for path, _, mzxid in read_znodes(settings)}
        broker = KafkaBroker(directory / "kafka", BROKER_ID, settings,
                             admin=(ADMIN_USER, admin_password),
                             secret_key=secrets.token_urlsafe(32))
        print(f"starting Kafka broker {BROKER_ID} (ZooKeeper {settings.connect})", flush=True)
        broker.start(timeout=start_timeout)
        config = directory / "admin.properties"
        config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="{ADMIN_USER}" password="{admin_password}";\n')
        config.chmod(0o600)
        session = Session(broker.bootstrap, config, [admin_password])
        token_id = make_tokens(session)
        make_users(session)
        make_acls(session, token_id)
        # What Kafka wrote: created or changed since the admin user was written.
        written = {path: data for path, data, mzxid in read_znodes(settings)
                   if data and before.get(path) != mzxid}
        return written, session.labels
    except Exception:
        if broker is not None:
            print(f"the broker's log: {broker.log_path}", file=sys.stderr)
        raise
    finally:
        if broker is not None:
            broker.stop()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.capture_znodes",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (logs, data)")
    parser.add_argument("--start-timeout", type=float, default=START_TIMEOUT_S,
                        help=f"seconds the Kafka broker may take to start ({START_TIMEOUT_S:.0f})")
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="capture-znodes-"))
    ok = False
    try:
        znodes, labels = capture(directory, args.start_timeout)
        ok = True
    finally:
        if args.keep or not ok:
            print(f"kept {directory}", file=sys.stderr)
        else:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"read {len(znodes)} znodes Kafka wrote", flush=True)
    written = write_seeds(seeds_of(znodes, labels))
    for target, paths in sorted(written.items()):
        print(f"{target}: {len(paths)} new files in {corpus_dir(target)}", flush=True)
    findings = check_seeds(written)
    for finding in findings:
        print(f"finding: {finding}", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
