"""`qexport schedules add|list|update|pause|resume|run-now|signing-key|subscribe|unsubscribe`:
exports on a cron timetable.

Local (the metadata database, acting as --user in --workspace) or, with QEXPORT_URL and
QEXPORT_TOKEN, through a server. Bad input exits 2 with one line on stderr.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.table import Table

from qexport.cli.common import (
    BAD_INPUT,
    fail,
    fail_input,
    fail_problems,
    local_deps,
    out,
    parse_kv,
    remote,
    server_errors,
    server_refusals,
    state,
)
from qexport.domain.accounts import Principal
from qexport.domain.failures import InvalidRequestError, QExportError
from qexport.domain.schedules import parse_recipients
from qexport.schedules import catalog as service
from qexport.services.accounts import local_principal
from qexport.services.exports import ambiguous_message, id_prefix_of
from qexport.services.reports import find_readable_report
from qexport.services.requests import find_readable_query
from qexport.services.views import schedule_view

if TYPE_CHECKING:
    from qexport.container import Container
    from qexport.domain.schedules import Recipient, Schedule

schedules_app = typer.Typer(
    no_args_is_help=True,
    help="Schedules: an export on a cron timetable, mailed or posted to its recipients. In the"
    " local database, or on a server when QEXPORT_URL and QEXPORT_TOKEN are set.",
)

_SCHEDULE_ID = typer.Argument(help="The schedule's id or its start (4 characters or more).")

FAILED = 1
CRON_HELP = (
    "5 fields: minute hour day-of-month month day-of-week, e.g. '0 8 * * 1' (Mondays 08:00)."
)
EMAIL_HELP = "Mail the export (its link) to this address; repeatable."
WEBHOOK_HELP = "POST a signed JSON notice to this http(s) URL; repeatable."
SLACK_HELP = "Post a message to the Slack channel of this incoming-webhook https URL; repeatable."
TEAMS_HELP = "Post a card to the Teams channel of this incoming-webhook https URL; repeatable."


def _refused(exc: QExportError, code: int = BAD_INPUT) -> NoReturn:
    """One line naming the option at fault, e.g. `--cron: cron '0 8' must have 5 fields`."""
    if isinstance(exc, InvalidRequestError):
        fail_problems(exc, lambda p: f"{option_of(p.field)}: " if p.field else "")
    fail(str(exc), code)


def option_of(field: str) -> str:
    """The command-line option for an API field: `recipients[0].email` -> `--email`."""
    name = field.rsplit(".", 1)[-1]
    if field.startswith(("recipients", "notify")) and name in (
        "email",
        "webhook",
        "slack",
        "teams",
    ):
        return f"--{name}"
    if field.startswith("parameters."):
        return f"--param {field.removeprefix('parameters.')}"
    if field in ("query_id", "report_id"):
        return "SUBJECT"
    if field == "filename_template":
        return "--filename"
    if field == "neutralize_formulas":
        return "--neutralize"
    return f"--{field.replace('_', '-')}" if "." not in field and "[" not in field else field


def recipients_json(
    emails: list[str] | None,
    webhooks: list[str] | None,
    slack: list[str] | None = None,
    teams: list[str] | None = None,
) -> list[dict[str, str]]:
    """`--email`, `--webhook`, `--slack` and `--teams` options as API recipients."""
    given = {"email": emails, "webhook": webhooks, "slack": slack, "teams": teams}
    return [{channel: value} for channel, values in given.items() for value in values or ()]


def parse_notify(
    emails: list[str] | None,
    webhooks: list[str] | None,
    slack: list[str] | None = None,
    teams: list[str] | None = None,
) -> tuple[Recipient, ...]:
    """`--email`, `--webhook`, `--slack` and `--teams` as checked recipients; bad ones exit 2."""
    try:
        return parse_recipients(recipients_json(emails, webhooks, slack, teams), "notify")
    except InvalidRequestError as exc:
        _refused(exc)


def _local(ctx: typer.Context) -> tuple[Container, Principal]:
    """The local database and who acts in it: a member with their role in a workspace with
    accounts; in one without, the command line administers its own workspace."""
    st, deps = local_deps(ctx)
    return deps, local_principal(deps.accounts, st.requester)


def _print_schedule(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(view, indent=2))
        return
    table = Table(show_header=False, box=None)
    subject = f"report {view['report_id']}" if view["report_id"] else f"query {view['query_id']}"
    table.add_row("id", view["id"])
    table.add_row("subject", subject)
    for key in ("format", "cron", "timezone", "missed", "enabled", "owner", "next_run_at"):
        table.add_row(key, "" if view[key] is None else str(view[key]))
    if view["parameters"]:
        table.add_row("parameters", json.dumps(view["parameters"]))
    table.add_row("recipients", _recipients_text(view["recipients"]))
    if view.get("filename_template"):
        table.add_row("file names", view["filename_template"])
    out.print(table)


def _recipients_text(recipients: list[dict[str, str]]) -> str:
    return ", ".join(f"{k} {v}" for r in recipients for k, v in r.items()) or "none"


@schedules_app.command("add")
def schedules_add(
    ctx: typer.Context,
    subject: Annotated[str, typer.Argument(help="Query name or id (with --report: a report).")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="csv, tsv, jsonl, parquet or xlsx; a report: pdf, xlsx or html."
        ),
    ],
    cron: Annotated[str, typer.Option(help=CRON_HELP)],
    timezone: Annotated[
        str | None,
        typer.Option(help="IANA time zone, e.g. Europe/Berlin (default: the workspace's)."),
    ] = None,
    email: Annotated[list[str] | None, typer.Option(help=EMAIL_HELP)] = None,
    webhook: Annotated[list[str] | None, typer.Option(help=WEBHOOK_HELP)] = None,
    slack: Annotated[list[str] | None, typer.Option(help=SLACK_HELP)] = None,
    teams: Annotated[list[str] | None, typer.Option(help=TEAMS_HELP)] = None,
    param: Annotated[list[str] | None, typer.Option(help="NAME=VALUE, repeatable.")] = None,
    missed: Annotated[
        str, typer.Option(help="After downtime: once (one export for all missed) or skip.")
    ] = "once",
    report: Annotated[bool, typer.Option("--report", help="SUBJECT is a report.")] = False,
    disabled: Annotated[bool, typer.Option("--disabled", help="Save it paused.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule as JSON.")] = False,
    filename: Annotated[
        str | None,
        typer.Option(
            "--filename",
            help="File name template of its exports: {name}, {date}, {time}, {format} and"
            " parameters such as {since} (default: the query's).",
        ),
    ] = None,
) -> None:
    """Save a schedule: a query or report exported on a cron timetable.

    For example `qexport schedules add orders --format csv --cron '0 8 * * 1' --timezone
    Europe/Berlin --email ops@example.com`."""
    parameters = parse_kv(param or [])
    recipients = recipients_json(email, webhook, slack, teams)
    client = remote(ctx)
    if client is not None:
        with client, server_errors(client_error_code=BAD_INPUT):
            subject_id = client.resolve_report(subject) if report else client.resolve_query(subject)
            body: dict[str, Any] = {
                "report_id" if report else "query_id": subject_id,
                "format": fmt,
                "parameters": parameters,
                "cron": cron,
                "recipients": recipients,
                "missed": missed,
                "enabled": not disabled,
            }
            if timezone is not None:
                body["timezone"] = timezone
            if filename is not None:
                body["filename_template"] = filename
            view = client.create_schedule(body)
    else:
        deps, actor = _local(ctx)
        draft = service.ScheduleDraft(
            query_id=None if report else subject,
            report_id=subject if report else None,
            format=fmt,
            parameters=parameters,
            cron=cron,
            timezone=timezone,
            recipients=recipients,
            missed=missed,
            enabled=not disabled,
            filename_template=filename,
        )
        try:
            schedule = service.create_schedule(
                deps.catalog,
                deps.schedules,
                deps.accounts,
                deps.clock,
                actor,
                draft,
                match_name=True,
                egress=state(ctx).settings.egress_policy(),
                limits=service.ScheduleLimits.of(deps.settings),
            )
        except QExportError as exc:
            _refused(exc)
        view = {**schedule_view(schedule), "subscribed": False}  # as the server answers
    if as_json:
        _print_schedule(view, True)
    else:
        next_run = view["next_run_at"] or "never (paused)"
        out.print(
            f"schedule {view['id']} saved; next run at {next_run}", highlight=False, soft_wrap=True
        )


@schedules_app.command("list")
def schedules_list(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """List the workspace's schedules you can see."""
    client = remote(ctx)
    names: dict[str, str] = {}  # subject id -> its name, where known
    if client is not None:
        with client, server_errors():
            items = client.list_schedules()["items"]
            # Names, not ids, as the local list shows them.
            names = {**client.names("/queries", "name"), **client.names("/reports", "title")}
    else:
        deps, actor = _local(ctx)
        found = service.list_visible_schedules(deps.catalog, deps.schedules, actor)
        items = [schedule_view(s, full_recipients=service.sees_recipients(actor, s)) for s in found]
        names = {s.subject_id: _subject_name(deps, s.subject_type, s.subject_id) for s in found}
        subscribed = service.subscribed_ids(deps.schedules, actor)
        items = [{**view, "subscribed": view["id"] in subscribed} for view in items]
    if as_json:
        print(json.dumps({"items": items}, indent=2))
        return
    table = Table(box=None)
    table.add_column("id", no_wrap=True, min_width=36)  # what pause, resume and run-now take
    table.add_column("subject", no_wrap=True)
    table.add_column("when")
    table.add_column("next run (UTC)")
    for view in items:
        subject_id = view["query_id"] or view["report_id"]
        subject = names.get(subject_id, subject_id)
        next_run = view["next_run_at"]
        table.add_row(
            view["id"],
            (f"{subject} {view['format']}" if view["query_id"] else f"report {subject}")
            + ("\nmailed to you" if view.get("subscribed") else ""),  # you subscribed
            f"{view['cron']} {view['timezone']}",
            next_run.replace("T", " ")[:16] if next_run else "paused",
        )
    out.print(table)


