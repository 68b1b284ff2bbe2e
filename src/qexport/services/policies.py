"""A workspace's export policy: read by its members, changed by its admins (and the
operator's CLI). The rules themselves are in domain/policies.py.

Marking something sensitive can also end what already went out: with `revoke_links`, the
change revokes every live public link to a file that no admin approved and that was made
from what the new policy marks sensitive, in the same transaction as the change, each
revocation an audit event of its own (the link then answers 410, as any revoked one). A file
is judged by what its own run read, as recorded with it (the export's `reads`), not by what
its query reads now: the query may have been edited since, or read another table with other
values. A file whose reads are not on record (made before they were recorded) counts as
reading every marked table. Without `revoke_links`, links already shared keep working until
they expire; new links to such files are refused either way (services/links.py). Files made
with an approval keep their links: an admin chose to let them out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from qexport.config import Settings
from qexport.domain.accounts import Principal, Role
from qexport.domain.audit import OPERATOR, Action, Actor, AuditEvent
from qexport.domain.commands import ChangePolicy
from qexport.domain.exports import ExportRecord, Status
from qexport.domain.failures import (
    AccessLostError,
    ForbiddenError,
    InvalidRequestError,
    SourceUnavailableError,
)
from qexport.domain.formats import QUERY_FORMATS, REPORT_FORMATS
from qexport.domain.policies import PolicyLimits, WorkspacePolicy, changed_policy, every_format
from qexport.domain.sensitivity import ReadsReporting
from qexport.ports import (
    Catalog,
    ExportQueue,
    SourceCatalog,
)
from qexport.services.audit import actor_of, event
from qexport.services.deps import Deps
from qexport.services.describe import describe_timeout
from qexport.services.links import unapproved_sensitive
from qexport.services.sensitive_rules import checked_rules

_PAGE = 500  # exports read a page at a time when looking for links to revoke


@dataclass(frozen=True)
class PolicyChange:
    """A policy as changed, and how many live public links the change revoked."""

    policy: WorkspacePolicy
    links_revoked: int = 0


def policy_limits(
    settings: Settings, sources: Mapping[str, ReadsReporting] | None = None
) -> PolicyLimits:
    """What the installation allows, which a workspace's policy may only narrow; with the
    workspace's `sources` (what each one's planner reports) for its sensitive tables."""
    return PolicyLimits(
        formats=every_format(QUERY_FORMATS, REPORT_FORMATS),
        max_rows=settings.max_rows,
        retention_days=settings.retention.days,
        sources=dict(sources or {}),
    )


def workspace_sources(sources: SourceCatalog, workspace_id: str) -> dict[str, ReadsReporting]:
    """The sources the workspace may use, each with what its planner reports (one that
    cannot be built now is left out: a rule naming it is refused as unknown)."""
    found: dict[str, ReadsReporting] = {}
    for name in sources.names_for(workspace_id):
        try:
            found[name] = sources.source_for(name, workspace_id).reads_reporting
        except (SourceUnavailableError, AccessLostError):
            continue
    return found


def change_policy(deps: Deps, principal: Principal | None, command: ChangePolicy) -> PolicyChange:
    """Apply the command's changes (a rule given as None is lifted) to the workspace's policy;
    workspace admins only (`principal`; None: the operator at the command line, who is an
    admin of every workspace). Every mistake at once, each naming its rule. The change is an
    audit event of the principal's, in the same transaction (the rules before and after).

    New or changed sensitive tables are checked on their sources through the preview
    processes (services/sensitive_rules.py): 422 for a rule that can never match, 503 when a
    source they name cannot be asked.

    `revoke_links`: also revoke the live public links to files of every subject the new
    policy marks sensitive, made without an approval."""
    if principal is not None and principal.role is not Role.ADMIN:
        raise ForbiddenError("only workspace admins may change the workspace's policy")
    actor = OPERATOR if principal is None else actor_of(principal)
    accounts, catalog, clock = deps.accounts, deps.catalog, deps.clock
    workspace_id, changes = command.workspace_id, command.changes
    before = accounts.workspace_policy(workspace_id)
    policy = _changed(deps, before, command)
    if "sensitive_queries" in changes:
        _check_queries(catalog, workspace_id, policy.sensitive_queries)
    revocations: list[tuple[str, AuditEvent]] = []
    if command.revoke_links:
        revocations = _revocations(deps, policy, workspace_id, actor)
    changed = event(
        None,
        actor,
        Action.POLICY_CHANGED,
        workspace_id=workspace_id,
        target=("workspace", workspace_id),
        details={
            "before": before.to_json(),
            "after": policy.to_json(),
            **({"links_revoked": len(revocations)} if command.revoke_links else {}),
        },
    )
    accounts.set_workspace_policy(
        workspace_id,
        policy,
        audit=changed,
        revoke_links=revocations,
        now=clock.now(),
    )
    return PolicyChange(policy, len(revocations))


def _changed(deps: Deps, before: WorkspacePolicy, command: ChangePolicy) -> WorkspacePolicy:
    """The policy with the command's changes, within the installation's limits; new or changed
    sensitive tables checked on their sources."""
    settings, sources = deps.settings, deps.sources
    workspace_id, changes = command.workspace_id, command.changes
    usable = workspace_sources(sources, workspace_id) if "sensitive_tables" in changes else {}
    policy = changed_policy(before, changes, policy_limits(settings, usable))
    if policy.sensitive_tables and "sensitive_tables" in changes:
        policy = checked_rules(
            before,
            policy,
            changes["sensitive_tables"],
            usable,
            runner=deps.previews,
            sources=sources,
            workspace_id=workspace_id,
            timeout_seconds=describe_timeout(settings.statement_timeout_seconds),
        )
    return policy


def _check_queries(catalog: Catalog, workspace_id: str, query_ids: frozenset[str]) -> None:
    """Every sensitive query is a live query of the workspace (a typo would protect nothing)."""
    for query_id in sorted(query_ids):
        query = catalog.get_query(query_id)
        if query is None or query.deleted or query.workspace_id != workspace_id:
            raise InvalidRequestError(
                f"no query {query_id[:80]!r} in this workspace", field="sensitive_queries"
            )


def _revocations(
    deps: Deps, policy: WorkspacePolicy, workspace_id: str, actor: Actor
) -> list[tuple[str, AuditEvent]]:
    """Each live link to an unexpired file made without an approval from what the policy
    marks sensitive, judged by what the file's run read (services/links.py), with the audit
    event of its revocation."""
    clock = deps.clock
    now = clock.now()
    found: list[tuple[str, AuditEvent]] = []
    marked: dict[tuple[str, str], str | None] = {}  # each subject's queries read once
    for record in _live_files(deps.exports, workspace_id, now):
        if unapproved_sensitive(deps.catalog, policy, record, marked=marked) is None:
            continue
        for link in deps.accounts.list_links(record.id):
            if link.expired(now):
                continue
            revoked = event(
                clock,
                actor,
                Action.LINK_REVOKED,
                workspace_id=workspace_id,
                target=("link", link.id),
                details={
                    "export_id": record.id,
                    "reason": "the workspace's policy marks what it was made from sensitive",
                },
            )
            found.append((link.id, revoked))
    return found


def _live_files(exports: ExportQueue, workspace_id: str, now: datetime) -> Iterator[ExportRecord]:
    """The workspace's succeeded exports whose files have not expired, a page at a time."""
    before: tuple[datetime, str] | None = None
    while True:
        page = exports.list_exports(
            workspace_id=workspace_id,
            status=Status.SUCCEEDED,
            limit=_PAGE,
            before=before,
            expired_at=(False, now),
        )
        yield from page
        if len(page) < _PAGE:
            return
        before = (page[-1].created_at, page[-1].id)
