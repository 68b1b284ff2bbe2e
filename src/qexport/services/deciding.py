"""Deciding an export request that waits for an admin's approval: one handler for every door
(the API, the approvals page, `qexport approvals approve|deny`)."""

from __future__ import annotations

from qexport.domain.accounts import Principal
from qexport.domain.approvals import ApprovalRequest, checked_reason
from qexport.domain.commands import Decide
from qexport.services.approvals import Decider, Rebuild, decide
from qexport.services.audit import actor_of
from qexport.services.deps import Deps
from qexport.services.requests import approved_export


def decide_request(deps: Deps, principal: Principal, command: Decide) -> ApprovalRequest:
    """Approve (the export is made again from the request with the requester's rights now,
    and queued) or deny a pending request of the principal's workspace. Refused, and the
    refusal said as `services.approvals.decide` says it: a reason too long, a decider who is
    not an admin or asked themselves (four eyes), a request no longer pending."""
    reason = checked_reason(command.reason)
    rebuild = Rebuild(deps.catalog, deps.accounts, approved_export(deps.catalog, deps.clock))
    decider = Decider(
        principal.user_id, principal.workspace_id, principal.role, actor_of(principal)
    )
    return decide(
        deps.approval_desk(),
        deps.audit,
        deps.clock,
        rebuild,
        decider,
        command.approval_id,
        command.decision,
        reason,
    )