@schedules_app.command("update")
def schedules_update(
    ctx: typer.Context,
    schedule_id: Annotated[str, _SCHEDULE_ID],
    query: Annotated[
        str | None, typer.Option(help="Export this query (name or id) instead.")
    ] = None,
    report: Annotated[
        str | None, typer.Option(help="Export this report (title or id) instead.")
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="csv, tsv, jsonl, parquet or xlsx; a report: pdf, xlsx or html."
        ),
    ] = None,
    cron: Annotated[str | None, typer.Option(help=CRON_HELP)] = None,
    timezone: Annotated[
        str | None,
        typer.Option(help="IANA time zone, e.g. Europe/Berlin; '' for the workspace's."),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(help="NAME=VALUE, repeatable: the parameters become exactly these."),
    ] = None,
    no_params: Annotated[
        bool, typer.Option("--no-params", help="Remove every parameter value.")
    ] = False,
    email: Annotated[list[str] | None, typer.Option(help=EMAIL_HELP)] = None,
    webhook: Annotated[list[str] | None, typer.Option(help=WEBHOOK_HELP)] = None,
    slack: Annotated[list[str] | None, typer.Option(help=SLACK_HELP)] = None,
    teams: Annotated[list[str] | None, typer.Option(help=TEAMS_HELP)] = None,
    no_recipients: Annotated[
        bool, typer.Option("--no-recipients", help="Remove every recipient.")
    ] = False,
    missed: Annotated[
        str | None, typer.Option(help="After downtime: once (one export for all missed) or skip.")
    ] = None,
    neutralize: Annotated[
        bool | None,
        typer.Option(
            "--neutralize/--no-neutralize",
            help="Neutralise formula-looking strings in csv/tsv/xlsx.",
            show_default=False,
        ),
    ] = None,
    filename: Annotated[
        str | None,
        typer.Option(
            "--filename",
            help="File name template of its exports: {name}, {date}, {time}, {format} and"
            " parameters such as {since}; '' for the query's.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule as JSON.")] = False,
) -> None:
    """Change some settings of a schedule; the others keep their value.

    Its owner or a workspace admin may. A list given (--param, --email, ...) replaces the
    schedule's whole list. Whoever changes the subject, format, parameters or recipients
    becomes its owner. Pause and resume have their own commands."""
    changes = _changes(
        fmt=fmt,
        cron=cron,
        timezone=timezone,
        param=param,
        no_params=no_params,
        recipients=recipients_json(email, webhook, slack, teams),
        no_recipients=no_recipients,
        missed=missed,
        neutralize=neutralize,
        filename=filename,
    )
    if query is not None and report is not None:
        fail_input("give at most one of --query and --report")
    if not changes and query is None and report is None:
        fail_input("nothing to change: give at least one option (see --help)")
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    client = remote(ctx)
    if client is not None:
        with client, server_refusals():
            if query is not None:
                changes["query_id"] = client.resolve_query(query)
            if report is not None:
                changes["report_id"] = client.resolve_report(report)
            view = client.update_schedule(schedule_id, _as_api(changes))
    else:
        deps, actor = _local(ctx)
        try:
            if query is not None:
                changes["query_id"] = find_readable_query(deps.catalog, actor.requester, query).id
            if report is not None:
                changes["report_id"] = find_readable_report(
                    deps.catalog, actor.requester, report, match_title=True
                ).id
            schedule = service.update_schedule(
                deps.catalog,
                deps.schedules,
                deps.accounts,
                deps.clock,
                actor,
                schedule_id,
                changes,
                egress=state(ctx).settings.egress_policy(),
                limits=service.ScheduleLimits.of(deps.settings),
            )
        except QExportError as exc:
            _refused(exc, FAILED)
        view = _local_view(deps, actor, schedule)
    if as_json:
        _print_schedule(view, True)
        return
    next_run = view["next_run_at"] or "never (paused)"
    out.print(
        f"schedule {view['id']} updated; next run at {next_run}", highlight=False, soft_wrap=True
    )


