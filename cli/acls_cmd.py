"""`tokensvc acls`: add, remove and list ACLs over the wire, like Kafka's kafka-acls.sh.

A thin shell over :class:`tokensvc.admin.AdminClient` (CreateAcls, DeleteAcls,
DescribeAcls), taking the options of ``kafka-acls.sh`` that tokensvc's resources need.
It turns options into ACL bindings or filters the way Kafka's AclCommand does:

- ``--add``: for each resource, every ``--allow-principal`` x ``--allow-host`` x
  ``--operation`` is an ALLOW and every ``--deny-principal`` x ``--deny-host`` x
  ``--operation`` a DENY; hosts default to ``*``, operations to ``All``; the pattern type
  must be ``literal`` (default) or ``prefixed``.
- ``--remove``: with principals, exactly those entries (same defaults as ``--add``);
  without, every ACL of the resource filter. Asks first unless ``--force``.
- ``--list``: the ACLs of each resource filter (every ACL when no resource is given),
  only those of ``--principal`` when given.

Usage mistakes exit 2 with click's message; broker and connection failures exit 1 with
one line on stderr; no traceback reaches the user. Must not hold ACL logic beyond
building bindings and filters from options (validation is the broker's).
"""

from __future__ import annotations

from collections.abc import Iterable

import click
from click.core import ParameterSource

from cli.common import command_config, run_as_click_command, validate_bootstrap
from tokensvc.admin import AdminClient
from tokensvc.authz.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    binding_sort_key,
    supported_operations,
)
from tokensvc.core.principal import KafkaPrincipal

_ACTIONS = ("add", "remove", "list")
_RESOURCE_OPTIONS = {
    "topics": (ResourceType.TOPIC, "--topic"),
    "groups": (ResourceType.GROUP, "--group"),
    "transactional_ids": (ResourceType.TRANSACTIONAL_ID, "--transactional-id"),
    "delegation_tokens": (ResourceType.DELEGATION_TOKEN, "--delegation-token"),
    "user_principals": (ResourceType.USER, "--user-principal"),
}
# Parameter -> (its option, the actions it belongs to); options not listed suit every action.
_OPTION_ACTIONS = {
    "allow_principals": ("--allow-principal", ("add", "remove")),
    "deny_principals": ("--deny-principal", ("add", "remove")),
    "allow_hosts": ("--allow-host", ("add", "remove")),
    "deny_hosts": ("--deny-host", ("add", "remove")),
    "operations": ("--operation", ("add", "remove")),
    "principals": ("--principal", ("list",)),
}
_PATTERN_TYPES = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED,
                  "match": PatternType.MATCH, "any": PatternType.ANY}


