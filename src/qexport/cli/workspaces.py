"""`qexport workspaces timezone W [ZONE]`: the time zone a workspace's reports are dated in;
`qexport workspaces webhook-hosts W [HOST...]`: the only hosts its webhooks may go to;
`qexport workspaces policy W [--formats ... --sensitive-table ... --revoke-links]`: what it
lets leave."""

from __future__ import annotations

from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import typer

from qexport.cli.admin import admin_context, note
from qexport.cli.client import ApiError, one_named
from qexport.cli.common import fail, fail_input, fail_problems, state
from qexport.domain.accounts import Role
from qexport.domain.commands import ChangePolicy
from qexport.domain.failures import InvalidRequestError, QExportError
from qexport.domain.sensitivity import written_rule
from qexport.ports import AccountStore, Catalog
from qexport.services.policies import change_policy
from qexport.services.recipients import set_webhook_hosts

workspaces_app = typer.Typer(no_args_is_help=True, help="Workspaces' settings.")

MAX_ZONE_CHARS = 64  # the column's width; every IANA name fits


def _check_zone(zone: str) -> str:
    """The IANA name if zoneinfo knows it; exit 2 otherwise."""
    if not zone or len(zone) > MAX_ZONE_CHARS or zone != zone.strip():
        fail_input(f"{zone!r} is not a time zone name (e.g. Europe/Paris, UTC)")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        fail_input(f"unknown time zone {zone!r} (an IANA name, e.g. Europe/Paris, UTC)")
    return zone


def _workspace_accounts(ctx: typer.Context, workspace: str) -> AccountStore:
    """The account store, once `workspace` is known to have accounts (exit 2 otherwise)."""
    accounts = admin_context(ctx).accounts
    if not accounts.workspace_exists(workspace):
        fail_input(
            f"no workspace {workspace!r} with accounts"
            f" (qexport users create EMAIL --workspace {workspace} ...)"
        )
    return accounts


@workspaces_app.command("timezone")
def workspaces_timezone(
    ctx: typer.Context,
    workspace: str,
    zone: Annotated[
        str | None, typer.Argument(help="An IANA name; leave out to print the current one.")
    ] = None,
) -> None:
    """Print, or set, the time zone the workspace's reports show their generation time in."""
    accounts = _workspace_accounts(ctx, workspace)
    if zone is None:
        print(accounts.workspace_timezone(workspace))
        return
    accounts.set_workspace_timezone(workspace, _check_zone(zone))
    note(f"workspace {workspace} now dates its reports in {zone}")


@workspaces_app.command("webhook-hosts")
def workspaces_webhook_hosts(
    ctx: typer.Context,
    workspace: str,
    hosts: Annotated[
        list[str] | None,
        typer.Argument(help="Host names webhooks may go to; leave out to print the current."),
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Lift the restriction: any host the server allows.")
    ] = False,
) -> None:
    """Print, set or (--clear) lift the host names the workspace's webhooks may go to."""
    accounts = _workspace_accounts(ctx, workspace)
    if clear and hosts:
        fail_input("give host names or --clear, not both")
    if not hosts and not clear:
        current = accounts.workspace_webhook_hosts(workspace)
        print("any (unrestricted)" if current is None else "\n".join(current))
        return
    try:
        saved = set_webhook_hosts(accounts, Role.ADMIN, workspace, None if clear else hosts)
    except InvalidRequestError as exc:
        fail_input(str(exc))
    if saved is None:
        note(f"workspace {workspace}'s webhooks may go to any host the server allows")
    else:
        note(f"workspace {workspace}'s webhooks may only go to: {', '.join(saved)}")


def _list_or_lift(value: str) -> list[str] | None:
    """`a,b` -> ['a', 'b']; `any` lifts the rule."""
    if value.strip().lower() == "any":
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def _query_ids(catalog: Catalog, workspace: str, value: str) -> list[str]:
    """`a,b` (names, ids or their starts) -> the queries' ids; `none` -> []. An unknown one is
    refused with the nearest names (exit 2)."""
    if value.strip().lower() == "none":
        return []
    known = [(query.id, query.name) for query in catalog.list_queries(workspace)]
    try:
        return [
            one_named(known, "query", ref, where="in this workspace")
            for ref in (part.strip() for part in value.split(",") if part.strip())
        ]
    except ApiError as exc:
        fail_input(f"--sensitive-queries: {exc.detail}")


def _number_or_lift(value: str, option: str) -> int | None:
    if value.strip().lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        fail_input(f"{option} takes a whole number, or none to lift the rule (got {value!r})")
        raise AssertionError("unreachable") from None