def _changes(
    *,
    fmt: str | None,
    cron: str | None,
    timezone: str | None,
    param: list[str] | None,
    no_params: bool,
    recipients: list[dict[str, str]],
    no_recipients: bool,
    missed: str | None,
    neutralize: bool | None,
    filename: str | None,
) -> dict[str, Any]:
    """The options given, as settings to change (ScheduleDraft's names); a blank time zone or
    file name template goes back to the default (None)."""
    if param and no_params:
        fail_input("give --param or --no-params, not both")
    if recipients and no_recipients:
        fail_input("give recipients or --no-recipients, not both")
    changes: dict[str, Any] = {}
    if fmt is not None:
        changes["format"] = fmt
    if cron is not None:
        changes["cron"] = cron
    if timezone is not None:
        changes["timezone"] = timezone.strip() or None
    if param or no_params:
        changes["parameters"] = parse_kv(param or [])
    if recipients or no_recipients:
        changes["recipients"] = recipients
    if missed is not None:
        changes["missed"] = missed
    if neutralize is not None:
        changes["neutralize_formulas"] = neutralize
    if filename is not None:
        changes["filename_template"] = filename.strip() or None
    return changes


def _as_api(changes: dict[str, Any]) -> dict[str, Any]:
    """Settings to change as the PATCH body names them."""
    body = dict(changes)
    if "neutralize_formulas" in body:
        body["options"] = {"neutralize_formulas": body.pop("neutralize_formulas")}
    return body


