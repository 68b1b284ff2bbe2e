"""Request an export: validate everything up front, then record it (and queue it) at once.

`request` is the one way in: every door hands it a `RequestExport` and who is acting, and it
reads the workspace's policy, its caps and its recipient rules itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from qexport.domain.accounts import Principal
from qexport.domain.approvals import (
    APPROVAL_OPTION,
    APPROVED_READS_OPTION,
    ApprovalRequest,
    reads_fingerprint,
)
from qexport.domain.commands import RequestExport
from qexport.domain.exports import ExportRecord, Requester, safe_filename, storage_key
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    Problems,
    in_field_order,
)
from qexport.domain.formats import QUERY_FORMATS, REPORT_FORMATS, query_format
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import (
    Query,
    bind_parameters,
    can_read,
    export_filename,
    to_json_value,
)
from qexport.domain.reports import (
    SUBJECT_REPORT,
    Report,
    bind_report_parameters,
)
from qexport.domain.schedules import NewDelivery, Recipient
from qexport.ports import AccountStore, Catalog, Clock, ExportQueue, NewExport
from qexport.services.approvals import ApprovalDesk, ask
from qexport.services.audit import export_requested
from qexport.services.recipients import RecipientRules, admit_recipients
from qexport.services.reports import find_readable_report, report_queries

if TYPE_CHECKING:
    from qexport.config import Settings

SUBJECT_QUERY = "query"
# The order a request's problems are told in: the new-export form's, then the API's extras.
REQUEST_FIELDS = ("query_id", "report_id", "format", "parameters", "options", "notify")
MAX_PARAMETERS = 64  # far more than any query declares; bounds the work a request can ask for
MAX_REF_CHARS = 200  # the longest query id or name worth a lookup
T = TypeVar("T")


class RequestDeps(Protocol):
    """What handling a request reads and writes (the container has it all)."""

    @property
    def exports(self) -> ExportQueue: ...
    @property
    def catalog(self) -> Catalog: ...
    @property
    def accounts(self) -> AccountStore: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def settings(self) -> Settings: ...
    def approval_desk(self) -> ApprovalDesk: ...


def request(
    deps: RequestDeps,
    principal: Principal,
    command: RequestExport,
) -> ExportRecord | ApprovalRequest:
    """Handle a request from any door: the export recorded as queued (with a delivery per
    recipient), or, for a subject the workspace's policy marks sensitive, the approval request
    an admin answers. Every mistake is refused at once (InvalidRequestError, naming each
    field), and nothing is recorded; the requester's cap of unsettled exports applies
    (TooManyRequestsError); recipients are admitted by the rules of the principal's role
    (ForbiddenError for one it may not name)."""
    workspace = principal.workspace_id
    policy = deps.accounts.workspace_policy(workspace)
    found = Problems()
    notify: tuple[Recipient, ...] = ()
    if command.notify:  # the rules take a read of their own: only for recipients to admit
        rules = RecipientRules(
            role=principal.role,
            own_email=principal.email or None,
            webhook_hosts=deps.accounts.workspace_webhook_hosts(workspace),
            egress=deps.settings.egress_policy(),
            policy=policy,
        )
        with found.check():
            notify = admit_recipients(command.notify, rules, "notify")
    subject = command.subject
    if subject is None:
        _refuse_without_subject(found, command.format)
    common: dict[str, Any] = {
        "fmt": command.format,
        "parameters": dict(command.parameters),
        "neutralize_formulas": command.neutralize_formulas,
        "max_unsettled": deps.settings.max_unsettled_per_user,
        "notify": notify,
        "found": found.found(),
        "policy": policy,
        "approvals": deps.approval_desk(),
    }
    args = (deps.exports, deps.catalog, deps.clock, principal.requester)
    if subject.kind == SUBJECT_REPORT:
        return request_report_export(
            *args, report_ref=subject.ref, match_title=subject.by_name, **common
        )
    return request_export(*args, query_ref=subject.ref, match_name=subject.by_name, **common)


def _refuse_without_subject(found: Problems, fmt: str) -> NoReturn:
    """A request that names no single subject: refused with its other mistakes."""
    found.add(InvalidRequestError("give exactly one of query_id and report_id", field="query_id"))
    with found.check():
        check_any_format(fmt)
    every = InvalidRequestError.of(found.found()).problems
    raise InvalidRequestError.of(sorted(every, key=in_field_order(REQUEST_FIELDS)))


def find_readable_query(
    store: Catalog, requester: Requester, ref: str, *, match_name: bool = True
) -> Query:
    """A query by id (or, with `match_name`, by name) that the requester may read;
    NotFoundError otherwise, whether it is missing or unreadable."""
    query = store.get_query(ref) if len(ref) <= MAX_REF_CHARS else None
    if (query is None or query.deleted) and match_name and len(ref) <= MAX_REF_CHARS:
        query = store.find_query(requester.workspace_id, ref)
    if query is None or not can_read(requester, query):
        raise NotFoundError(f"no query {ref!r} that you can read")
    return query


def request_export(
    exports: ExportQueue,
    catalog: Catalog,
    clock: Clock,
    requester: Requester,
    *,
    query_ref: str,
    fmt: str,
    parameters: dict[str, Any] | None = None,
    neutralize_formulas: bool = True,
    match_name: bool = True,
    max_unsettled: int | None = None,
    notify: Sequence[Recipient] = (),
    found: Sequence[InvalidRequestError] = (),
    policy: WorkspacePolicy | None = None,
    approvals: ApprovalDesk | None = None,
) -> ExportRecord | ApprovalRequest:
    """Validate the request and record it as queued (with a delivery per `notify` recipient,
    in the same transaction); bad input records nothing. Every mistake is refused at once,
    with those the caller `found` reading the request (its `notify`, say).

    With `max_unsettled`, a requester who already has that many queued or running exports
    is refused (TooManyRequestsError), checked in the inserting transaction.

    A query the `policy` marks sensitive (by what it reads, or by its id) is not queued: the
    request is recorded as awaiting an admin's approval (`approvals`), and that is what is
    returned.
    """
    problems = Problems(found)
    with problems.check():
        query_format(fmt)  # a bad format is refused whether or not the query exists
        check_allowed_format(policy, fmt)
    query = _found(
        problems, lambda: find_readable_query(catalog, requester, query_ref, match_name=match_name)
    )
    values: dict[str, Any] = {}
    with problems.check():
        values = bind_query_values(query, parameters or {})
    _check_options(problems, neutralize_formulas)
    problems.raise_any(in_field_order(REQUEST_FIELDS))
    new = query_export(
        requester, query, fmt, values, neutralize_formulas=neutralize_formulas, now=clock.now()
    )
    if policy is not None and policy.needs_approval([query]):
        return _awaiting(approvals, clock, new, notify, reads_fingerprint([query]))
    return exports.insert_export(
        new,
        new_deliveries(notify),
        max_unsettled=max_unsettled,
        audit=export_requested(clock, new, len(notify)),
    )


def request_report_export(
    exports: ExportQueue,
    catalog: Catalog,
    clock: Clock,
    requester: Requester,
    *,
    report_ref: str,
    fmt: str,
    parameters: dict[str, Any] | None = None,
    neutralize_formulas: bool = True,
    match_title: bool = False,
    max_unsettled: int | None = None,
    notify: Sequence[Recipient] = (),
    found: Sequence[InvalidRequestError] = (),
    policy: WorkspacePolicy | None = None,
    approvals: ApprovalDesk | None = None,
) -> ExportRecord | ApprovalRequest:
    """Validate a report export request and record it as queued; bad input records nothing.
    Every mistake is refused at once, as for a query; a report that holds a query the policy
    marks sensitive awaits an admin's approval, as such a query does.

    A report the requester cannot read, or with a query they cannot read, is NotFoundError.
    """
    problems = Problems(found)
    with problems.check():
        check_report_format(fmt)
        check_allowed_format(policy, fmt)
    report = _found(
        problems,
        lambda: find_readable_report(catalog, requester, report_ref, match_title=match_title),
    )
    values: dict[str, Any] = {}
    with problems.check():
        values = bind_report_values(catalog, requester, report, parameters or {})
    _check_options(problems, neutralize_formulas)
    problems.raise_any(in_field_order(REQUEST_FIELDS))
    new = report_export(
        requester, report, fmt, values, neutralize_formulas=neutralize_formulas, now=clock.now()
    )
    read = report_queries(catalog, requester, report).values()
    if policy is not None and policy.needs_approval(read):
        return _awaiting(approvals, clock, new, notify, reads_fingerprint(read, report))
    return exports.insert_export(
        new,
        new_deliveries(notify),
        max_unsettled=max_unsettled,
        audit=export_requested(clock, new, len(notify)),
    )


def _awaiting(
    approvals: ApprovalDesk | None,
    clock: Clock,
    new: NewExport,
    notify: Sequence[Recipient],
    fingerprint: str,
) -> ApprovalRequest:
    if approvals is None:  # a path that cannot wait for an admin (a schedule's run)
        raise ForbiddenError(
            f"the workspace's policy marks what {new.subject_name!r} reads sensitive: its"
            " exports need an admin's approval, asked for from the pages, the API or"
            " `qexport exports create`"
        )
    return ask(approvals, clock, new, notify, fingerprint)


def approved_export(
    catalog: Catalog, clock: Clock
) -> Callable[[ApprovalRequest, Requester], tuple[NewExport, str]]:
    """How an approved request becomes its export: its subject read and its parameters bound
    again now, with the requester's rights (NotFoundError, InvalidRequestError when that no
    longer works); with what it reads now (`reads_fingerprint`). The export carries its
    request's id and that fingerprint (APPROVAL_OPTION, APPROVED_READS_OPTION)."""

    def export_of(request: ApprovalRequest, requester: Requester) -> tuple[NewExport, str]:
        neutralize = bool(request.options.get("neutralize_formulas", True))
        if request.subject_type == SUBJECT_REPORT:
            report, values = bind_report_request(
                catalog, requester, request.subject_id, request.parameters
            )
            new = report_export(
                requester,
                report,
                request.format,
                values,
                neutralize_formulas=neutralize,
                now=clock.now(),
            )
            read = reads_fingerprint(report_queries(catalog, requester, report).values(), report)
        else:
            query = find_readable_query(catalog, requester, request.subject_id, match_name=False)
            new = query_export(
                requester,
                query,
                request.format,
                bind_query_values(query, request.parameters),
                neutralize_formulas=neutralize,
                now=clock.now(),
            )
            read = reads_fingerprint([query])
        options = {**new.options, APPROVAL_OPTION: request.id, APPROVED_READS_OPTION: read}
        return replace(new, options=options), read

    return export_of


