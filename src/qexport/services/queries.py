"""Saved queries through the API: written by editors and admins, read as `can_read` allows.

A query the caller cannot read answers exactly like a missing one (NotFoundError), so that
nobody learns that a query they may not see exists.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

from qexport.domain.accounts import Principal
from qexport.domain.audit import Action, Actor, AuditEvent, changes
from qexport.domain.commands import QueryDraft, SaveQuery
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    Problems,
    SourceUnavailableError,
    in_field_order,
)
from qexport.domain.queries import (
    Parameter,
    ParamType,
    Query,
    Visibility,
    can_read,
    check_declared_name,
    check_filename_template,
    typed_default,
)
from qexport.domain.sources import AUDIT_SOURCE
from qexport.ports import Catalog, UserStore
from qexport.services.audit import actor_of, event
from qexport.services.deps import Deps
from qexport.services.describe import Describe, Described, Saving, describe_timeout, describer

MAX_NAME_CHARS = 200
MAX_SQL_CHARS = 50_000
MAX_PARAMETERS = 50
MAX_MEMBERS = 1000
MAX_ID_CHARS = 200  # ids are UUIDs; longer refs are not worth a lookup
_INT64 = 2**63
# The same words for a missing query and one the caller may not read, whatever the id.
NO_SUCH_QUERY = "no query with this id that you can read"
PARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# Control, format (bidi overrides, zero-width), surrogate, private-use characters, and line
# or paragraph separators: nothing a person means to put in a name.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


# ---------------------------------------------------------------- checks


def _encodable(text: str) -> bool:
    """No lone surrogates (JSON allows them; UTF-8, and so every database, does not) nor NUL."""
    return "\x00" not in text and not any("\ud800" <= c <= "\udfff" for c in text)


def _check_name(name: str) -> None:
    if not 1 <= len(name) <= MAX_NAME_CHARS:
        raise InvalidRequestError(f"a name has 1 to {MAX_NAME_CHARS} characters", field="name")
    if any(unicodedata.category(c) in _HIDDEN_CATEGORIES for c in name):
        raise InvalidRequestError("a name cannot contain control characters", field="name")
    if name != name.strip():
        raise InvalidRequestError("a name cannot start or end with spaces", field="name")


def check_sql(sql: str) -> None:
    if not sql.strip():
        raise InvalidRequestError("the SQL is empty", field="sql")
    if len(sql) > MAX_SQL_CHARS:
        raise InvalidRequestError(
            f"the SQL is longer than {MAX_SQL_CHARS:,} characters", field="sql"
        )
    if not _encodable(sql):
        raise InvalidRequestError("the SQL contains a NUL or an unpaired surrogate", field="sql")


def _check_parameter(index: int, param: Parameter, seen: set[str]) -> None:
    where = f"parameters.{index}"
    if not PARAMETER_NAME.fullmatch(param.name):
        raise InvalidRequestError(
            f"parameter name {param.name!r} is not an identifier"
            " (a letter or _, then letters, digits or _; at most 63)",
            field=f"{where}.name",
        )
    try:
        check_declared_name(param.name)
    except InvalidRequestError as exc:
        raise InvalidRequestError(str(exc), field=f"{where}.name") from None
    if param.name in seen:
        raise InvalidRequestError(f"parameter {param.name!r} is declared twice", field=where)
    seen.add(param.name)
    if param.default is None:
        return
    if param.required:
        raise InvalidRequestError(
            f"parameter {param.name!r} has a default, so it cannot be required",
            field=f"{where}.required",
        )
    if isinstance(param.default, str) and not _encodable(param.default):
        raise InvalidRequestError(
            "the default contains a NUL or an unpaired surrogate", field=f"{where}.default"
        )
    # The default is coerced exactly as a request's value would be, as it is stored.
    try:
        value = typed_default(param).default
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"invalid default: {exc}", field=f"{where}.default") from None
    if param.type is ParamType.INTEGER and not -_INT64 <= value < _INT64:
        raise InvalidRequestError(
            "an integer default must fit in 64 bits", field=f"{where}.default"
        )


# The order a query's problems are told in: the query form's.
QUERY_FIELDS = ("name", "source", "sql", "parameters", "filename_template", "visibility", "members")
# What the source needs to describe the SQL: a source it knows, SQL and parameters it can read.
_DESCRIBE_NEEDS = frozenset({"source", "sql", "parameters"})


def check_draft(
    draft: QueryDraft,
    *,
    sources: Collection[str],
    members: Collection[str] | None,
    problems: Problems | None = None,
) -> None:
    """Refuse a draft naming an unknown source or non-members, or with bad parameters: every
    mistake at once (into `problems` when given, for the caller to raise with others)."""
    own = problems is None
    problems = problems if problems is not None else Problems()
    with problems.check():
        _check_name(draft.name)
    with problems.check():
        check_source(draft.source, sources)
    with problems.check():
        check_sql(draft.sql)
    with problems.check():
        check_parameters(draft.parameters)
    if draft.filename_template is not None and draft.filename_template.strip():
        with problems.check():
            check_filename_template(draft.filename_template, [p.name for p in draft.parameters])
    with problems.check():
        check_visibility(draft.visibility, draft.members, members)
    if own:
        problems.raise_any(in_field_order(QUERY_FIELDS))


def check_source(source: str, sources: Collection[str]) -> None:
    if source not in sources:
        known = ", ".join(sorted(sources))
        what = f"unknown source {source[:80]!r}" if source else "choose a source"
        raise InvalidRequestError(f"{what} (known: {known})", field="source")


def check_parameters(parameters: Sequence[Parameter]) -> None:
    """Every declared parameter's name, type and default, each problem on its own field."""
    if len(parameters) > MAX_PARAMETERS:
        raise InvalidRequestError(
            f"a query has at most {MAX_PARAMETERS} parameters", field="parameters"
        )
    problems = Problems()
    seen: set[str] = set()
    for index, param in enumerate(parameters):
        with problems.check():
            _check_parameter(index, param, seen)
    problems.raise_any()


