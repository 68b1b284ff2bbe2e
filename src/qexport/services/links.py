"""Public delivery links: a random token that downloads one export while it stays valid.

Only the token's hash is stored. A link works while the export is succeeded and unexpired,
the link is not revoked, and its creator is still a member who may read the export's subject
and still holds the role that let them share it (`may_share`): nobody receives data through
someone else's rights. An export has at most QEXPORT_MAX_LINKS_PER_EXPORT unrevoked links.

A link is managed (listed, revoked) by its creator or a workspace admin; to anyone else it
looks missing. When it serves its file it records `last_used_at`, at most once a minute.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import structlog

from qexport.domain.accounts import (
    Link,
    Principal,
    hash_secret,
    may_share,
    new_secret,
    valid_link_token,
)
from qexport.domain.approvals import APPROVAL_OPTION
from qexport.domain.audit import Action
from qexport.domain.commands import CreateLink, RevokeLink
from qexport.domain.exports import ExportRecord, Requester, is_downloadable
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    QExportError,
)
from qexport.domain.policies import MAX_DAYS, WorkspacePolicy
from qexport.domain.queries import Query
from qexport.domain.reports import SUBJECT_REPORT
from qexport.ports import AccountStore, Catalog, Clock, ExportQueue, LinkStore
from qexport.services.audit import event
from qexport.services.deps import Deps
from qexport.services.exports import check_id_prefix, downloadable, get_visible_export
from qexport.services.reports import may_read_export

if TYPE_CHECKING:
    pass

log = structlog.get_logger()

MAX_LINK_ID_CHARS = 64  # link ids are UUIDs; anything much longer is not worth a lookup
MAX_LINKS_FOUND = 50  # the most links one start of an id finds (`links_starting`)
# How stale `last_used_at` may get: a link downloaded in a loop writes once a minute, not once
# a request, so its downloads never queue behind the metadata database's writers.
LAST_USED_PRECISION = timedelta(minutes=1)


class LinkGoneError(QExportError):
    """The link existed but no longer works: revoked, expired, or its creator lost access."""

    def __init__(self, message: str, *, link: Link, record: ExportRecord) -> None:
        super().__init__(message)
        self.link = link
        self.record = record


class LinkUnknownError(NotFoundError):
    """No link has this token (or the token is malformed)."""


@dataclass(frozen=True)
class CreatedLink:
    """A new link: the token is in `url` and is shown only this once."""

    link: Link
    url: str
    expires_at: datetime


def public_url(base_url: str, token: str) -> str:
    return f"{base_url.rstrip('/')}/p/{token}"


def create_link(deps: Deps, principal: Principal, command: CreateLink) -> CreatedLink:
    """A link to an export the caller could download now; it expires with the export, or
    after `command.days` if sooner, and never later than the workspace's policy lets links
    live; at most QEXPORT_MAX_LINKS_PER_EXPORT unrevoked per export. ForbiddenError where the
    policy allows no public links, or for a file made without an approval from what the
    policy marks sensitive; InvalidRequestError for `days` past its lifetime."""
    exports, catalog, accounts, clock = deps.exports, deps.catalog, deps.accounts, deps.clock
    export_id, days = command.export_id, command.days
    policy = accounts.workspace_policy(principal.workspace_id)
    if not policy.public_links:
        raise ForbiddenError("the workspace's policy allows no public links")
    if days is not None and (isinstance(days, bool) or not 1 <= days <= MAX_DAYS):
        raise InvalidRequestError(
            f"expires_in_days is a whole number from 1 to {MAX_DAYS}", field="expires_in_days"
        )
    if days is not None and policy.link_max_days is not None and days > policy.link_max_days:
        raise InvalidRequestError(
            f"the workspace's policy lets a public link live at most {policy.link_max_days}"
            f" days (asked: {days})",
            field="expires_in_days",
        )
    record = downloadable(
        exports,
        catalog,
        clock,
        principal.requester,
        export_id,
        whole_workspace=principal.sees_workspace,
    )
    assert record.expires_at is not None  # a succeeded record has one
    why = unapproved_sensitive(catalog, policy, record)
    if why is not None:
        raise ForbiddenError(
            f"{why}: a file of it made without an admin's approval gets no public link"
        )
    now = clock.now()
    expires_at = policy.link_expiry(now, record.expires_at)
    if days is not None:
        expires_at = min(expires_at, now + timedelta(days=days))
    token = new_secret()
    created = event(
        clock,
        principal,
        Action.LINK_CREATED,
        workspace_id=principal.workspace_id,
        target=("link", None),  # the store names the new link
        details={"export_id": record.id, "expires_at": expires_at.isoformat()},
    )
    link = accounts.add_link(
        export_id=record.id,
        created_by=principal.user_id,
        token_hash=hash_secret(token),
        now=now,
        max_live=deps.settings.max_links_per_export,
        expires_at=None if expires_at == record.expires_at else expires_at,
        audit=created,
    )
    return CreatedLink(link, public_url(deps.settings.public_base_url, token), expires_at)


def unapproved_sensitive(
    catalog: Catalog,
    policy: WorkspacePolicy,
    record: ExportRecord,
    *,
    marked: dict[tuple[str, str], str | None] | None = None,
) -> str | None:
    """Why the file may not be shared: made without an approval from what the policy now
    marks sensitive, judged by what its run read as recorded with it (`record.reads`: not on
    record counts as every marked table), or by the ids of its query (or its report's
    queries) that the policy marks; None if it may. `marked`: what was found of each subject
    already (by type and id), for a caller that judges many files."""
    if record.options.get(APPROVAL_OPTION) is not None:
        return None
    if policy.sensitive_queries:
        subject = (record.subject_type, record.subject_id)
        known = marked if marked is not None else {}
        if subject not in known:
            known[subject] = policy.marked_query(_queries_of(catalog, record))
        if known[subject] is not None:
            return known[subject]
    return policy.file_sensitivity(record.reads)


def _queries_of(catalog: Catalog, record: ExportRecord) -> list[Query | None]:
    """The export's query, or its report's queries (each once), as they are now."""
    if record.subject_type != SUBJECT_REPORT:
        return [catalog.get_query(record.subject_id)]
    report = catalog.get_report(record.subject_id)
    ids = dict.fromkeys(s.query_id for s in report.sections) if report is not None else {}
    return [catalog.get_query(i) for i in ids]


def may_manage_link(principal: Principal, link: Link) -> bool:
    """Whether the caller may list and revoke the link: its creator, or a workspace admin."""
    return link.created_by == principal.user_id or principal.sees_workspace


def list_live_links(
    exports: ExportQueue,
    accounts: LinkStore,
    clock: Clock,
    principal: Principal,
    export_id: str,
) -> tuple[ExportRecord, list[Link]]:
    """An export the caller may see and its unrevoked, unexpired links the caller may
    manage, oldest first (NotFoundError for an export they cannot see)."""
    record = get_visible_export(
        exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    now = clock.now()
    found = [
        link
        for link in accounts.list_links(record.id)
        if may_manage_link(principal, link) and not link.expired(now)
    ]
    return record, found


def manageable_link(
    store: ExportQueue, accounts: LinkStore, principal: Principal, link_id: str
) -> tuple[Link, ExportRecord]:
    """A link of the caller's workspace that they may manage, with its export; someone else's
    link, or another workspace's, looks missing."""
    link = accounts.get_link(link_id) if len(link_id) <= MAX_LINK_ID_CHARS else None
    record = store.get_export(link.export_id) if link else None
    if link is None or record is None or not _manages(principal, link, record):
        raise NotFoundError(f"no link {link_id!r}")
    return link, record


