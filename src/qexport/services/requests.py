"""Request an export: validate everything up front, then record it (and queue it) at once.

`request` is the one way in: every door hands it a `RequestExport` and who is acting, and it
reads the workspace's policy, its caps and its recipient rules itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from qexport.domain.accounts import Principal
from qexport.domain.approvals import APPROVAL_OPTION, APPROVED_READS_OPTION, ApprovalRequest
from qexport.domain.commands import RequestExport, SubjectKind, SubjectRef
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    Problems,
    in_field_order,
)
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.reports import SUBJECT_REPORT
from qexport.domain.schedules import NewDelivery, Recipient
from qexport.ports import Catalog, Clock, ExportQueue, NewExport
from qexport.services.approvals import ApprovalDesk, ask
from qexport.services.audit import export_requested
from qexport.services.deps import Deps
from qexport.services.recipients import RecipientRules, admit_recipients
from qexport.services.subjects import (
    check_allowed_format,
    check_any_format,
    check_kind_format,
    readable_subject,
)

if TYPE_CHECKING:
    pass

# The order a request's problems are told in: the new-export form's, then the API's extras.
REQUEST_FIELDS = ("query_id", "report_id", "format", "parameters", "options", "notify")
T = TypeVar("T")


@dataclass(frozen=True)
class Admission:
    """What a request is admitted under besides its own content: the requester's cap of
    unsettled exports, the recipients already admitted from its `notify` (and the mistakes
    found reading it), the workspace's policy, and the desk that sensitive subjects wait at
    (None: a path that cannot wait for an admin, which refuses them)."""

    max_unsettled: int | None = None
    notify: Sequence[Recipient] = ()
    found: Sequence[InvalidRequestError] = ()
    policy: WorkspacePolicy | None = None
    approvals: ApprovalDesk | None = None


def request(
    deps: Deps,
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
    admission = Admission(
        max_unsettled=deps.settings.max_unsettled_per_user,
        notify=notify,
        found=found.found(),
        policy=policy,
        approvals=deps.approval_desk(),
    )
    return record_request(
        deps.exports, deps.catalog, deps.clock, principal.requester, command, admission
    )


def record_request(
    exports: ExportQueue,
    catalog: Catalog,
    clock: Clock,
    requester: Requester,
    command: RequestExport,
    admission: Admission = Admission(),
) -> ExportRecord | ApprovalRequest:
    """Validate the request and record it as queued (with a delivery per recipient admitted,
    in the same transaction); bad input records nothing. Every mistake is refused at once,
    with those `admission.found` reading the request (its `notify`, say).

    With `admission.max_unsettled`, a requester who already has that many queued or running
    exports is refused (TooManyRequestsError), checked in the inserting transaction.

    A subject whose reads the policy marks sensitive (a query by what it reads or by its id; a
    report by any of its queries) is not queued: the request is recorded as awaiting an
    admin's approval (`admission.approvals`), and that is what is returned. A subject the
    requester cannot read (a report: or one of its queries) is NotFoundError.
    """
    policy = admission.policy
    problems = Problems(admission.found)
    if command.subject is None:
        _refuse_without_subject(problems, command.format)
    ref: SubjectRef = command.subject
    with problems.check():
        check_kind_format(ref.kind, command.format)  # refused whether or not it exists
        check_allowed_format(policy, command.format)
    subject = _found(problems, lambda: readable_subject(catalog, requester, ref))
    values: dict[str, Any] = {}
    with problems.check():
        values = subject.bind(command.parameters)
    _check_options(problems, command.neutralize_formulas)
    problems.raise_any(in_field_order(REQUEST_FIELDS))
    new = subject.new_export(
        requester,
        command.format,
        values,
        neutralize_formulas=command.neutralize_formulas,
        now=clock.now(),
    )
    if policy is not None and policy.needs_approval(subject.reads):
        return _awaiting(admission.approvals, clock, new, admission.notify, subject.fingerprint())
    return exports.insert_export(
        new,
        new_deliveries(admission.notify),
        max_unsettled=admission.max_unsettled,
        audit=export_requested(clock, new, len(admission.notify)),
    )


def _refuse_without_subject(found: Problems, fmt: str) -> NoReturn:
    """A request that names no single subject: refused with its other mistakes."""
    found.add(InvalidRequestError("give exactly one of query_id and report_id", field="query_id"))
    with found.check():
        check_any_format(fmt)
    every = InvalidRequestError.of(found.found()).problems
    raise InvalidRequestError.of(sorted(every, key=in_field_order(REQUEST_FIELDS)))


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
        kind: SubjectKind = "report" if request.subject_type == SUBJECT_REPORT else "query"
        subject = readable_subject(catalog, requester, SubjectRef(kind, request.subject_id))
        new = subject.new_export(
            requester,
            request.format,
            subject.bind(request.parameters),
            neutralize_formulas=bool(request.options.get("neutralize_formulas", True)),
            now=clock.now(),
        )
        read = subject.fingerprint()
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


def new_deliveries(
    recipients: Sequence[Recipient], schedule_id: str | None = None
) -> list[NewDelivery]:
    """One delivery per recipient, each with its own idempotency key."""
    return [NewDelivery(str(uuid.uuid4()), r, schedule_id) for r in recipients]