def check_visibility(
    visibility: Visibility, listed: Collection[str], members: Collection[str] | None
) -> None:
    """Who may read a query or a report: the workspace, or listed members of it (`members`
    None: a workspace without accounts, where any user id may be listed)."""
    if visibility is Visibility.WORKSPACE and listed:
        raise InvalidRequestError(
            'members are listed only with "visibility": "members"', field="members"
        )
    if len(listed) > MAX_MEMBERS:
        raise InvalidRequestError(f"at most {MAX_MEMBERS} members", field="members")
    strangers = [] if members is None else sorted(set(listed) - set(members))
    if strangers:
        raise InvalidRequestError(
            f"{strangers[0]!r} is not a member of the workspace", field="members"
        )


def _writer(principal: Principal) -> None:
    if not principal.can_write_queries:
        raise ForbiddenError("only editors and admins may create, change or delete queries")


def workspace_members(accounts: UserStore, principal: Principal) -> set[str] | None:
    """The user ids of the caller's workspace; None for a workspace without accounts (the
    operator's own on the local database, whose listed readers are not checked: nobody signs
    in to it)."""
    return {m.user_id for m in accounts.members(principal.workspace_id)} or None


# ---------------------------------------------------------------- use cases


def list_readable_queries(store: Catalog, principal: Principal) -> list[Query]:
    """The workspace's live queries that the caller may read, by name."""
    return [
        q for q in store.list_queries(principal.workspace_id) if can_read(principal.requester, q)
    ]


def get_readable_query(store: Catalog, principal: Principal, query_id: str) -> Query:
    """The query if the caller may read it; NotFoundError, as for a missing one, otherwise."""
    query = (
        store.get_query(query_id)
        if len(query_id) <= MAX_ID_CHARS and _encodable(query_id)
        else None
    )
    if query is None or not can_read(principal.requester, query):
        raise NotFoundError(NO_SUCH_QUERY)
    return query


def _checked(
    store: Catalog,
    accounts: UserStore,
    principal: Principal,
    draft: QueryDraft,
    *,
    sources: Collection[str],
    describe: Describe,
    found: Sequence[InvalidRequestError],
    current: Query | None,
) -> Described:
    """Every check of a draft, with the problems the caller `found` reading its form; then
    the columns its source describes and the tables it reads. All the mistakes are refused at
    once, in the form's order: the SQL is described whenever the source is known and the SQL
    and parameters can be read, so that a bad name and a bad SQL are told together. A source
    that cannot be reached refuses the save only when nothing else is wrong."""
    problems = Problems(found)
    check_draft(
        draft, sources=sources, members=workspace_members(accounts, principal), problems=problems
    )
    if "name" not in problems.fields():
        with problems.check():
            _check_name_free(store, principal.workspace_id, draft.name, current)
    described = Described((), None)
    unavailable: SourceUnavailableError | None = None
    if not problems.fields() & _DESCRIBE_NEEDS:
        try:
            with problems.check():
                saving = Saving(
                    name=draft.name or None,
                    query_id=None if current is None else current.id,
                    refused_anyway=bool(problems),
                )
                described = describe(draft.source, draft.sql, draft.parameters, saving)
        except SourceUnavailableError as exc:
            unavailable = exc
    problems.raise_any(in_field_order(QUERY_FIELDS))
    if unavailable is not None:
        raise unavailable
    return described


def _check_name_free(store: Catalog, workspace_id: str, name: str, current: Query | None) -> None:
    taken = store.find_query(workspace_id, name)
    if taken is not None and (current is None or taken.id != current.id):
        raise InvalidRequestError(f"a query named {name!r} already exists", field="name")


