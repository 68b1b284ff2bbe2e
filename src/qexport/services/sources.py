"""Data sources: registered for one workspace, shared by the operator, listed for members.

The operator registers any source with `qexport sources add NAME URL --workspace W`; a
workspace's admins may register a PostgreSQL source for their own workspace through the API,
with narrower URLs (see services/source_urls.py). Every PostgreSQL source's role is judged
before it is stored (postgres/role.py). URLs are stored sealed when QEXPORT_SECRET_KEY is set and
are only ever shown with their password masked.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import structlog

from qexport.config import Settings
from qexport.domain.accounts import Principal, Role, check_workspace_id
from qexport.domain.audit import INSTALLATION, OPERATOR, Action, Actor
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    QExportError,
)
from qexport.domain.sources import (
    AUDIT_SOURCE,
    BUILT_IN_OWNER,
    EVERY_WORKSPACE,
    RegisteredSource,
    usable_in,
)
from qexport.ports import AccountStore, Clock, SourceRecordStore
from qexport.services.audit import actor_of, event
from qexport.services.sensitive_rules import cover_new_source
from qexport.services.source_urls import (
    check_member_url,
    check_source_url,
    kind_of,
    pin_member_url,
)
from qexport.sources.credentials import env_reference, is_sealed, seal, unseal
from qexport.sources.duckdb.lake import duckdb_location
from qexport.sources.registry import (
    BUILT_IN_NAMES,
    DEMO_SOURCE,
    configured_grants,
    masked_url,
    usable_sources_in,
)

_SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
log = structlog.get_logger()

# Judges a source's role before it is stored: (name, url, allow_privileged_role) -> findings;
# raises SourceRefusedError for a privileged role that is not allowed.
RoleCheck = Callable[[str, str, bool], list[str]]
# The identity of the data a source reaches: (name, usable url) -> identity, None when it
# cannot say (services/sensitive_rules.py).
Identify = Callable[[str, str], str | None]


def _name(name: str) -> str:
    if not _SOURCE_NAME.fullmatch(name):
        raise InvalidRequestError(
            f"invalid source name {name!r}: use 1-63 lowercase letters, digits, - or _",
            field="name",
        )
    return name


def _workspace(workspace_id: str) -> str:
    if workspace_id == EVERY_WORKSPACE:
        return workspace_id
    try:
        return check_workspace_id(workspace_id)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), field="workspace") from None


@dataclass(frozen=True)
class SourceRequest:
    """A source to register: its name, usable URL, owner and who else may use it."""

    name: str
    url: str
    workspace_id: str
    shared_with: frozenset[str] = frozenset()
    allow_privileged_role: bool = False


# long: its checks in the order they refuse, then one write; a third is signature and docstring
def register_source(
    accounts: AccountStore,
    clock: Clock,
    settings: Settings,
    request: SourceRequest,
    *,
    check_role: RoleCheck,
    actor: Actor = OPERATOR,
    identify: Identify | None = None,
) -> list[str]:
    """Check and store a source; return the findings on its role that were allowed (for a
    warning). The URL's credentials are sealed when QEXPORT_SECRET_KEY is set.

    The name must be free in the workspace and in every workspace it is shared with; a name
    another workspace uses without sharing it is free (and never told). With `identify`, the
    sensitive tables of those workspaces' policies whose source reaches the same data cover
    the new source too (services/sensitive_rules.py).
    """
    name = _name(request.name)
    workspace_id = _workspace(request.workspace_id)
    shared = frozenset(_workspace(w) for w in request.shared_with) - {workspace_id}
    if name in BUILT_IN_NAMES:
        raise InvalidRequestError(
            f"a source named {name!r} is already configured (it is built in)", field="name"
        )
    registered = accounts.registered_sources()
    for where in sorted({workspace_id, *shared}):
        _refuse_a_taken_name(settings, registered, name, where, new=True)
    variable = env_reference(request.url)
    owner = workspace_id
    usable = (
        unseal(name, request.url, settings.secret_key, owner=owner) if variable else request.url
    )
    check_source_url(usable)
    _refuse_a_second_source_on_one_file(accounts, settings, usable, workspace_id)
    findings = check_role(name, usable, request.allow_privileged_role)
    created = event(
        clock,
        actor,
        Action.SOURCE_CREATED,
        workspace_id=workspace_id or INSTALLATION,
        target=("source", name),
        details={  # the URL's scheme only: the rest may hold its password
            "scheme": urlsplit(usable).scheme,
            "shared_with": sorted(shared),
            "allow_privileged_role": request.allow_privileged_role,
        },
    )
    accounts.add_source(
        RegisteredSource(
            name=name,
            url=seal(name, request.url, settings.secret_key, owner=owner),
            workspace_id=workspace_id,
            shared_with=shared,
            allow_privileged_role=request.allow_privileged_role,
            created_at=clock.now(),
        ),
        audit=created,
    )
    identity = _identity_of(identify, name, usable)
    usable_in_workspaces = {workspace_id, *shared} - {EVERY_WORKSPACE}
    cover_new_source(accounts, clock, actor, name, identity, usable_in_workspaces)
    return findings


def _identity_of(identify: Identify | None, name: str, url: str) -> str | None:
    """What `identify` says of the source, None when it cannot (logged: the source was
    registered, its role judged; only the rules over the same data wait for the next change
    of the policy)."""
    if identify is None:
        return None
    try:
        return identify(name, url)
    except QExportError as exc:
        log.warning("source_identity_unknown", source=name, reason=str(exc))
        return None


def _refuse_a_taken_name(
    settings: Settings,
    registered: list[RegisteredSource],
    name: str,
    workspace_id: str,
    *,
    new: bool,
    keeping: RegisteredSource | None = None,
) -> None:
    """Refuse when `name` already means a source (other than `keeping`) in `workspace_id`: a
    workspace's queries name their source, so one name is one source there. For `*` (every
    workspace), when any other source of that name exists anywhere. The message names only
    what that workspace can already see (its own listing), never another workspace's."""
    if workspace_id == EVERY_WORKSPACE:
        others = [r for r in registered if r.name == name and r is not keeping]
        if name in settings.sources or others:
            holders = [r.label() for r in others] + (
                [f"QEXPORT_SOURCE_{name.upper()}"] if name in settings.sources else []
            )
            raise InvalidRequestError(
                f"every workspace cannot use a second source named {name!r}: it is already"
                f" {', '.join(holders)}",
                field="name",
            )
        return
    found = usable_in(workspace_id, configured_grants(settings), registered)
    if name not in found or (keeping is not None and found[name] is keeping):
        return
    held = found[name]
    if held is None:
        what = "the configured source"
    elif held.workspace_id == workspace_id:
        what = "its own source"
    else:
        what = "a source shared with it"
    doing = "register" if new else "share"
    raise InvalidRequestError(
        f"workspace {workspace_id!r} already has a source named {name!r} ({what}): a"
        f" workspace's queries name their source, so {doing} this one under another name",
        field="name",
    )