def _found(problems: Problems, lookup: Callable[[], T]) -> T:
    """The subject; a missing or unreadable one is NotFoundError, unless the request is
    refused anyway (a bad format is refused the same whether or not the subject exists)."""
    try:
        return lookup()
    except NotFoundError:
        problems.raise_any(in_field_order(REQUEST_FIELDS))
        raise


def _check_options(problems: Problems, neutralize_formulas: object) -> None:
    if not isinstance(neutralize_formulas, bool):
        problems.add(
            InvalidRequestError(
                "neutralize_formulas must be true or false", field="options.neutralize_formulas"
            )
        )


def check_any_format(fmt: str) -> None:
    """A format some subject takes (when it is not yet known which)."""
    if fmt not in QUERY_FORMATS and fmt not in REPORT_FORMATS:
        names = ", ".join(dict.fromkeys((*QUERY_FORMATS, *sorted(REPORT_FORMATS))))
        raise InvalidRequestError(
            f"unknown format {fmt[:20]!r}; valid formats: {names}", field="format"
        )


def check_allowed_format(policy: WorkspacePolicy | None, fmt: str) -> None:
    """Refuse a format the workspace's policy does not allow (naming the policy)."""
    refusal = None if policy is None else policy.format_refusal(fmt)
    if refusal is not None:
        raise InvalidRequestError(refusal, field="format")