def _subject_name(deps: Container, kind: str, subject_id: str) -> str:
    found = deps.catalog.get_report(subject_id) if kind == "report" else None
    if found is not None:
        return found.title
    query = deps.catalog.get_query(subject_id) if kind != "report" else None
    return query.name if query is not None else subject_id


def resolve_schedule_id(ctx: typer.Context, ref: str) -> str:
    """The full id of the schedule `ref` names: its id, or a start of it (at least 4
    characters) that no other schedule the caller can see shares, locally or on the server.
    As for exports: an ambiguous start is refused with the candidates (exit 2), an unknown
    one says so (exit 1)."""
    ref = ref.strip()
    try:
        prefix = id_prefix_of(ref)
    except InvalidRequestError as exc:
        fail_input(exc.detail.replace("an export id", "a schedule id"))
    if prefix is None:  # a whole id, or nothing like one: the lookup says which
        return ref
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            found = [
                (str(v["id"]), str(v["query_id"] or v["report_id"]))
                for v in client.list_schedules()["items"]
                if str(v["id"]).startswith(prefix)
            ]
    else:
        deps, actor = _local(ctx)
        found = [
            (s.id, _subject_name(deps, s.subject_type, s.subject_id))
            for s in service.list_visible_schedules(deps.catalog, deps.schedules, actor)
            if s.id.startswith(prefix)
        ]
    if not found:
        fail("no schedule with this id that you can see")  # as the services say of a whole id
    if len(found) > 1:
        fail_input(ambiguous_message(ref, found, kind="schedule"))
    return found[0][0]


