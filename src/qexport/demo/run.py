"""`qexport demo`: the whole job on the embedded default, in one process."""

from __future__ import annotations

import contextlib
import functools
import secrets
import threading
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from qexport import bootstrap
from qexport.bootstrap import DEMO_SOURCE
from qexport.container import Container
from qexport.demo.schedule import (
    DemoReceiver,
    delivery_line,
    receiver_allowed,
    register_demo_schedule,
)
from qexport.domain.accounts import Role, new_api_token
from qexport.domain.approvals import ApprovalRequest
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester, effective_status
from qexport.domain.failures import readable_detail
from qexport.domain.formats import QUERY_FORMATS, REPORT_FORMATS
from qexport.domain.humanize import human_size
from qexport.domain.queries import Parameter, ParamType, Query
from qexport.domain.reports import SUBJECT_REPORT, Display, Report, Section
from qexport.domain.schedules import Schedule
from qexport.ports import AccountStore, Clock, UserStore
from qexport.scheduler.loop import Scheduler
from qexport.services.accounts import hash_password, local_principal
from qexport.services.describe import describe_statement, describe_timeout
from qexport.services.requests import request
from qexport.services.schedules.tick import run_now
from qexport.services.signing import signing_key
from qexport.sources.demo_data import build_demo_database
from qexport.worker.loop import Worker

DEMO_QUERIES = (
    Query(
        id="",
        workspace_id="",
        name="orders",
        sql=(
            "SELECT o.order_id, o.ordered_at, c.name AS customer, p.name AS product,\n"
            "       o.quantity, o.unit_price, o.total, o.status, o.note\n"
            "FROM orders o\n"
            "JOIN customers c ON c.customer_id = o.customer_id\n"
            "JOIN products p ON p.product_id = o.product_id\n"
            "WHERE o.ordered_at >= $since\n"
            "ORDER BY o.order_id"
        ),
        source=DEMO_SOURCE,
        parameters=(Parameter("since", ParamType.DATE, required=False, default="2000-01-01"),),
    ),
    Query(
        id="",
        workspace_id="",
        name="revenue_by_month",
        sql=(
            "SELECT date_trunc('month', o.ordered_at)::DATE AS month, p.category,\n"
            "       count(*) AS orders, sum(o.total) AS revenue\n"
            "FROM orders o JOIN products p ON p.product_id = o.product_id\n"
            "GROUP BY ALL ORDER BY month, p.category"
        ),
        source=DEMO_SOURCE,
    ),
    Query(
        id="",
        workspace_id="",
        name="my_customers",
        sql=(
            "SELECT customer_id, name, email, country FROM customers\n"
            "WHERE workspace_id = $workspace_id ORDER BY customer_id LIMIT $max_rows"
        ),
        source=DEMO_SOURCE,
        parameters=(Parameter("max_rows", ParamType.INTEGER, required=False, default="100"),),
    ),
)


def register_demo_queries(deps: Container, requester: Requester) -> list[Query]:
    """Save the demo queries in the requester's workspace (once; kept if already there),
    described by the demo source like any saved query."""
    saved = []
    for template in DEMO_QUERIES:
        existing = deps.catalog.find_query(requester.workspace_id, template.name)
        if existing is None:
            described = describe_statement(
                deps.sources,
                deps.previews,
                requester,
                source=template.source,
                sql=template.sql,
                parameters=template.parameters,
                timeout_seconds=describe_timeout(deps.settings.statement_timeout_seconds),
            )
            existing = deps.catalog.add_query(
                Query(
                    **{
                        **template.__dict__,
                        "id": str(uuid.uuid4()),
                        "workspace_id": requester.workspace_id,
                        "owner": requester.user_id,
                        "columns": described.columns,
                        "reads": described.reads,
                    }
                )
            )
        saved.append(existing)
    return saved


DEMO_REPORT_TITLE = "Demo sales report"


