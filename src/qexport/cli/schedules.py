"""`qexport schedules add|list|update|pause|resume|run-now|signing-key|subscribe|unsubscribe`:
exports on a cron timetable.

Local (the metadata database, acting as --user in --workspace) or, with QEXPORT_URL and
QEXPORT_TOKEN, through a server. Bad input exits 2 with one line on stderr.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.table import Table

from qexport.cli.client import ApiError, Client
from qexport.cli.common import (
    BAD_INPUT,
    client_of,
    fail,
    fail_api,
    fail_input,
    fail_problems,
    out,
    parse_kv,
    resolve_id,
    server_errors,
)
from qexport.domain.failures import InvalidRequestError, QExportError
from qexport.domain.schedules import parse_recipients

if TYPE_CHECKING:
    from qexport.domain.schedules import Recipient

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


@contextlib.contextmanager
def refused_by_option(code: int) -> Iterator[None]:
    """A refusal, one line per mistake, each led by the option at fault (`--cron: cron '0 8'
    must have 5 fields`): exit 2 for the values given (422), `code` for a subject or schedule
    not found, 1 for anything else (a bad token, a forbidden change, the server down)."""
    try:
        yield
    except ApiError as exc:
        status = BAD_INPUT if exc.status == 422 else code if exc.status == 404 else 1
        fail_api(exc, status, lambda field: f"{option_of(field)}: " if field else "")


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


# long: one documented option per setting of a schedule (typer reads them from here)
@schedules_app.command("add")
def schedules_add(  # noqa: PLR0913 - one per command-line option
    ctx: typer.Context,
    subject: Annotated[
        str, typer.Argument(help="Query name, id or its start (with --report: a report).")
    ],
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
    kind = "report" if report else "query"
    with client_of(ctx) as client:
        subject_id, unknown = _subject_id(client, kind, subject)
        body: dict[str, Any] = {
            f"{kind}_id": subject_id,
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
        with refused_by_option(BAD_INPUT), _naming(unknown):
            view = client.create_schedule(body)
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
    with client_of(ctx) as client, server_errors():
        items = client.list_schedules()["items"]
        # Names, not ids: those of the subjects the caller can read.
        names = dict(client.subjects("query") + client.subjects("report"))
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


# long: one documented option per setting of a schedule (typer reads them from here)
@schedules_app.command("update")
def schedules_update(  # noqa: PLR0913 - one per command-line option
    ctx: typer.Context,
    schedule_id: Annotated[str, _SCHEDULE_ID],
    query: Annotated[
        str | None, typer.Option(help="Export this query (name, id or its start) instead.")
    ] = None,
    report: Annotated[
        str | None, typer.Option(help="Export this report (title, id or its start) instead.")
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
    with client_of(ctx) as client:
        unknown = None
        if query is not None:
            changes["query_id"], unknown = _subject_id(client, "query", query)
        if report is not None:
            changes["report_id"], unknown = _subject_id(client, "report", report)
        with refused_by_option(FAILED), _naming(unknown):
            view = client.update_schedule(schedule_id, _as_api(changes))
    if as_json:
        _print_schedule(view, True)
        return
    next_run = view["next_run_at"] or "never (paused)"
    out.print(
        f"schedule {view['id']} updated; next run at {next_run}", highlight=False, soft_wrap=True
    )


def _changes(  # noqa: PLR0913 - keyword-only: one per command-line option
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


def _subject_id(client: Client, kind: str, ref: str) -> tuple[str, ApiError | None]:
    """The id of the query (`kind` "query") or report that `ref` names (`Client.subject`);
    else `ref` itself, with the refusal naming the nearest names, for `_naming` to give
    should the schedule be refused for its subject: its other mistakes come first, all at
    once, as the API gives them."""
    try:
        return str(client.subject(kind, ref)["id"]), None
    except ApiError as exc:
        if exc.status != 404:
            raise
        return ref, exc


@contextlib.contextmanager
def _naming(unknown: ApiError | None) -> Iterator[None]:
    """A subject not found (404) refused as `unknown` says it, with the nearest names."""
    try:
        yield
    except ApiError as exc:
        if unknown is not None and exc.status == 404:
            raise unknown from exc
        raise


def resolve_schedule_id(ctx: typer.Context, ref: str) -> str:
    """The full id of the schedule `ref` names: its id, or a start of it among the schedules
    the caller can see (`resolve_id`)."""
    # As the services say of a whole id.
    unknown = "no schedule with this id that you can see"
    return resolve_id(ctx, ref, "schedule", _schedules_starting, unknown=unknown)


def _schedules_starting(client: Client, prefix: str) -> list[tuple[str, str]]:
    """(id, subject's name) of each schedule the caller can see whose id starts `prefix`."""
    names = dict(client.subjects("query") + client.subjects("report"))
    found = []
    for view in client.list_schedules()["items"]:
        if str(view["id"]).startswith(prefix):
            subject_id = str(view["query_id"] or view["report_id"])
            found.append((str(view["id"]), names.get(subject_id, subject_id)))
    return found


def _set_enabled(ctx: typer.Context, schedule_id: str, *, enabled: bool) -> dict[str, Any]:
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    with client_of(ctx) as client, refused_by_option(FAILED):
        return client.update_schedule(schedule_id, {"enabled": enabled})


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
    with client_of(ctx) as client, server_errors():
        client.delete_schedule(schedule_id)
    out.print(f"deleted schedule {schedule_id}", highlight=False, soft_wrap=True)


@schedules_app.command("run-now")
def schedules_run_now(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Fire a schedule now (paused or not) and print the export's id."""
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    with client_of(ctx) as client, server_errors():
        export_id = client.run_schedule(schedule_id)["id"]
    print(export_id)


@schedules_app.command("signing-key")
def schedules_signing_key(ctx: typer.Context) -> None:
    """Print the workspace's webhook signing key (workspace admins).

    Receivers verify X-QExport-Signature with it."""
    with client_of(ctx) as client, server_errors():
        key = client.signing_key()["key"]
    print(key)


# ---------------------------------------------------------------- subscribing oneself


@schedules_app.command("subscribe")
def schedules_subscribe(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Mail each run's export to your own address too; you do not become its owner."""
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    with client_of(ctx) as client, server_errors():
        email = client.subscribe(schedule_id)["email"]
    out.print(
        f"subscribed to schedule {schedule_id}: each run's export is mailed to {email}",
        highlight=False,
        soft_wrap=True,
    )


@schedules_app.command("unsubscribe")
def schedules_unsubscribe(ctx: typer.Context, schedule_id: Annotated[str, _SCHEDULE_ID]) -> None:
    """Stop mailing a schedule's exports to you (also once you may no longer see it)."""
    schedule_id = resolve_schedule_id(ctx, schedule_id)
    with client_of(ctx) as client, server_errors():
        client.unsubscribe(schedule_id)
    out.print(f"unsubscribed from schedule {schedule_id}", highlight=False, soft_wrap=True)