def check_report_format(fmt: str) -> None:
    if fmt not in REPORT_FORMATS:
        raise InvalidRequestError(
            f"unknown report format {fmt!r}; valid formats: {', '.join(sorted(REPORT_FORMATS))}",
            field="format",
        )


def bind_report_request(
    store: Catalog,
    requester: Requester,
    report_ref: str,
    parameters: dict[str, Any],
    *,
    match_title: bool = False,
) -> tuple[Report, dict[str, Any]]:
    """A report the requester may read (with every query in it) and the request's parameter
    values bound to it; errors name the field as `parameters.<name>`."""
    report = find_readable_report(store, requester, report_ref, match_title=match_title)
    return report, bind_report_values(store, requester, report, parameters)


def bind_report_values(
    store: Catalog, requester: Requester, report: Report, parameters: dict[str, Any]
) -> dict[str, Any]:
    """The request's parameter values bound to a readable report (NotFoundError when one of
    its queries is not); every problem at once, each named `parameters.<name>`."""
    queries = report_queries(store, requester, report)
    if len(parameters) > MAX_PARAMETERS:
        raise InvalidRequestError(
            f"at most {MAX_PARAMETERS} parameters may be given", field="parameters"
        )
    try:
        return bind_report_parameters(report, queries, parameters)
    except InvalidRequestError as exc:
        raise exc.within("parameters") from None