def _refuse_a_second_source_on_one_file(
    accounts: SourceRecordStore, settings: Settings, url: str, workspace_id: str
) -> None:
    """A DuckDB file backs one source: a worker opens it once, sandboxed around that source's
    own folders, and a second source on it could not run (qexport.sources.duckdb.source). The
    refusal names the source to share instead."""
    path = _duckdb_file(url)
    if path is None:
        return
    for view in all_sources(accounts, settings):
        if view.kind == "duckdb" and _duckdb_file(view.url or "") == path:
            share = (
                f"qexport sources share {view.name} {workspace_id or 'WORKSPACE'}"
                f" --owner {view.owner}"
                if view.origin == "registered"
                else f"QEXPORT_SOURCE_{view.name.upper()}_WORKSPACES"
            )
            raise InvalidRequestError(
                f"the file {path} is already source {view.name!r}: a DuckDB file backs one"
                f" source; share that one instead ({share})",
                field="url",
            )


def _duckdb_file(url: str) -> str | None:
    """The real path of a DuckDB source's file, links followed; None for another kind."""
    if kind_of(url) != "duckdb":
        return None
    try:
        path, _lake = duckdb_location(url)
    except ValueError:
        return None
    return os.path.realpath(path)


def register_member_source(
    accounts: AccountStore,
    clock: Clock,
    settings: Settings,
    principal: Principal,
    name: str,
    url: str,
    *,
    check_role: RoleCheck,
    identify: Identify | None = None,
) -> None:
    """A workspace admin registers a PostgreSQL source for their own workspace only; its
    role must not be privileged (only the operator may allow that)."""
    if principal.role is not Role.ADMIN:
        raise ForbiddenError("only a workspace's admins may register data sources")
    if env_reference(url) is not None:
        raise InvalidRequestError("env: references are for the operator", field="url")
    check_member_url(url)
    url = pin_member_url(url, settings.egress_policy())

    def judged(source: str, usable: str, allow: bool) -> list[str]:
        try:
            return check_role(source, usable, allow)
        except QExportError as exc:  # refused, unreachable, login refused: the URL's fault
            raise InvalidRequestError(str(exc), field="url") from exc

    request = SourceRequest(name, url, principal.workspace_id)
    register_source(
        accounts,
        clock,
        settings,
        request,
        check_role=judged,
        actor=actor_of(principal),
        identify=identify,
    )