def save_query(deps: Deps, principal: Principal, command: SaveQuery) -> Query:
    """Save a new query owned by the caller (an editor or admin), or replace a readable one
    whole (its owner stays), with the columns its source describes and the tables it reads:
    the one handler of every door (the API, the pages, the command line).

    Reads the sources the caller's queries may name (query_sources) and the workspace's
    members; the source describes the statement with the caller's rights, rationed as a
    preview is and a refusal recorded (services/describe.py). Nothing is saved when anything
    is wrong, and every mistake is told at once."""
    describe = describer(
        deps.sources,
        deps.previews,
        principal.requester,
        describe_timeout(deps.settings.statement_timeout_seconds),
        deps.source_slots,
        replace(deps.save_ration(), actor=actor_of(principal)),
    )
    sources = query_sources(deps, principal)
    if command.query_id is None:
        return _create_query(
            deps.catalog, deps.accounts, principal, command, sources=sources, describe=describe
        )
    return _replace_query(
        deps.catalog, deps.accounts, principal, command, sources=sources, describe=describe
    )


def query_sources(deps: Deps, principal: Principal) -> frozenset[str]:
    """The sources a query saved by the caller may name: the workspace's, and for its admins
    the built-in `audit` too (sources/audit.py)."""
    names = frozenset(deps.sources.names_for(principal.workspace_id))
    return names if principal.sees_workspace else names - {AUDIT_SOURCE}


def _create_query(
    store: Catalog,
    accounts: UserStore,
    principal: Principal,
    command: SaveQuery,
    *,
    sources: Collection[str],
    describe: Describe,
) -> Query:
    """Save a new query owned by the caller (an editor or admin), with the columns its
    source describes and the tables it reads (a statement the source refuses is not saved)."""
    _writer(principal)
    draft = command.draft
    described = _checked(
        store,
        accounts,
        principal,
        draft,
        sources=sources,
        describe=describe,
        found=command.found,
        current=None,
    )
    query = Query(
        id=str(uuid.uuid4()),
        workspace_id=principal.workspace_id,
        name=draft.name,
        sql=draft.sql,
        source=draft.source,
        parameters=tuple(typed_default(p) for p in draft.parameters),
        visibility=draft.visibility,
        members=draft.members,
        owner=principal.user_id,
        columns=described.columns,
        filename_template=_template(draft),
        reads=described.reads,
    )
    # The store also refuses a name taken meanwhile by a live query of the workspace.
    return store.add_query(query, audit=query_event(principal, Action.QUERY_CREATED, query))


def _replace_query(
    store: Catalog,
    accounts: UserStore,
    principal: Principal,
    command: SaveQuery,
    *,
    sources: Collection[str],
    describe: Describe,
) -> Query:
    """Replace a readable query's name, SQL, source, parameters and visibility; the owner stays.
    The source describes the new statement first, as for a new query.

    Exports already requested keep their parameters; they run with the query as it is then.
    """
    _writer(principal)
    current = get_readable_query(store, principal, command.query_id or "")
    draft = command.draft
    described = _checked(
        store,
        accounts,
        principal,
        draft,
        sources=sources,
        describe=describe,
        found=command.found,
        current=current,
    )
    updated = replace(
        current,
        name=draft.name,
        sql=draft.sql,
        source=draft.source,
        parameters=tuple(typed_default(p) for p in draft.parameters),
        visibility=draft.visibility,
        members=draft.members,
        columns=described.columns,
        filename_template=_template(draft),
        reads=described.reads,
    )
    changed = query_event(principal, Action.QUERY_CHANGED, updated, before=current)
    if not store.update_query(updated, audit=changed):  # deleted in the meantime
        raise NotFoundError(NO_SUCH_QUERY)
    return updated


def _template(draft: QueryDraft) -> str | None:
    text = (draft.filename_template or "").strip()
    return text or None


def delete_query(store: Catalog, principal: Principal, query_id: str) -> None:
    """Delete a readable query; its unsettled exports then fail access_lost before they run."""
    _writer(principal)
    query = get_readable_query(store, principal, query_id)
    deleted = query_event(principal, Action.QUERY_DELETED, query)
    if not store.delete_query(query.id, audit=deleted):
        raise NotFoundError(NO_SUCH_QUERY)


def audited_fields(query: Query) -> dict[str, Any]:
    """What the trail keeps of a query: its settings and statement, never data."""
    return {
        "name": query.name,
        "sql": query.sql,
        "source": query.source,
        "parameters": [p.name for p in query.parameters],
        "visibility": query.visibility.value,
        "members": sorted(query.members),
        "filename_template": query.filename_template,
    }


def query_event(
    actor: Principal | Actor, action: Action, query: Query, *, before: Query | None = None
) -> AuditEvent:
    """A query created, changed (`before` it was) or deleted, by `actor`."""
    details: dict[str, Any] = {"name": query.name, "source": query.source}
    if before is not None:
        details |= changes(audited_fields(before), audited_fields(query))
    elif action is Action.QUERY_CREATED:
        details["sql_sha256"] = hashlib.sha256(query.sql.encode()).hexdigest()
    return event(
        None,
        actor,
        action,
        workspace_id=query.workspace_id,
        target=("query", query.id),
        details=details,
    )
