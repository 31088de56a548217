"""``kafka-delegation-token --agent``: the thin shell over :mod:`tokensvc.agent.runner`.

Checks the agent's options (before any token exists: a path that cannot be written, a
policy that cannot work), sets up logging and signals (SIGTERM and SIGINT stop the agent,
which expires its tokens unless ``--keep-on-exit``), runs the agent and turns its end into
an exit status with one line on stderr. Holds no logic of the agent's own.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading

import click

from tokensvc.agent.credentials import FORMATS
from tokensvc.agent.files import check_writable
from tokensvc.agent.runner import Agent, AgentExit, AgentOptions, host_label
from tokensvc.agent.schedule import Policy
from tokensvc.agent.state import StateError
from tokensvc.client_config import ClientConfig
from tokensvc.core.labels import LabelError, validate

EXIT_USAGE = 2


def sinks(paths: tuple[str, ...], formats: tuple[str, ...]) -> list[tuple[str, str]]:
    """Pair each --credentials-file with its --format: one format for all, or one each."""
    if not formats:
        formats = ("properties",)
    if len(formats) == 1:
        formats = formats * len(paths)
    if len(formats) != len(paths):
        raise click.UsageError(
            f"give one --format for all --credentials-file, or one each "
            f"({len(paths)} files, {len(formats)} formats)")
    return list(zip(paths, formats, strict=True))


def options_from(params: dict, config: ClientConfig, timeout_s: float) -> AgentOptions:
    """The agent's options from the command line, checked; UsageError names the problem."""
    paths = params["credentials_files"]
    if not paths:
        raise click.UsageError("--agent needs at least one --credentials-file")
    if params["once"] and not params["state_file"]:
        raise click.UsageError("--once needs --state-file (each run must find the last "
                               "run's token)")
    owners = params["owner_principals"]
    if config.oauth_token_file is not None:
        if not owners:
            raise click.UsageError("--agent with OAUTHBEARER needs --owner-principal: the "
                                   "principal the brokers' mappings give this identity")
    elif not config.username or config.token_auth:
        raise click.UsageError("--agent needs --command-config with a user's SCRAM login, "
                               "or --oauthbearer-token-file (a token cannot create tokens)")
    if len(owners) > 1:
        raise click.UsageError("--agent takes at most one --owner-principal")
    try:
        policy = Policy(renew_fraction=params["renew_fraction"],
                        overlap_ms=params["overlap_ms"], margin_ms=params["margin_ms"])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    max_life = params["max_life_time_period"]
    if max_life > 0 and policy.overlap_ms is not None and max_life <= policy.overlap_ms:
        raise click.UsageError(
            f"--max-life-time-period {max_life} is not longer than --overlap-ms "
            f"{policy.overlap_ms}: old and new tokens could never both be valid")
    labels = list(params["labels"])
    if not params["no_host_label"] and (host := host_label(socket.gethostname())) is not None:
        labels = [host, *labels]  # a --label agent/host=... given wins
    try:
        checked = validate(dict(labels))
    except LabelError as exc:
        raise click.UsageError(f"--label: {exc.message}") from None
    pairs = sinks(paths, params["formats"])
    for path in [p for p, _ in pairs] + ([params["state_file"]] if params["state_file"] else []):
        problem = check_writable(path)
        if problem is not None:
            raise click.ClickException(f"cannot write {path}: {problem}")
    return AgentOptions(
        bootstrap=params["bootstrap_server"], config=config, sinks=pairs,
        state_path=params["state_file"], owner=owners[0] if owners else None,
        renewers=tuple(params["renewer_principals"]), max_lifetime_ms=max_life, policy=policy,
        once=params["once"], keep_on_exit=params["keep_on_exit"], timeout_s=timeout_s,
        metrics_port=params["metrics_port"], labels=checked,
    )


def run_agent(params: dict, config: ClientConfig, timeout_s: float) -> None:
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    options = options_from(params, config, timeout_s)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        agent = Agent(options, stop=stop)
        code = agent.run()
    except AgentExit as exc:
        sys.exit(exc.code)  # the agent's log has said why, in one line
    except StateError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:  # the metrics port taken, ...
        raise click.ClickException(f"{exc.strerror or exc}") from None
    sys.exit(code)


FORMAT_CHOICE = click.Choice(FORMATS)