def _principals(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for value in values:
        try:
            out.append(str(KafkaPrincipal.parse(value.strip())))
        except ValueError:
            raise click.BadParameter(
                f"{value!r} is not a principal: use Type:name, e.g. User:alice or User:*"
            ) from None
    return tuple(out)


def _operations(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[AclOperation, ...]:
    out = []
    for value in values:
        try:
            op = AclOperation.parse(value.strip())
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        if op in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise click.BadParameter(f"{value!r} is not an operation an ACL can carry")
        out.append(op)
    return tuple(dict.fromkeys(out))


def _hosts(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    if any(not v.strip() for v in values):
        raise click.BadParameter("a host must not be empty; use * for every host")
    return tuple(v.strip() for v in values)


# --- options -> bindings and filters ------------------------------------------------------


def _check_usage(ctx: click.Context, params: dict) -> str:
    chosen = [a for a in _ACTIONS if params[a]]
    if len(chosen) != 1:
        given = ", ".join(f"--{a}" for a in chosen) if chosen else "none"
        raise click.UsageError(f"give exactly one of --add, --remove, --list (given: {given})")
    action = chosen[0]
    for name, (option, actions) in _OPTION_ACTIONS.items():
        if action not in actions and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            raise click.UsageError(f"{option} cannot be used with --{action}")
    pattern_type = _PATTERN_TYPES[params["resource_pattern_type"]]
    if action == "add" and pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise click.UsageError("--add needs --resource-pattern-type literal or prefixed")
    if action != "list" and not _has_resource(params):
        raise click.UsageError(
            f"--{action} needs a resource: --cluster, --topic, --group, --transactional-id, "
            "--delegation-token or --user-principal"
        )
    for kind in ("allow", "deny"):
        if params[f"{kind}_hosts"] and not params[f"{kind}_principals"]:
            raise click.UsageError(f"--{kind}-host needs --{kind}-principal")
    has_principals = params["allow_principals"] or params["deny_principals"]
    if action == "add" and not has_principals:
        raise click.UsageError("--add needs --allow-principal or --deny-principal")
    if action == "remove" and params["operations"] and not has_principals:
        raise click.UsageError(
            "--operation with --remove needs --allow-principal or --deny-principal "
            "(without principals, --remove deletes every ACL of the resource)"
        )
    return action


def _has_resource(params: dict) -> bool:
    return bool(params["cluster"] or any(params[name] for name in _RESOURCE_OPTIONS))


def _resources(params: dict) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.CLUSTER, CLUSTER_NAME)] if params["cluster"] else []
    for name, (resource_type, _option) in _RESOURCE_OPTIONS.items():
        found.extend((resource_type, value) for value in params[name])
    return list(dict.fromkeys(found))


def _entries(params: dict) -> list[AccessControlEntry]:
    """The entries --add creates (and --remove with principals deletes)."""
    operations = params["operations"] or (AclOperation.ALL,)
    entries = []
    for kind, permission in (("allow", AclPermissionType.ALLOW), ("deny", AclPermissionType.DENY)):
        hosts = params[f"{kind}_hosts"] or (WILDCARD_HOST,)
        entries.extend(
            AccessControlEntry(principal, host, op, permission)
            for principal in params[f"{kind}_principals"]
            for host in hosts
            for op in operations
        )
    return entries


def _check_operations(resources: Iterable[tuple[ResourceType, str]], entries: list) -> None:
    for resource_type, _name in resources:
        allowed = supported_operations(resource_type) | {AclOperation.ALL}
        wrong = sorted({e.operation for e in entries} - allowed)
        if wrong:
            names = ", ".join(op.kafka_name for op in sorted(allowed))
            raise click.UsageError(
                f"{resource_type.kafka_name} resources support only the operations {names} "
                f"(not {', '.join(op.kafka_name for op in wrong)})"
            )


def _bindings(params: dict) -> list[AclBinding]:
    pattern_type = _PATTERN_TYPES[params["resource_pattern_type"]]
    resources = _resources(params)
    entries = _entries(params)
    _check_operations(resources, entries)
    return [
        AclBinding(ResourcePattern(rtype, name, pattern_type), entry)
        for rtype, name in resources
        for entry in entries
    ]


def _pattern_filters(params: dict) -> list[ResourcePatternFilter]:
    pattern_type = _PATTERN_TYPES[params["resource_pattern_type"]]
    resources = _resources(params)
    if resources:
        return [ResourcePatternFilter(rtype, name, pattern_type) for rtype, name in resources]
    explicit = params["_pattern_type_given"]
    return [ResourcePatternFilter(pattern_type=pattern_type if explicit else PatternType.ANY)]


def _removal_filters(params: dict) -> list[AclBindingFilter]:
    entries = _entries(params) if params["allow_principals"] or params["deny_principals"] else []
    if entries:
        _check_operations(_resources(params), entries)
    filters = []
    for pf in _pattern_filters(params):
        if not entries:
            filters.append(AclBindingFilter.of(pf.resource_type, pf.name, pf.pattern_type))
        for e in entries:
            filters.append(AclBindingFilter.of(
                pf.resource_type, pf.name, pf.pattern_type,
                e.principal, e.host, e.operation, e.permission_type,
            ))
    return filters


def _list_filters(params: dict) -> list[tuple[str | None, list[AclBindingFilter]]]:
    """(principal or None, the filters listing its ACLs) per --principal."""
    return [
        (principal, [
            AclBindingFilter.of(pf.resource_type, pf.name, pf.pattern_type, principal=principal)
            for pf in _pattern_filters(params)
        ])
        for principal in params["principals"] or (None,)
    ]


# --- rendering (Kafka's AclCommand wording) --------------------------------------------------


def _pattern_text(pattern: ResourcePattern) -> str:
    return (
        f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
        f"patternType={pattern.pattern_type.name})"
    )


def _entry_text(entry: AccessControlEntry) -> str:
    return (
        f"(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
        f"permissionType={entry.permission_type.name})"
    )


def _filter_text(acl_filter: AclBindingFilter) -> str:
    pf = acl_filter.pattern_filter
    return (
        f"ResourcePatternFilter(resourceType={pf.resource_type.name}, name={pf.name}, "
        f"patternType={pf.pattern_type.name})"
    )


def _render(heading: str, bindings: Iterable[AclBinding]) -> None:
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in sorted(set(bindings), key=binding_sort_key):
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for pattern, entries in by_pattern.items():
        click.echo(f"{heading} `{_pattern_text(pattern)}`: ")
        for entry in entries:
            click.echo(f" \t{_entry_text(entry)} ")
        click.echo("")


# --- the command ---------------------------------------------------------------------------


@click.command("acls", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--bootstrap-server", required=True, callback=validate_bootstrap,
              metavar="HOST:PORT[,HOST:PORT...]", help="Brokers to connect to (tried in turn).")
@click.option("--command-config", type=click.Path(dir_okay=False), default=None,
              help="Kafka client properties: security.protocol, sasl.mechanism, "
                   "sasl.jaas.config, ssl.truststore.*.")
@click.option("--add", is_flag=True, help="Add ACLs.")
@click.option("--remove", is_flag=True, help="Remove ACLs.")
@click.option("--list", "list_", is_flag=True, help="List ACLs.")
@click.option("--allow-principal", "allow_principals", multiple=True, callback=_principals,
              metavar="Type:name", help="Principal the ACLs allow (repeatable; User:* = everyone).")
@click.option("--deny-principal", "deny_principals", multiple=True, callback=_principals,
              metavar="Type:name", help="Principal the ACLs deny (repeatable).")
@click.option("--allow-host", "allow_hosts", multiple=True, callback=_hosts, metavar="HOST",
              help="Host the allowed principals may connect from (repeatable; default *).")
@click.option("--deny-host", "deny_hosts", multiple=True, callback=_hosts, metavar="HOST",
              help="Host the denied principals are denied from (repeatable; default *).")
@click.option("--operation", "operations", multiple=True, callback=_operations, metavar="OP",
              help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                   "DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, "
                   "DescribeTokens or All (repeatable; default All).")
@click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster).")
@click.option("--topic", "topics", multiple=True, metavar="NAME", help="A topic (repeatable).")
@click.option("--group", "groups", multiple=True, metavar="NAME", help="A group (repeatable).")
@click.option("--transactional-id", "transactional_ids", multiple=True, metavar="ID",
              help="A transactional id (repeatable).")
