"""`kafka-delegation-token`: create, renew, expire and describe delegation tokens.

Takes the options of Kafka's ``kafka-delegation-tokens.sh`` (plus ``--output json`` and
``--timeout``) and is a thin shell over :class:`tokensvc.admin.AdminClient`: parse and
check options, make one admin call, render the answer. Usage mistakes exit 2 with
click's message; broker and connection failures exit 1 with one line on stderr; no
traceback ever reaches the user. Works against tokensvc and Apache Kafka brokers alike.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime

import click
from click.core import ParameterSource

from cli import agent_cmd
from cli.common import command_config, run_as_click_command, validate_bootstrap
from tokensvc.admin import (
    AdminClient,
    AdminError,
    Propagation,
    TokenDescription,
    expiry_visible,
    token_logs_in,
    token_refused,
    tokens_absent,
)
from tokensvc.core.errors import Errors
from tokensvc.core.labels import format_labels, parse_label
from tokensvc.core.principal import KafkaPrincipal

_ACTIONS = ("create", "renew", "expire", "describe", "agent")
# Parameter -> (its option, the actions it belongs to); options not listed suit every action.
_OPTION_ACTIONS = {
    "renewer_principals": ("--renewer-principal", ("create", "agent")),
    "owner_principals": ("--owner-principal", ("create", "describe", "agent", "expire")),
    "token_ids": ("--token-id", ("expire",)),
    "labels": ("--label", ("create", "describe", "expire", "agent")),
    "dry_run": ("--dry-run", ("expire",)),
    "max_life_time_period": ("--max-life-time-period", ("create", "agent")),
    "hmac": ("--hmac", ("renew", "expire")),
    "renew_time_period": ("--renew-time-period", ("renew",)),
    "expiry_time_period": ("--expiry-time-period", ("expire",)),
    "wait_all_brokers": ("--wait-all-brokers", ("create", "renew", "expire")),
    **{name: (option, ("agent",)) for name, option in (
        ("credentials_files", "--credentials-file"), ("formats", "--format"),
        ("state_file", "--state-file"), ("renew_fraction", "--renew-fraction"),
        ("overlap_ms", "--overlap-ms"), ("margin_ms", "--margin-ms"), ("once", "--once"),
        ("keep_on_exit", "--keep-on-exit"), ("metrics_port", "--metrics-port"),
        ("no_host_label", "--no-host-label"))},
}
_COLUMNS = ("TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE", "EXPIRYDATE",
            "MAXDATE")


def _principals(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[KafkaPrincipal, ...]:
    principals = []
    for value in values:
        try:
            principals.append(KafkaPrincipal.parse(value))
        except ValueError:
            raise click.BadParameter(
                f"{value!r} is not a principal: use Type:name, e.g. User:alice"
            ) from None
    return tuple(principals)


def _labels(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    """``--label key=value`` as pairs; the rules (tokensvc.core.labels) are the broker's to
    check, so its refusal names the label exactly as for any other client."""
    pairs = []
    for value in values:
        try:
            pairs.append(parse_label(value))
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return tuple(pairs)


def _hmac(ctx: click.Context, param: click.Parameter, value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise click.BadParameter(
            "not a base64 HMAC (use the HMAC printed by --create or --describe)"
        ) from None


def format_date(epoch_ms: int) -> str:
    """A timestamp for people: UTC, to the second (``2025-01-31T09:30:00Z``)."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def token_table(tokens: list[TokenDescription]) -> str:
    """Tokens as Kafka's tool shows them: one row per token under a header row, plus a
    LABELS column when a token shown has labels (``k=v,k2=v2``; a value with other than
    ``[A-Za-z0-9._/:@+-]`` is JSON-quoted, so no label can forge a column or a line)."""
    labelled = any(t.labels for t in tokens)
    columns = (*_COLUMNS, "LABELS") if labelled else _COLUMNS
    rows = [columns] + [
        (
            t.token_id,
            t.hmac_b64,
            str(t.owner),
            str(t.requester),
            "[" + ", ".join(str(r) for r in t.renewers) + "]",
            format_date(t.issue_ms),
            format_date(t.expiry_ms),
            format_date(t.max_ms),
            *((format_labels(t.labels),) if labelled else ()),
        )
        for t in tokens
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _check_usage(ctx: click.Context, chosen: list[str], params: dict) -> str:
    if len(chosen) != 1:
        given = ", ".join(f"--{a}" for a in chosen) if chosen else "none"
        raise click.UsageError(
            f"give exactly one of --create, --renew, --expire, --describe, --agent "
            f"(given: {given})"
        )
    action = chosen[0]
    for name, (option, actions) in _OPTION_ACTIONS.items():
        if action not in actions and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            raise click.UsageError(f"{option} cannot be used with --{action}")
    revoking = action == "expire" and (params["owner_principals"] or params["token_ids"]
                                       or params["labels"])
    if revoking:
        if params["hmac"] is not None:
            raise click.UsageError(
                "--expire takes --hmac, or --owner-principal/--label/--token-id")
        if (params["owner_principals"] or params["labels"]) and params["token_ids"]:
            raise click.UsageError(
                "--expire takes --owner-principal and/or --label, or --token-id, not both")
        if len(params["owner_principals"]) > 1:
            raise click.UsageError("--expire takes one --owner-principal")
    elif action in ("renew", "expire") and params["hmac"] is None:
        raise click.UsageError(f"--{action} needs --hmac" + (
            " (or --owner-principal / --label / --token-id)" if action == "expire" else ""))
    if params["dry_run"] and not revoking:
        raise click.UsageError(
            "--dry-run goes with --expire --owner-principal/--label/--token-id")
    if action == "create" and len(params["owner_principals"]) > 1:
        raise click.UsageError("--create takes at most one --owner-principal")
    return action


@click.command(
    "kafka-delegation-token", context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--bootstrap-server", required=True, callback=validate_bootstrap,
              metavar="HOST:PORT[,HOST:PORT...]",
              help="Brokers to connect to (tried in turn).")
@click.option("--command-config", type=click.Path(dir_okay=False), default=None,
              help="Kafka client properties: security.protocol, sasl.mechanism, "
                   "sasl.jaas.config, ssl.truststore.*.")
@click.option("--oauthbearer-token-file", type=click.Path(dir_okay=False), default=None,
              metavar="PATH",
              help="Log in with OAUTHBEARER using the JWT in this file, read again at every "
                   "login (a Kubernetes projected service-account token); replaces the SASL "
                   "login of --command-config, whose security.protocol must be SASL_*.")
@click.option("--create", is_flag=True, help="Create a token.")
@click.option("--renew", is_flag=True, help="Renew a token (needs --hmac).")
@click.option("--expire", is_flag=True, help="Expire a token (needs --hmac).")
@click.option("--describe", is_flag=True, help="Describe tokens.")
@click.option("--agent", is_flag=True,
              help="Run as a token agent: keep one live token for a job (create, renew, "
                   "replace before the max lifetime) and write it to --credentials-file "
                   "(docs/agent.md).")
@click.option("--renewer-principal", "renewer_principals", multiple=True, callback=_principals,
              metavar="Type:name", help="A renewer of the new token (repeatable).")
@click.option("--owner-principal", "owner_principals", multiple=True, callback=_principals,
              metavar="Type:name",
              help="create: the token's owner (default: you); describe: owners to list "
                   "(repeatable).")
@click.option("--max-life-time-period", type=int, default=-1, show_default=True, metavar="MS",
              help="Maximum lifetime of the new token; -1: the server's maximum.")
@click.option("--hmac", callback=_hmac, default=None, metavar="BASE64",
              help="The token's HMAC (for --renew and --expire).")
@click.option("--token-id", "token_ids", multiple=True, metavar="ID",
              help="expire: revoke this token by its id, no HMAC needed (repeatable; "
                   "tokensvc only). --expire --owner-principal P revokes every token of P.")
@click.option("--label", "labels", multiple=True, callback=_labels, metavar="KEY=VALUE",
              help="create: a label of the new token (repeatable; tokensvc only); describe: "
                   "show only tokens with this label; expire: revoke every token with this "
                   "label (several: all must match; with --owner-principal: that owner's "
                   "only); agent: a label of every token it creates.")
@click.option("--dry-run", is_flag=True,
              help="expire by owner, label or id: list what would be revoked, change nothing.")
@click.option("--renew-time-period", type=int, default=-1, show_default=True, metavar="MS",
              help="Renew for this long; -1: the server's default.")
@click.option("--expiry-time-period", type=int, default=-1, show_default=True, metavar="MS",
              help="Expire after this long; negative: now.")
@click.option("--wait-all-brokers", is_flag=True,
              help="create/renew/expire: return only when every live broker serves the change "
                   "(the token logs in, the new expiry is visible, or the token is refused); "
                   "prints how long that took, fails naming a broker that lags past --timeout.")
@click.option("--credentials-file", "credentials_files", multiple=True, metavar="PATH",
              help="agent: where to write each new token (repeatable), atomically, mode 0600.")
@click.option("--format", "formats", multiple=True, type=agent_cmd.FORMAT_CHOICE,
              help="agent: properties (default), json or env; once for all files or once "
                   "per --credentials-file.")
@click.option("--state-file", type=click.Path(dir_okay=False), default=None,
              help="agent: where it records its tokens, so that a restart resumes.")
@click.option("--renew-fraction", type=float, default=0.75, show_default=True,
              help="agent: renew once this fraction of the renewal period has passed "
                   "(with a little jitter).")
@click.option("--overlap-ms", type=click.IntRange(min=0), default=None, metavar="MS",
              help="agent: how long old and new token are both valid after a replacement "
                   "(default: a quarter of the renewal period, at most 10 minutes).")
@click.option("--margin-ms", type=click.IntRange(min=0), default=None, metavar="MS",
              help="agent: extra time before the max lifetime for creating the successor "
                   "(default: a tenth of the renewal period, at most 5 minutes).")
@click.option("--once", is_flag=True,
              help="agent: create, renew or replace as needed, write the files, exit "
                   "(for cron and CI; needs --state-file).")
@click.option("--keep-on-exit", is_flag=True,
              help="agent: on SIGTERM keep the tokens (default: expire them).")
@click.option("--no-host-label", is_flag=True,
              help="agent: do not add the label agent/host=<this host's name> to its tokens.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="agent: serve Prometheus metrics on this port.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text for people, json for scripts.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Give up after this long (default: request.timeout.ms, 30s).")
@click.pass_context
def delegation_token(ctx: click.Context, **params: object) -> None:
    """Create, renew, expire and describe delegation tokens."""
    action = _check_usage(ctx, [a for a in _ACTIONS if params[a]], params)
    run_as_click_command(_run, action, params)


def _run(action: str, params: dict) -> None:
    config = command_config(params["command_config"], params["oauthbearer_token_file"])
    timeout = params["timeout"] or config.request_timeout_ms / 1000
    if action == "agent":
        agent_cmd.run_agent(params, config, timeout)
        return
    as_json = params["output"] == "json"
    wait = bool(params["wait_all_brokers"])
    with AdminClient(params["bootstrap_server"], config, timeout_s=timeout) as admin:
        if action == "create":
            owners = params["owner_principals"]
            token = admin.create_token(
                renewers=params["renewer_principals"],
                owner=owners[0] if owners else None,
                max_lifetime_ms=params["max_life_time_period"],
                labels=params["labels"],
            )
            served = admin.wait_all_brokers(token_logs_in(token)) if wait else None
            if as_json:
                click.echo(json.dumps({**token.to_json(), **_served_json(served)}, indent=2))
            else:
                click.echo(f"Created delegation token with tokenId : {token.token_id}\n")
                click.echo(token_table([token]))
                _echo_served(served)
        elif action == "describe":
            owners = params["owner_principals"]
            tokens = admin.describe_tokens(owners=list(owners) if owners else None,
                                           labels=params["labels"])
            if as_json:
                click.echo(json.dumps({"tokens": [t.to_json() for t in tokens]}, indent=2))
            else:
                click.echo(f"Total number of tokens : {len(tokens)}\n")
                click.echo(token_table(tokens))
        elif action == "expire" and (params["owner_principals"] or params["token_ids"]
                                     or params["labels"]):
            _revoke(admin, params, wait, as_json)
        else:
            # Which token this is must be known before an expire removes it.
            token = _token_of(admin, params["hmac"]) if wait else None
            if action == "renew":
                expiry = admin.renew_token(params["hmac"], params["renew_time_period"])
            else:
                expiry = admin.expire_token(params["hmac"], params["expiry_time_period"])
            served = None
            if token is not None:
                removed = action == "expire" and params["expiry_time_period"] < 0
                check = token_refused(token) if removed else expiry_visible(token.token_id, expiry)
                served = admin.wait_all_brokers(check)
            if as_json:
                click.echo(json.dumps(
                    {"operation": action, "expiry_timestamp_ms": expiry,
                     "expiry_date": format_date(expiry), **_served_json(served)},
                    indent=2,
                ))
            else:
                click.echo(f"Completed {action} operation. New expiry date : {format_date(expiry)}")
                _echo_served(served)


def _revoke(admin: AdminClient, params: dict, wait: bool, as_json: bool) -> None:
    """--expire --owner-principal P / --label K=V / --token-id ID: revoke without HMACs.
    Exits 1 when an id was not found (the others are revoked) or tokens were created after
    the revocation."""
    owners = params["owner_principals"]
    result = admin.revoke_tokens(owner=owners[0] if owners else None,
                                 token_ids=params["token_ids"], dry_run=params["dry_run"],
                                 labels=params["labels"])
    served = None
    if wait and result.revoked and not result.dry_run:
        served = admin.wait_all_brokers(tokens_absent([t for t, _ in result.revoked],
                                                      [o for _, o in result.revoked]))
    if as_json:
        click.echo(json.dumps({**result.to_json(), **_served_json(served)}, indent=2))
    else:
        verb = "Would revoke" if result.dry_run else "Revoked"
        click.echo(f"{verb} {len(result.revoked)} token(s)")
        for token_id, owner in result.revoked:
            click.echo(f"  {token_id}  {owner}")
        _echo_served(served)
    problems = []
    if result.not_found:
        problems.append(f"no such token: {', '.join(result.not_found)}")
    if result.created_after:
        problems.append(f"{len(result.created_after)} selected token(s) were created after "
                        f"the revocation and are live: {', '.join(result.created_after)}")
    if problems:
        raise click.ClickException("; ".join(problems))


def _token_of(admin: AdminClient, hmac: bytes) -> TokenDescription:
    token = admin.find_token(hmac)
    if token is None:
        raise AdminError(Errors.DELEGATION_TOKEN_NOT_FOUND,
                         "--wait-all-brokers: no token you may describe has this HMAC")
    return token


def _served_json(served: Propagation | None) -> dict:
    if served is None:
        return {}
    return {
        "all_brokers_ms": round(served.seconds * 1000, 1),
        "brokers": [{"id": b.broker_id, "address": b.address, "ms": round(b.seconds * 1000, 1)}
                    for b in served.brokers],
    }


def _echo_served(served: Propagation | None) -> None:
    if served is not None:
        click.echo(f"Served by all {len(served.brokers)} brokers after "
                   f"{served.seconds * 1000:.1f} ms")


def main() -> None:
    """Console script entry point."""
    delegation_token(prog_name="kafka-delegation-token")


if __name__ == "__main__":
    main()