def _manages(principal: Principal, link: Link, record: ExportRecord) -> bool:
    """Whether the caller may manage the link to `record`: one of their workspace's, and
    theirs or they are its admin."""
    return record.workspace_id == principal.workspace_id and may_manage_link(principal, link)


def links_starting(
    exports: ExportQueue,
    accounts: LinkStore,
    clock: Clock,
    principal: Principal,
    prefix: str,
    *,
    limit: int,
) -> list[tuple[Link, ExportRecord]]:
    """The live links (unrevoked, unexpired) whose id starts with `prefix` that the caller
    may manage, whichever export they share, by id, at most `limit`, each with its export:
    what `links list` would show them, found by a start of an id (InvalidRequestError for
    a start too short, or no id's)."""
    start = check_id_prefix(prefix, "link")
    if isinstance(limit, bool) or not 1 <= limit <= MAX_LINKS_FOUND:
        raise InvalidRequestError(
            f"limit must be 1 to {MAX_LINKS_FOUND}, not {limit}", field="limit"
        )
    now = clock.now()
    found: list[tuple[Link, ExportRecord]] = []
    for link in accounts.links_starting(start):
        record = exports.get_export(link.export_id)
        if record is not None and _manages(principal, link, record) and not link.expired(now):
            found.append((link, record))
            if len(found) == limit:
                break
    return found