def register_demo_report(deps: Container, requester: Requester, queries: list[Query]) -> Report:
    """Save the sample report (a table and a chart over the demo queries), once."""
    for report in deps.catalog.list_reports(requester.workspace_id):
        if report.title == DEMO_REPORT_TITLE and not report.deleted:
            return report
    by_name = {q.name: q for q in queries}
    return deps.catalog.add_report(
        Report(
            id=str(uuid.uuid4()),
            workspace_id=requester.workspace_id,
            title=DEMO_REPORT_TITLE,
            description="Revenue per month and the first orders, from the demo dataset.",
            sections=(
                # One row per month and category: a line per category, revenue and order
                # counts in panels of their own (their scales differ a thousandfold).
                Section(
                    "Revenue per month",
                    by_name["revenue_by_month"].id,
                    display=Display.LINE,
                    series="category",
                    values=("revenue", "orders"),
                ),
                Section("First orders", by_name["orders"].id, row_cap=500),
            ),
            owner=requester.user_id,
        )
    )


DEMO_SCHEDULE_QUERY = "revenue_by_month"


def demo_receiver(deps: Container, requester: Requester) -> DemoReceiver:
    """The demo's webhook receiver, verifying with the requester's workspace signing key."""
    schedules = deps.schedules
    key = functools.cache(
        lambda: signing_key(deps.settings, schedules, deps.clock, requester.workspace_id)
    )
    return DemoReceiver(key)


def run_demo(
    deps: Container,
    requester: Requester,
    *,
    rows: int,
    console: Console,
    receiver: DemoReceiver | None = None,
) -> int:
    """Build data, register queries and a schedule, run a worker, export every format, fire
    the schedule and deliver it to a local webhook receiver; 0 when every export succeeds."""
    started = time.monotonic()
    with console.status(f"Building the demo dataset ({rows:,} orders)..."):
        build_demo_database(deps.settings.demo_database, orders=rows)
    queries = register_demo_queries(deps, requester)
    report = register_demo_report(deps, requester, queries)
    console.print(f"✓ demo data in {deps.settings.demo_database}, queries saved")

    with contextlib.ExitStack() as stack:
        if receiver is None:
            receiver = stack.enter_context(demo_receiver(deps, requester))
        schedules = deps.schedules
        query = next(q for q in queries if q.name == DEMO_SCHEDULE_QUERY)
        schedule = register_demo_schedule(schedules, deps.clock, requester, query, receiver.url)
        acting = local_principal(deps.accounts, requester)
        orders, summary = (
            SubjectRef("query", "orders", by_name=True),
            SubjectRef("report", report.id),
        )
        records = [
            _queued(request(deps, acting, RequestExport(orders, fmt))) for fmt in QUERY_FORMATS
        ] + [
            _queued(request(deps, acting, RequestExport(summary, fmt)))
            for fmt in sorted(REPORT_FORMATS)
        ]
        scheduled = run_now(deps.catalog, schedules, deps.clock, schedule, accounts=deps.accounts)
        labels = {r.id: _label(r) for r in records} | {scheduled.id: f"schedule {scheduled.format}"}
        records = _produce(deps, [*records, scheduled], labels, rows, console)
        _print_results(deps, records, labels, console)
        _deliver(deps, schedule, scheduled, receiver, console)
    failed = [r for r in records if r.status.value != "succeeded"]
    console.print(f"\nFinished in {time.monotonic() - started:.1f} s.")
    if failed:  # never a "try next" on what did not work
        console.print(
            f"{len(failed)} of {len(records)} exports did not succeed: the table above says"
            " why (`qexport exports get ID` has the whole reason)."
        )
        return 1
    _print_next_steps(deps, records, console)
    return 0


def _queued(record: ExportRecord | ApprovalRequest) -> ExportRecord:
    """The demo's requests name no policy, so none waits for an approval."""
    assert isinstance(record, ExportRecord), "the demo workspace has no sensitive queries"
    return record


