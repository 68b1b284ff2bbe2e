"""Request again: a new export of a settled one's subject, format, parameters and options.

It goes through the same request service as any request (`request_export`,
`request_report_export`): the subject must still be there and readable by the person asking
now, the parameters still bind, every cap applies, and the new export runs with the asker's
rights, not the first requester's. Recipients are not copied: asking again for a file is not
sending it to others (a schedule's "Run now" is).
"""

from __future__ import annotations

from qexport.domain.accounts import Principal
from qexport.domain.approvals import ApprovalRequest
from qexport.domain.exports import ExportRecord
from qexport.domain.failures import ConflictError, NotFoundError
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.reports import SUBJECT_REPORT
from qexport.ports import Catalog, Clock, ExportQueue
from qexport.services.approvals import ApprovalDesk
from qexport.services.exports import get_visible_export
from qexport.services.requests import request_export, request_report_export


class SubjectGoneError(NotFoundError):
    """The export's query or report was deleted, or the asker may no longer read it."""


def request_again(
    exports: ExportQueue,
    catalog: Catalog,
    clock: Clock,
    principal: Principal,
    export_id: str,
    *,
    max_unsettled: int | None = None,
    policy: WorkspacePolicy | None = None,
    approvals: ApprovalDesk | None = None,
) -> ExportRecord | ApprovalRequest:
    """The new export (queued) of a settled export the caller may see; NotFoundError for one
    they cannot see, ConflictError while it is unsettled, SubjectGoneError when its subject
    is gone or unreadable, and the request's own refusals (parameters, caps) as they are."""
    record = get_visible_export(
        exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    if not record.settled:
        raise ConflictError("this export is still queued or running; cancel it or wait for it")
    neutralize = bool(record.options.get("neutralize_formulas", True))
    parameters = dict(record.parameters)
    try:
        if record.subject_type == SUBJECT_REPORT:
            return request_report_export(
                exports,
                catalog,
                clock,
                principal.requester,
                report_ref=record.subject_id,
                fmt=record.format,
                parameters=parameters,
                neutralize_formulas=neutralize,
                max_unsettled=max_unsettled,
                policy=policy,
                approvals=approvals,
            )
        return request_export(
            exports,
            catalog,
            clock,
            principal.requester,
            query_ref=record.subject_id,
            fmt=record.format,
            parameters=parameters,
            neutralize_formulas=neutralize,
            match_name=False,
            max_unsettled=max_unsettled,
            policy=policy,
            approvals=approvals,
        )
    except NotFoundError:
        what = "report" if record.subject_type == SUBJECT_REPORT else "query"
        raise SubjectGoneError(
            f"the {what} {record.subject_name!r} was deleted, or you may no longer read it"
            " (or a query in it): it cannot be requested again"
        ) from None