def revoke_link(deps: Deps, principal: Principal, command: RevokeLink) -> Link:
    """Revoke a link of the caller's (or, for an admin, of the workspace's); with
    `command.export_id`, only a link of that export.

    Revoking an already revoked link succeeds again; someone else's link looks missing.
    """
    store, accounts, clock = deps.exports, deps.accounts, deps.clock
    link_id, export_id = command.link_id, command.export_id
    link, record = manageable_link(store, accounts, principal, link_id)
    if export_id is not None and record.id != export_id:
        raise NotFoundError(f"no link {link_id!r}")
    revoked = event(
        clock,
        principal,
        Action.LINK_REVOKED,
        workspace_id=principal.workspace_id,
        target=("link", link.id),
        details={"export_id": record.id},
    )
    accounts.revoke_link(link.id, now=clock.now(), audit=revoked)
    return link


def resolve_public_link(
    exports: ExportQueue, catalog: Catalog, accounts: AccountStore, clock: Clock, token: str
) -> ExportRecord:
    """The export a public token downloads; LinkUnknownError or LinkGoneError otherwise."""
    return resolve_link(exports, catalog, accounts, clock, token)[1]


def resolve_link(
    exports: ExportQueue, catalog: Catalog, accounts: AccountStore, clock: Clock, token: str
) -> tuple[Link, ExportRecord]:
    """The link a public token is, and the export it downloads; LinkUnknownError or
    LinkGoneError otherwise."""
    link = accounts.find_link(hash_secret(token)) if valid_link_token(token) else None
    found = exports.get_export_with_query(link.export_id) if link else None
    if link is None or found is None:
        raise LinkUnknownError("unknown link")
    record, query = found
    now = clock.now()
    if link.revoked_at is not None or not is_downloadable(record, now):
        raise LinkGoneError("the link was revoked or its file expired", link=link, record=record)
    if link.expired(now):
        raise LinkGoneError("the link expired", link=link, record=record)
    if not accounts.workspace_policy(record.workspace_id).public_links:
        raise LinkGoneError(
            "the workspace's policy no longer allows public links", link=link, record=record
        )
    creator = Requester(link.created_by, record.workspace_id)
    role = accounts.role_of(record.workspace_id, link.created_by)
    if not may_share(role, link.created_by, record.requested_by):
        raise LinkGoneError(
            "the link's creator may no longer share this export", link=link, record=record
        )
    if not may_read_export(catalog, creator, record, query):
        raise LinkGoneError(
            "the link's creator may no longer read what the export was made from",
            link=link,
            record=record,
        )
    return link, record


def note_link_used(accounts: LinkStore, clock: Clock, link: Link) -> None:
    """Record that the link served its file, unless it did within the last minute (as read
    with the link: most downloads write nothing). Run after the response is sent; a
    failure only costs the record, never the download."""
    now = clock.now()
    since = now - LAST_USED_PRECISION
    if link.last_used_at is not None and link.last_used_at >= since:
        return
    try:
        accounts.touch_link(link.id, now=now, unless_since=since)
    except Exception:  # after the response: a failure costs only the record
        log.warning("link_use_not_recorded", link_id=link.id, exc_info=True)