def _label(record: ExportRecord) -> str:
    if record.subject_type == SUBJECT_REPORT:
        return f"report {record.format}"
    return record.format


def _produce(
    deps: Container,
    records: list[ExportRecord],
    labels: dict[str, str],
    total_rows: int,
    console: Console,
) -> list[ExportRecord]:
    """Run an in-process worker until every export settled; the settled records."""
    worker = Worker(deps, concurrency=2)
    thread = threading.Thread(target=worker.run, name="demo-worker", daemon=True)
    thread.start()
    try:
        return _watch(deps, records, labels, total_rows, console)
    finally:
        worker.stop(grace_seconds=5)
        thread.join()


def _deliver(
    deps: Container,
    schedule: Schedule,
    export: ExportRecord,
    receiver: DemoReceiver,
    console: Console,
) -> None:
    """Send the scheduled export's deliveries once and print what became of each."""
    subject = export.subject_name
    try:
        dispatcher = bootstrap.dispatcher(deps, settings=receiver_allowed(deps.settings))
        try:
            dispatcher.run_once()
        finally:
            dispatcher.close()
        sent = deps.deliveries.list_deliveries(export.id)
    except Exception as exc:  # the demo reports a delivery problem; it never dies of one
        console.print(f"schedule {subject!r}: its deliveries could not be sent: {exc}")
        return
    of_failure = "" if export.status.value == "succeeded" else " (the notice of its failure)"
    for delivery in sent:
        line = delivery_line(schedule, subject, delivery, receiver)
        console.print(line + of_failure, highlight=False, soft_wrap=True)


def _watch(
    deps: Container,
    records: list[ExportRecord],
    labels: dict[str, str],
    total_rows: int,
    console: Console,
) -> list[ExportRecord]:
    with Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        TextColumn("{task.completed:>12,.0f} rows"),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        tasks = {
            r.id: progress.add_task(labels[r.id], total=total_rows, status="queued")
            for r in records
        }
        while True:
            current = [deps.exports.get_export(r.id) or r for r in records]
            for r in current:
                progress.update(tasks[r.id], completed=r.progress_rows, status=r.status.value)
            if all(r.settled for r in current):
                return current
            time.sleep(0.2)


def _print_results(
    deps: Container, records: list[ExportRecord], labels: dict[str, str], console: Console
) -> None:
    now = deps.clock.now()
    table = Table("format", "status", "rows", "size", title="Exports")
    table.add_column("file", overflow="fold")
    for r in records:
        path = ""
        if deps.local_files is not None and r.status.value == "succeeded":
            path = _display_path(deps.local_files.local_path(r.storage_key))
        status = effective_status(r, now)
        if r.failure_code:
            status += f" ({r.failure_code.value}: {readable_detail(r.failure_detail)})"
        table.add_row(
            labels[r.id],
            status,
            f"{r.row_count:,}" if r.row_count is not None else "",
            human_size(r.size_bytes),
            path,
        )
    console.print(table)