def _set_enabled(ctx: typer.Context, schedule_id: str, *, enabled: bool) -> dict[str, Any]:
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            return client.update_schedule(schedule_id, {"enabled": enabled})
    deps, actor = _local(ctx)
    try:
        schedule = service.set_enabled(
            deps.catalog,
            deps.schedules,
            deps.accounts,
            deps.clock,
            actor,
            schedule_id,
            enabled=enabled,
        )
    except QExportError as exc:
        _refused(exc, FAILED)
    return _local_view(deps, actor, schedule)


def _local_view(deps: Container, actor: Principal, schedule: Schedule) -> dict[str, Any]:
    """A schedule as the server would answer it to the actor (recipients, `subscribed`)."""
    view = schedule_view(schedule, full_recipients=service.sees_recipients(actor, schedule))
    return {**view, "subscribed": schedule.id in service.subscribed_ids(deps.schedules, actor)}


@schedules_app.command("pause")
def schedules_pause(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Pause a schedule: nothing fires until it is resumed."""
    view = _set_enabled(ctx, schedule_id, enabled=False)
    out.print(f"schedule {view['id']} paused", highlight=False, soft_wrap=True)


@schedules_app.command("resume")
def schedules_resume(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Resume a schedule from now on; due times that passed while paused never fire."""
    view = _set_enabled(ctx, schedule_id, enabled=True)
    out.print(
        f"schedule {view['id']} resumed; next run at {view['next_run_at']}",
        highlight=False,
        soft_wrap=True,
    )


@schedules_app.command("delete")
def schedules_delete(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Delete a schedule (its owner or a workspace admin); the exports it made stay."""
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            client.delete_schedule(schedule_id)
    else:
        deps, actor = _local(ctx)
        try:
            service.delete_schedule(deps.catalog, deps.schedules, deps.clock, actor, schedule_id)
        except QExportError as exc:
            _refused(exc, FAILED)
    out.print(f"deleted schedule {schedule_id}", highlight=False, soft_wrap=True)


@schedules_app.command("run-now")
def schedules_run_now(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Fire a schedule now (paused or not) and print the export's id."""
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            export_id = client.run_schedule(schedule_id)["id"]
    else:
        deps, actor = _local(ctx)
        try:
            export_id = service.run_schedule(
                deps.catalog,
                deps.schedules,
                deps.clock,
                actor,
                schedule_id,
                max_unsettled=deps.settings.max_unsettled_per_user,
                accounts=deps.accounts,
            ).id
        except QExportError as exc:
            _refused(exc, FAILED)
    print(export_id)


@schedules_app.command("signing-key")
def schedules_signing_key(ctx: typer.Context) -> None:
    """Print the workspace's webhook signing key (workspace admins).

    Receivers verify X-QExport-Signature with it."""
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            key = client.signing_key()["key"]
    else:
        from qexport.deliveries.signing import signing_key

        deps, actor = _local(ctx)
        try:
            service.require_admin(actor)
        except QExportError as exc:
            _refused(exc, FAILED)
        key = signing_key(deps.settings, deps.schedules, deps.clock, actor.requester.workspace_id)
    print(key)


# ---------------------------------------------------------------- subscribing oneself


@schedules_app.command("subscribe")
def schedules_subscribe(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Mail each run's export to your own address too; you do not become its owner."""
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            email = client.subscribe(schedule_id)["email"]
    else:
        deps, actor = _local(ctx)
        try:
            email = service.subscribe(
                deps.catalog, deps.schedules, deps.accounts, deps.clock, actor, schedule_id
            ).email
        except QExportError as exc:
            _refused(exc, FAILED)
    out.print(
        f"subscribed to schedule {schedule_id}: each run's export is mailed to {email}",
        highlight=False,
        soft_wrap=True,
    )


@schedules_app.command("unsubscribe")
def schedules_unsubscribe(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Stop mailing a schedule's exports to you (also once you may no longer see it)."""
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            client.unsubscribe(schedule_id)
    else:
        deps, actor = _local(ctx)
        try:
            service.unsubscribe(deps.catalog, deps.schedules, actor, schedule_id)
        except QExportError as exc:
            _refused(exc, FAILED)
    out.print(f"unsubscribed from schedule {schedule_id}", highlight=False, soft_wrap=True)