@click.option("--delegation-token", "delegation_tokens", multiple=True, metavar="TOKEN_ID",
              help="A delegation token, by token id (repeatable).")
@click.option("--user-principal", "user_principals", multiple=True, callback=_principals,
              metavar="User:name", help="A user as a resource, for CreateTokens and "
              "DescribeTokens (repeatable).")
@click.option("--resource-pattern-type", type=click.Choice(list(_PATTERN_TYPES),
              case_sensitive=False), default="literal", show_default=True,
              help="literal or prefixed for --add; match and any also filter --list/--remove.")
@click.option("--principal", "principals", multiple=True, callback=_principals,
              metavar="Type:name", help="--list only the ACLs of this principal (repeatable).")
@click.option("--force", is_flag=True, help="Do not ask before removing.")
@click.pass_context
def acls(ctx: click.Context, **params: object) -> None:
    """Add, remove or list ACLs (the options of Kafka's kafka-acls.sh)."""
    params["resource_pattern_type"] = str(params["resource_pattern_type"]).lower()
    params["_pattern_type_given"] = (
        ctx.get_parameter_source("resource_pattern_type") is ParameterSource.COMMANDLINE
    )
    params["list"] = params.pop("list_")
    action = _check_usage(ctx, params)
    if action == "add":
        work = _bindings(params)
    elif action == "remove":
        work = _removal_filters(params)
    else:
        work = _list_filters(params)
    run_as_click_command(_run, action, params, work)


def _run(action: str, params: dict, work: list) -> None:
    config = command_config(params["command_config"])
    if action == "remove" and not params["force"]:
        shown = "\n".join(f"\t{_filter_text(f)}" for f in work)
        click.confirm(f"Are you sure you want to remove the ACLs matching:\n{shown}\n", abort=True)
    with AdminClient(params["bootstrap_server"], config,
                     timeout_s=config.request_timeout_ms / 1000) as admin:
        if action == "add":
            admin.create_acls(work)
            _render("Adding ACLs for resource", work)
        elif action == "remove":
            results = admin.delete_acls(work)
            removed = [b for r in results for b in r.deleted]
            _render("Removed ACLs for resource", removed)
            click.echo(f"Removed {len(set(removed))} ACL(s).")
        else:
            for principal, filters in work:
                found = [b for f in filters for b in admin.describe_acls(f)]
                if principal is not None:
                    click.echo(f"ACLs for principal `{principal}`")
                _render("Current ACLs for resource", found)