def query_export(
    requester: Requester,
    query: Query,
    fmt: str,
    values: dict[str, Any],
    *,
    neutralize_formulas: bool,
    now: datetime,
    filename_template: str | None = None,
) -> NewExport:
    """The record of an export of `query` with already bound parameter values; its file is
    named by `filename_template` (a schedule's), else by the query's template."""
    export_id = str(uuid.uuid4())
    filename = export_filename(
        filename_template or query.filename_template,
        name=query.name,
        fmt=fmt,
        extension=query_format(fmt).extension,
        values=values,
        at=now,
    )
    return NewExport(
        id=export_id,
        workspace_id=requester.workspace_id,
        requested_by=requester.user_id,
        subject_type=SUBJECT_QUERY,
        subject_id=query.id,
        subject_name=query.name,
        format=fmt,
        parameters={k: to_json_value(v) for k, v in values.items()},
        options={"neutralize_formulas": neutralize_formulas},
        filename=filename,
        storage_key=storage_key(requester.workspace_id, export_id, filename),
        created_at=now,
    )


def report_export(
    requester: Requester,
    report: Report,
    fmt: str,
    values: dict[str, Any],
    *,
    neutralize_formulas: bool,
    now: datetime,
    filename_template: str | None = None,
) -> NewExport:
    """The record of an export of `report` with already bound parameter values; named by
    its title, or by `filename_template` (a schedule's)."""
    export_id = str(uuid.uuid4())
    filename = (
        export_filename(
            filename_template, name=report.title, fmt=fmt, extension=fmt, values=values, at=now
        )
        if filename_template
        else safe_filename(report.title, fmt)
    )
    return NewExport(
        id=export_id,
        workspace_id=requester.workspace_id,
        requested_by=requester.user_id,
        subject_type=SUBJECT_REPORT,
        subject_id=report.id,
        subject_name=report.title,
        format=fmt,
        parameters=values,
        options={"neutralize_formulas": neutralize_formulas},
        filename=filename,
        storage_key=storage_key(requester.workspace_id, export_id, filename),
        created_at=now,
    )


def new_deliveries(
    recipients: Sequence[Recipient], schedule_id: str | None = None
) -> list[NewDelivery]:
    """One delivery per recipient, each with its own idempotency key."""
    return [NewDelivery(str(uuid.uuid4()), r, schedule_id) for r in recipients]


def bind_query_values(query: Query, parameters: dict[str, Any]) -> dict[str, Any]:
    """Typed parameter values; errors name the field as `parameters.<name>`."""
    if len(parameters) > MAX_PARAMETERS:
        raise InvalidRequestError(
            f"at most {MAX_PARAMETERS} parameters may be given", field="parameters"
        )
    try:
        return bind_parameters(query, parameters)
    except InvalidRequestError as exc:
        raise exc.within("parameters") from None