# long: one documented option per rule of the policy (typer reads them from here)
@workspaces_app.command("policy")
def workspaces_policy(  # noqa: PLR0913 - one per command-line option
    ctx: typer.Context,
    workspace: str,
    formats: Annotated[
        str | None,
        typer.Option("--formats", help="Comma-separated formats exports may use; 'any' lifts it."),
    ] = None,
    max_rows: Annotated[
        str | None,
        typer.Option("--max-rows", help="Most rows an export may hold; 'none' lifts it."),
    ] = None,
    links: Annotated[
        str | None, typer.Option("--links", help="on: public links allowed; off: none.")
    ] = None,
    link_max_days: Annotated[
        str | None,
        typer.Option("--link-max-days", help="Longest a public link lives; 'none' lifts it."),
    ] = None,
    retention_days: Annotated[
        str | None,
        typer.Option("--retention-days", help="Days files are kept; 'none': the server's."),
    ] = None,
    recipient_domains: Annotated[
        str | None,
        typer.Option("--recipient-domains", help="Comma-separated email domains; 'any' lifts it."),
    ] = None,
    sensitive_tables: Annotated[
        list[str] | None,
        typer.Option(
            "--sensitive-table",
            help="'SOURCE: SCHEMA.TABLE' or 'SOURCE: SCHEMA.TABLE (COL, COL)', once per table:"
            " a query reading it (as its source's planner says) needs an admin's approval."
            " Replaces the list; 'none' clears it.",
        ),
    ] = None,
    revoke_links: Annotated[
        bool,
        typer.Option(
            "--revoke-links",
            help="With the change, revoke the live public links to files made without an"
            " approval of every query or report the new policy marks sensitive.",
        ),
    ] = False,
    sensitive: Annotated[
        str | None,
        typer.Option(
            "--sensitive-queries",
            help="Comma-separated query names or ids whose exports need an admin's approval;"
            " 'none' clears it.",
        ),
    ] = None,
) -> None:
    """Print, or change, what the workspace lets leave (each rule narrows the server's)."""
    accounts = _workspace_accounts(ctx, workspace)
    changes: dict[str, Any] = {}
    if formats is not None:
        changes["formats"] = _list_or_lift(formats)
    numbers = {"max_rows": max_rows, "link_max_days": link_max_days}
    numbers["retention_days"] = retention_days
    for name, given in numbers.items():
        if given is not None:
            changes[name] = _number_or_lift(given, f"--{name.replace('_', '-')}")
    if links is not None:
        if links.lower() not in ("on", "off"):
            fail_input(f"--links is on or off (got {links!r})")
        changes["public_links"] = links.lower() == "on"
    if recipient_domains is not None:
        changes["recipient_domains"] = _list_or_lift(recipient_domains)
    deps = state(ctx).deps()
    changes |= _sensitive_changes(deps.catalog, workspace, sensitive, sensitive_tables)
    if not changes:
        if revoke_links:
            fail_input("--revoke-links goes with a change of the policy (it revokes with it)")
        print("\n".join(accounts.workspace_policy(workspace).describe()))
        return
    try:
        changed = change_policy(deps, None, ChangePolicy(workspace, changes, revoke_links))
    except InvalidRequestError as exc:
        fail_problems(exc, _option_of)
    except QExportError as exc:  # a source a sensitive table names could not be asked
        fail(str(exc))
    note(f"workspace {workspace}'s policy is now:")
    for line in changed.policy.describe():
        note(f"  {line}")
    if revoke_links:
        note(f"public links revoked: {changed.links_revoked}")


def _option_of(problem: InvalidRequestError) -> str:
    """The option a problem is about, as its message starts (`--sensitive-table 2: `)."""
    field = problem.field or ""
    rule = field.split("[")[0]
    if rule == "sensitive_tables":
        index = field.removeprefix("sensitive_tables[").split("]")[0]
        return f"--sensitive-table {int(index) + 1}: " if index.isdigit() else "--sensitive-table: "
    return f"--{rule.replace('_', '-')}: "


def _sensitive_changes(
    catalog: Catalog, workspace: str, queries: str | None, tables: list[str] | None
) -> dict[str, Any]:
    """The sensitivity rules the options change."""
    changes: dict[str, Any] = {}
    if queries is not None:
        changes["sensitive_queries"] = _query_ids(catalog, workspace, queries)
    if tables is not None:
        changes["sensitive_tables"] = _table_rules(tables)
    return changes


def _table_rules(given: list[str]) -> list[dict[str, Any]]:
    """Each --sensitive-table as the policy takes it; `none` alone clears the list."""
    if [g.strip().lower() for g in given] == ["none"]:
        return []
    rules = []
    for number, line in enumerate(given, start=1):
        try:
            rules.append(written_rule(line))
        except InvalidRequestError as exc:
            fail_input(f"--sensitive-table {number}: {exc.detail}")
    return rules
