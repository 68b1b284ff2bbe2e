"""Who may still have what they asked for: the rule checked when an export is claimed."""

from __future__ import annotations

from qexport.domain.accounts import Standing
from qexport.domain.exports import ExportRecord
from qexport.domain.queries import Query, can_read
from qexport.domain.reports import ReportSubject


def pre_run_refusal(
    export: ExportRecord, subject: Query | ReportSubject | None, standing: Standing
) -> str | None:
    """Why an export may not start (None: it may): its query or report (or any query in it)
    is gone or unreadable to its requester, or the requester left the workspace or was
    disabled. The queue asks it as it claims (`ExportQueue.claim_next(admit=...)`), so such
    an export settles `failed/access_lost` instead of running."""
    if not standing.member:
        return "the requester is no longer a member of the workspace"
    if standing.disabled:
        return "the requester's account is disabled"
    if isinstance(subject, ReportSubject):
        return subject.refusal(export.requester)
    if can_read(export.requester, subject):
        return None
    return "the requester may no longer read this query, or it was deleted"
