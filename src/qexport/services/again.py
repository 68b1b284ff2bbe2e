"""Request again: a new export of a settled one's subject, format, parameters and options.

It goes through the same request service as any request (`requests.request`): the subject
must still be there and readable by the person asking now, the parameters still bind, every
cap applies, and the new export runs with the asker's rights, not the first requester's.
Recipients are not copied: asking again for a file is not sending it to others (a schedule's
"Run now" is).
"""

from __future__ import annotations

from qexport.domain.accounts import Principal
from qexport.domain.approvals import ApprovalRequest
from qexport.domain.commands import RequestAgain, RequestExport, SubjectKind, SubjectRef
from qexport.domain.exports import ExportRecord
from qexport.domain.failures import ConflictError, NotFoundError
from qexport.domain.reports import SUBJECT_REPORT
from qexport.services.deps import Deps
from qexport.services.exports import get_visible_export
from qexport.services.requests import request


class SubjectGoneError(NotFoundError):
    """The export's query or report was deleted, or the asker may no longer read it."""


def request_again(
    deps: Deps, principal: Principal, command: RequestAgain
) -> ExportRecord | ApprovalRequest:
    """The new export (queued) of a settled export the caller may see; NotFoundError for one
    they cannot see, ConflictError while it is unsettled, SubjectGoneError when its subject
    is gone or unreadable, and the request's own refusals (parameters, caps) as they are."""
    record = get_visible_export(
        deps.exports,
        principal.requester,
        command.export_id,
        whole_workspace=principal.sees_workspace,
    )
    if not record.settled:
        raise ConflictError("this export is still queued or running; cancel it or wait for it")
    kind: SubjectKind = "report" if record.subject_type == SUBJECT_REPORT else "query"
    again = RequestExport(
        SubjectRef(kind, record.subject_id),
        record.format,
        dict(record.parameters),
        bool(record.options.get("neutralize_formulas", True)),
    )
    try:
        return request(deps, principal, again)
    except NotFoundError:
        raise SubjectGoneError(
            f"the {kind} {record.subject_name!r} was deleted, or you may no longer read it"
            " (or a query in it): it cannot be requested again"
        ) from None
