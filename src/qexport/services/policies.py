"""A workspace's export policy: read by its members, changed by its admins (and the
operator's CLI). The rules themselves are in domain/policies.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qexport.config import Settings
from qexport.domain.accounts import Role
from qexport.domain.audit import OPERATOR, Action, Actor
from qexport.domain.failures import ForbiddenError, InvalidRequestError
from qexport.domain.policies import PolicyLimits, WorkspacePolicy, changed_policy, every_format
from qexport.domain.reports import REPORT_FORMATS
from qexport.ports import AccountStore, Catalog
from qexport.services.audit import event
from qexport.writers.registry import FORMATS


def policy_limits(settings: Settings) -> PolicyLimits:
    """What the installation allows, which a workspace's policy may only narrow."""
    return PolicyLimits(
        formats=every_format(FORMATS, REPORT_FORMATS),
        max_rows=settings.max_rows,
        retention_days=settings.retention.days,
    )


def change_policy(
    accounts: AccountStore,
    settings: Settings,
    role: Role,
    workspace_id: str,
    changes: Mapping[str, Any],
    *,
    catalog: Catalog,
    actor: Actor = OPERATOR,
) -> WorkspacePolicy:
    """Apply `changes` (a rule given as None is lifted) to the workspace's policy; workspace
    admins only. Every mistake at once, each naming its rule. The change is an audit event
    of `actor`'s, in the same transaction (the rules before and after)."""
    if role is not Role.ADMIN:
        raise ForbiddenError("only workspace admins may change the workspace's policy")
    before = accounts.workspace_policy(workspace_id)
    policy = changed_policy(before, changes, policy_limits(settings))
    if "sensitive_queries" in changes:
        _check_queries(catalog, workspace_id, policy.sensitive_queries)
    changed = event(
        None,
        actor,
        Action.POLICY_CHANGED,
        workspace_id=workspace_id,
        target=("workspace", workspace_id),
        details={"before": before.to_json(), "after": policy.to_json()},
    )
    accounts.set_workspace_policy(workspace_id, policy, audit=changed)
    return policy


def _check_queries(catalog: Catalog, workspace_id: str, query_ids: frozenset[str]) -> None:
    """Every sensitive query is a live query of the workspace (a typo would protect nothing)."""
    for query_id in sorted(query_ids):
        query = catalog.get_query(query_id)
        if query is None or query.deleted or query.workspace_id != workspace_id:
            raise InvalidRequestError(
                f"no query {query_id[:80]!r} in this workspace", field="sensitive_queries"
            )
