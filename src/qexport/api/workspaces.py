"""/api/v1/workspaces/{id}: the caller's workspace settings; admins restrict webhook hosts.

Another workspace answers 404 exactly like one that does not exist.
"""

from __future__ import annotations

from fastapi import APIRouter

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas import WorkspaceChange, WorkspaceSettings, problem_responses
from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import NotFoundError
from qexport.services.recipients import set_webhook_hosts

router = APIRouter(tags=["workspaces"])

NO_SUCH_WORKSPACE = "no workspace with this id that you belong to"


def _own(principal: Principal, workspace_id: str) -> None:
    if workspace_id != principal.workspace_id:
        raise NotFoundError(NO_SUCH_WORKSPACE)


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