def share_source(
    accounts: AccountStore,
    settings: Settings,
    name: str,
    workspace_id: str,
    *,
    shared: bool,
    owner: str | None = None,
    identify: Identify | None = None,
    clock: Clock | None = None,
) -> bool:
    """The operator lets another workspace (or `*`: every one) use a registered source, or
    stops it; exports of that workspace's queries on it then fail access_lost.

    The source is the one `owner` registered as `name`; without `owner`, the only source of
    that name (several: refused, naming their workspaces). A share that would give the
    workspace a second source of a name it already uses is refused. With `identify` (and
    `clock`), the workspace's sensitive tables whose source reaches the same data cover the
    shared source too (services/sensitive_rules.py; not for `*`: each workspace's rules
    then cover it from their next change).
    """
    name, workspace_id = _name(name), _workspace(workspace_id)
    registered = accounts.registered_sources()
    source = _the_source(registered, name, owner)
    if shared:
        _refuse_a_taken_name(settings, registered, name, workspace_id, new=False, keeping=source)
    changed = event(
        None,
        OPERATOR,
        Action.SOURCE_SHARED if shared else Action.SOURCE_UNSHARED,
        workspace_id=INSTALLATION if workspace_id == EVERY_WORKSPACE else workspace_id,
        target=("source", name),  # never its owner: the workspace shared with need not know
    )
    done = accounts.share_source(
        source.workspace_id, name, workspace_id, shared=shared, audit=changed
    )
    if shared and clock is not None and workspace_id != EVERY_WORKSPACE:
        url = unseal_or_stored(source, settings.secret_key)
        identity = _identity_of(identify, name, url)
        cover_new_source(accounts, clock, OPERATOR, name, identity, {workspace_id})
    return done


def _the_source(
    registered: list[RegisteredSource], name: str, owner: str | None
) -> RegisteredSource:
    """The source `owner` registered as `name`; without an owner, the only one of that name."""
    found = [r for r in registered if r.name == name]
    if owner is not None:
        found = [r for r in found if (r.workspace_id or "") == owner]
    if not found:
        where = f" in workspace {owner!r}" if owner is not None else ""
        raise NotFoundError(f"no registered source {name!r}{where}")
    if len(found) > 1:
        owners = ", ".join(r.workspace_id or "''" for r in found)
        raise InvalidRequestError(
            f"several workspaces have a source named {name!r} ({owners}): say which with"
            " --owner WORKSPACE",
            field="owner",
        )
    return found[0]