def _display_path(path: Path) -> str:
    """Relative to the current directory when it is below it: shorter to read and copy."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _print_next_steps(deps: Container, records: list[ExportRecord], console: Console) -> None:
    first = records[0].id
    console.print(
        "\nTry next:\n"
        "  .venv/bin/qexport exports list\n"
        f"  .venv/bin/qexport exports get {first} --json\n"
        f"  .venv/bin/qexport exports download {first}   # here, under its file name\n"
        "  .venv/bin/qexport exports create --query orders --format xlsx"
        " --param since=2025-01-01 --wait\n"
        "  .venv/bin/qexport queries list\n"
        "  .venv/bin/qexport schedules list\n"
        "  .venv/bin/qexport scheduler   # fires schedules and sends their deliveries\n"
        f"Files are kept for {deps.settings.retention.days} days, then refused as expired.",
        soft_wrap=True,
    )


# ---------------------------------------------------------------- demo --serve


DEMO_EMAIL_DOMAIN = "example.com"


def demo_admin(deps: Container, requester: Requester) -> str | None:
    """Make the demo's requester an admin of its workspace (`<user id>@example.com`, once),
    as the first account of an installation is; a new password for a user made now (shown
    once), None for one that was there."""
    now = deps.clock.now()
    deps.accounts.ensure_workspace(requester.workspace_id, now=now)
    user = deps.accounts.get_user(requester.user_id)
    password = None
    if user is None:
        password = secrets.token_urlsafe(12)
        user = deps.accounts.create_user(
            f"{requester.user_id}@{DEMO_EMAIL_DOMAIN}",
            password_hash=hash_password(password),
            now=now,
            user_id=requester.user_id,
        )
    if deps.accounts.role_of(requester.workspace_id, user.id) is not Role.ADMIN:
        deps.accounts.set_role(requester.workspace_id, user.id, Role.ADMIN)
    return password


def demo_token(accounts: AccountStore, clock: Clock, requester: Requester) -> str:
    """A new API token for the demo's requester (an admin, demo_admin), so that the API
    shows the demo's exports."""
    token_id, token, secret_hash = new_api_token()
    accounts.add_token(
        token_id=token_id,
        user_id=requester.user_id,
        workspace_id=requester.workspace_id,
        secret_hash=secret_hash,
        now=clock.now(),
    )
    return token


def demo_password(accounts: UserStore, requester: Requester) -> str:
    """A new random password for the demo's user, so that a person can sign in to the web
    pages; the one of an earlier run stops working."""
    password = secrets.token_urlsafe(12)
    accounts.set_password(requester.user_id, hash_password(password))
    return password


def serve_demo(
    deps: Container, requester: Requester, *, host: str, port: int, console: Console
) -> None:
    """Serve the API with a worker and a scheduler in this process until Ctrl-C (or SIGTERM)."""
    from qexport.api.server import local_url, run_server
    from qexport.app import create_app

    demo_admin(deps, requester)
    token = demo_token(deps.accounts, deps.clock, requester)
    password = demo_password(deps.accounts, requester)
    url = local_url(host, port)
    user = deps.accounts.get_user(requester.user_id)
    email = user.email if user else requester.user_id
    console.print(
        f"\nServing the API at {url} (interactive docs: {url}/docs)\n"
        f"Sign in at {url} as {email} with password {password}\n"
        f"Token for {email} (admin of workspace {requester.workspace_id!r}):\n"
        f"  {token}\n"
        "Try:\n"
        f"  curl -H 'Authorization: Bearer {token}' {url}/api/v1/exports\n"
        f"  curl -H 'Authorization: Bearer {token}' {url}/api/v1/schedules\n"
        f"  QEXPORT_URL={url} QEXPORT_TOKEN={token} .venv/bin/qexport exports list\n"
        "Press Ctrl-C to stop.",
        soft_wrap=True,
        highlight=False,
    )
    worker = Worker(deps, concurrency=2)
    thread = threading.Thread(target=worker.run, name="demo-worker", daemon=True)
    thread.start()
    wakeups = bootstrap.listener(deps.settings, worker.wake)
    if wakeups is not None:
        wakeups.start()
    dispatcher = bootstrap.dispatcher(deps, settings=receiver_allowed(deps.settings))
    scheduler = Scheduler(deps, dispatcher=dispatcher)
    scheduling = threading.Thread(target=scheduler.run, name="demo-scheduler", daemon=True)
    scheduling.start()
    try:
        run_server(create_app(deps), host, port)
    finally:
        scheduler.stop()
        if wakeups is not None:
            wakeups.stop()
        worker.stop(grace_seconds=5)
        thread.join()
        scheduling.join()
        dispatcher.close()
    console.print("Stopped.")
