"""/api/v1/workspaces/{id}: the caller's workspace settings; admins restrict webhook hosts.
/api/v1/members: the members the caller may name.

Another workspace answers 404 exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.problems import problem_responses
from qexport.api.schemas.workspaces import (
    MemberItem,
    MemberList,
    SensitiveTableView,
    WorkspaceChange,
    WorkspacePolicyChange,
    WorkspacePolicyChanged,
    WorkspacePolicyView,
    WorkspaceSettings,
)
from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.commands import ChangePolicy
from qexport.domain.failures import NotFoundError
from qexport.domain.policies import WorkspacePolicy
from qexport.http.one_hop import OneHopRoute, waits_on_sources
from qexport.services.accounts import members_seen_by
from qexport.services.policies import change_policy
from qexport.services.recipients import set_webhook_hosts

router = APIRouter(route_class=OneHopRoute, tags=["workspaces"])

NO_SUCH_WORKSPACE = "no workspace with this id that you belong to"


def _own(principal: Principal, workspace_id: str) -> None:
    if workspace_id != principal.workspace_id:
        raise NotFoundError(NO_SUCH_WORKSPACE)


@router.get("/members", response_model=MemberList, responses=problem_responses(401, 503))
def list_members(principal: CurrentPrincipal, context: Context) -> MemberList:
    """The members of the caller's workspace that the caller may see, by email: every one
    for a workspace admin, the caller alone for anyone else (as the approvals and a file's
    links are listed to them: the workspace's, or their own)."""
    found = members_seen_by(context.accounts, principal)
    return MemberList(
        items=[MemberItem(id=user.id, email=user.email, role=m.role.value) for user, m in found]
    )


def _view(context: Container, workspace_id: str) -> WorkspaceSettings:
    hosts = context.accounts.workspace_webhook_hosts(workspace_id)
    return WorkspaceSettings(
        id=workspace_id,
        timezone=context.accounts.workspace_timezone(workspace_id),
        webhook_hosts=None if hosts is None else list(hosts),
    )


@router.get(
    "/workspaces/{workspace_id}",
    response_model=WorkspaceSettings,
    responses=problem_responses(401, 404, 503),
    summary="Your workspace's settings",
)
def read_workspace(
    workspace_id: str, principal: CurrentPrincipal, context: Context
) -> WorkspaceSettings:
    _own(principal, workspace_id)
    return _view(context, workspace_id)


@router.patch(
    "/workspaces/{workspace_id}",
    response_model=WorkspaceSettings,
    responses=problem_responses(400, 401, 403, 404, 413, 422, 503),
    summary="Change your workspace's settings (workspace admins)",
)
def change_workspace(
    workspace_id: str, body: WorkspaceChange, principal: CurrentPrincipal, context: Context
) -> WorkspaceSettings:
    """`{"webhook_hosts": ["hooks.example.com"]}` restricts webhooks (new recipients are
    refused with 422, existing ones fail `destination_refused` when sent); null lifts it."""
    _own(principal, workspace_id)
    if "webhook_hosts" in body.model_fields_set:
        set_webhook_hosts(context.accounts, principal.role, workspace_id, body.webhook_hosts)
    return _view(context, workspace_id)


def _policy_fields(policy: WorkspacePolicy) -> dict[str, Any]:
    return {
        "formats": None if policy.formats is None else sorted(policy.formats),
        "max_rows": policy.max_rows,
        "public_links": policy.public_links,
        "link_max_days": policy.link_max_days,
        "retention_days": policy.retention_days,
        "recipient_domains": None
        if policy.recipient_domains is None
        else list(policy.recipient_domains),
        "sensitive_tables": [SensitiveTableView(**t.view()) for t in policy.sensitive_tables],
        "sensitive_queries": sorted(policy.sensitive_queries),
    }


def _policy_view(policy: WorkspacePolicy) -> WorkspacePolicyView:
    return WorkspacePolicyView(**_policy_fields(policy))


@router.get(
    "/workspaces/{workspace_id}/policy",
    response_model=WorkspacePolicyView,
    responses=problem_responses(401, 404, 503),
    summary="What your workspace lets leave",
)
def read_policy(
    workspace_id: str, principal: CurrentPrincipal, context: Context
) -> WorkspacePolicyView:
    _own(principal, workspace_id)
    return _policy_view(context.accounts.workspace_policy(workspace_id))


@router.patch(
    "/workspaces/{workspace_id}/policy",
    response_model=WorkspacePolicyChanged,
    responses=problem_responses(400, 401, 403, 404, 413, 422, 503),
    summary="Change what your workspace lets leave (workspace admins)",
)
@waits_on_sources
def change_workspace_policy(
    workspace_id: str, body: WorkspacePolicyChange, principal: CurrentPrincipal, context: Context
) -> WorkspacePolicyChanged:
    """`{"formats": ["csv"], "max_rows": 100000, "public_links": false, "link_max_days": 3,
    "retention_days": 2, "recipient_domains": ["example.com"], "sensitive_tables": [{"source":
    "shop", "table": "main.customers", "columns": ["email"]}]}`: each rule narrows what the
    server allows (422 naming a rule that would widen it, or an unknown source); null lifts a
    rule. Requests in a format no longer allowed are refused with 422; exports already queued
    in it fail `access_lost` when they run; a result over `max_rows` fails `limit_exceeded`.
    A query reading a sensitive table waits for an approval, and one queued before fails
    `access_lost`. `"revoke_links": true` also revokes the live public links to files made
    without an approval of what the new policy marks sensitive (`links_revoked` says how
    many)."""
    _own(principal, workspace_id)
    changes = {
        name: getattr(body, name) for name in body.model_fields_set if name != "revoke_links"
    }
    if body.sensitive_tables is not None:
        changes["sensitive_tables"] = [
            rule.model_dump(exclude_unset=True, exclude={"also"}) for rule in body.sensitive_tables
        ]
    changed = change_policy(
        context, principal, ChangePolicy(workspace_id, changes, body.revoke_links)
    )
    return WorkspacePolicyChanged(
        **_policy_fields(changed.policy), links_revoked=changed.links_revoked
    )