@dataclass(frozen=True)
class SourceView:
    """A source as listed: never its credentials; its URL (password masked) only for who may
    see where it is (None otherwise)."""

    name: str
    kind: str
    url: str | None  # password masked; an env: reference as it is
    origin: str  # built-in, configured, registered
    workspaces: frozenset[str]
    allow_privileged_role: bool
    owner: str = BUILT_IN_OWNER  # the registering workspace ('' for none) of a registered one


def shown_url(name: str, stored: str, secret_key: str, *, owner: str | None) -> str:
    """A stored URL as it may be shown: opened and masked, or a placeholder."""
    if env_reference(stored) is not None:
        return stored
    if not is_sealed(stored):
        return masked_url(stored)
    try:
        return masked_url(unseal(name, stored, secret_key, owner=owner))
    except QExportError:
        return "<sealed with another QEXPORT_SECRET_KEY>"


def _registered_view(source: RegisteredSource, secret_key: str) -> SourceView:
    return SourceView(
        source.name,
        kind_of(unseal_or_stored(source, secret_key)),
        shown_url(source.name, source.url, secret_key, owner=source.workspace_id),
        "registered",
        source.workspaces,
        source.allow_privileged_role,
        source.workspace_id or "",
    )


def all_sources(accounts: SourceRecordStore, settings: Settings) -> list[SourceView]:
    """Every source, built-in, configured and registered, for the operator."""
    grants = configured_grants(settings)
    demo = f"duckdb://{settings.demo_database.absolute()}"
    views = [SourceView("demo", "duckdb", demo, "built-in", grants["demo"], False)]
    views += [
        SourceView(
            n,
            kind_of(u),
            masked_url(u),
            "configured",
            grants.get(n, frozenset()),
            n in settings.privileged_sources,
        )
        for n, u in sorted(settings.sources.items())
    ]
    views += [_registered_view(r, settings.secret_key) for r in accounts.registered_sources()]
    return views


def unseal_or_stored(source: RegisteredSource, secret_key: str) -> str:
    """The source's URL opened if it can be (for its kind); its stored form otherwise."""
    if not is_sealed(source.url):
        return source.url
    try:
        return unseal(source.name, source.url, secret_key, owner=source.workspace_id)
    except QExportError:
        return source.url


def usable_sources(
    accounts: SourceRecordStore,
    settings: Settings,
    workspace_id: str,
    *,
    admin: bool = False,
    writes_queries: bool = False,
) -> list[SourceView]:
    """The sources a workspace may use, by name, as a member sees them: name and kind; for
    those who write queries (editors, admins) their URLs too, password masked, since a
    lake's folders are what their SQL reads; for admins the built-in `audit` (the
    workspace's own audit trail). Where a source is (a server, a file path, folders) is the
    installation's layout, which a viewer, who only runs saved queries, has no use for."""
    grants = configured_grants(settings)
    views: list[SourceView] = []
    for name, found in usable_sources_in(settings, accounts, workspace_id).items():
        if found is not None:
            views.append(_registered_view(found, settings.secret_key))
        elif name == DEMO_SOURCE:
            demo = f"duckdb://{settings.demo_database.absolute()}"
            views.append(SourceView(name, "duckdb", demo, "built-in", grants[name], False))
        else:
            url = settings.sources[name]
            privileged = name in settings.privileged_sources
            views.append(
                SourceView(
                    name, kind_of(url), masked_url(url), "configured", grants[name], privileged
                )
            )
    if admin:
        trail = "built-in: this workspace's audit trail (table audit_events)"
        views.append(
            SourceView(AUDIT_SOURCE, "audit", trail, "built-in", frozenset({workspace_id}), False)
        )
    if not (admin or writes_queries):
        views = [replace(v, url=None) for v in views]
    return sorted(views, key=lambda v: v.name)
