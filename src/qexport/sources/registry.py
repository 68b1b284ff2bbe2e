"""Every data source by name: the configured ones, then those registered in the database,
and which workspaces may use each."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from urllib.parse import unquote, urlsplit

import structlog

from qexport.config import Settings
from qexport.domain.failures import AccessLostError, SourceUnavailableError
from qexport.domain.sources import EVERY_WORKSPACE, RegisteredSource, may_use
from qexport.ports import AccountStore, Source

log = structlog.get_logger()

DEMO_SOURCE = "demo"
AUDIT_SOURCE = "audit"  # sources/audit.py: each workspace's own trail, for its admins
DEMO_WORKSPACE = "demo"


class SourceRegistry:
    """Configured sources, then those registered with `qexport sources add`; a SourceCatalog.

    A name not known yet is looked up in the database again, so that a worker started before
    a source was registered finds it at its next export; who may use a registered source is
    read from the database at every lookup, so that taking it away holds at once. Configured
    names win over registered ones (registering a configured name is refused anyway).
    """

    def __init__(
        self,
        configured: Mapping[str, Source],
        grants: Mapping[str, frozenset[str]],
        registered: Callable[[], Mapping[str, RegisteredSource]],
        build: Callable[[RegisteredSource], Source],
    ) -> None:
        self._configured = dict(configured)
        self._grants = dict(grants)
        self._registered = registered
        self._build = build
        self._built: dict[str, Source] = {}
        self._lock = threading.Lock()

    def _workspaces(self, name: str) -> tuple[frozenset[str], RegisteredSource | None] | None:
        if name in self._configured:
            return self._grants.get(name, frozenset()), None
        found = self._registered().get(name)
        return None if found is None else (found.workspaces, found)

    def source_for(self, name: str, workspace_id: str) -> Source:
        """The source if `workspace_id` may use it: SourceUnavailableError for an unknown
        name, AccessLostError for one the workspace may not use."""
        known = self._workspaces(name)
        if known is None:
            raise SourceUnavailableError(f"no data source named {name!r} is configured")
        workspaces, registered = known
        if not may_use(workspaces, workspace_id):
            raise AccessLostError(
                f"workspace {workspace_id!r} may no longer use the data source {name!r}"
            )
        if registered is None:
            return self._configured[name]
        with self._lock:
            found = self._built.get(name)
        if found is not None:
            return found
        try:
            source = self._build(registered)
        except ValueError:
            # Checked when it was registered; a row edited by hand since is not a source.
            log.warning("source_unusable", source=name)
            raise SourceUnavailableError(f"the data source {name!r} is not usable") from None
        with self._lock:
            return self._built.setdefault(name, source)

    def close(self) -> None:
        """Close every source this registry holds that has something to close (DuckDB's
        connection and scratch folder); each opens again on next use."""
        with self._lock:
            held = [*self._configured.values(), *self._built.values()]
        for source in held:
            close: Callable[[], None] | None = getattr(source, "close", None)
            if close is not None:
                close()

    def names_for(self, workspace_id: str) -> list[str]:
        """The sources `workspace_id` may use, sorted."""
        return sorted(usable_names(self._grants, self._registered(), workspace_id))


def usable_names(
    grants: Mapping[str, frozenset[str]],
    registered: Mapping[str, RegisteredSource],
    workspace_id: str,
) -> frozenset[str]:
    """The configured (by their grants) and registered sources `workspace_id` may use."""
    usable = {n for n, w in grants.items() if may_use(w, workspace_id)}
    usable |= {n for n, r in registered.items() if may_use(r.workspaces, workspace_id)}
    return frozenset(usable)


def configured_names(settings: Settings) -> frozenset[str]:
    """The sources of the configuration (QEXPORT_SOURCE_*), the built-in demo and audit
    included."""
    return frozenset({DEMO_SOURCE, AUDIT_SOURCE, *settings.sources})


def configured_grants(settings: Settings) -> dict[str, frozenset[str]]:
    """Who may use each configured source: QEXPORT_SOURCE_<NAME>_WORKSPACES; the demo source
    belongs to the demo workspace unless that says otherwise; anything else to nobody."""
    grants = {DEMO_SOURCE: frozenset({DEMO_WORKSPACE})}
    grants.update({n: frozenset() for n in settings.sources})
    grants.update({n: w for n, w in settings.source_workspaces.items() if n in grants})
    return grants


def usable_source_names(
    settings: Settings, accounts: AccountStore, workspace_id: str
) -> frozenset[str]:
    """Every source a query of `workspace_id` may name: configured or registered."""
    return usable_names(configured_grants(settings), accounts.registered_sources(), workspace_id)


def query_source_names(
    settings: Settings, accounts: AccountStore, workspace_id: str, *, admin: bool
) -> frozenset[str]:
    """The sources a query saved by this caller may name: the workspace's, and for its
    admins the built-in `audit` too (sources/audit.py)."""
    names = usable_source_names(settings, accounts, workspace_id)
    return names | {AUDIT_SOURCE} if admin else names


def grant_words(workspaces: frozenset[str]) -> str:
    """Who may use a source, for a listing."""
    if EVERY_WORKSPACE in workspaces:
        return "every workspace"
    return ", ".join(sorted(workspaces)) or "no workspace"


def _masked_query(query: str) -> str:
    """The query with every `password=` value masked. libpq also takes a password as a
    query parameter (`postgresql://u@h/db?password=...`) and decodes percent-escapes in the
    key first, so `%70assword=...` is a password too."""
    pieces = []
    for piece in query.split("&"):
        key, sep, _ = piece.partition("=")
        pieces.append(f"{key}=***" if sep and unquote(key).lower() == "password" else piece)
    return "&".join(pieces)


def _masked_spark_params(rest: str) -> str:
    """Spark Connect's `;key=value` parameters with every `token=` value masked: the token
    runs to the next `;`, whatever `?` or `#` it holds (pyspark's parser would cut it there
    and show the rest)."""
    pieces = []
    for piece in rest.split(";"):
        key, sep, _ = piece.partition("=")
        pieces.append(f"{key}=***" if sep and unquote(key).strip().lower() == "token" else piece)
    return ";".join(pieces)


def masked_url(url: str) -> str:
    """The URL with its password (if any) replaced by `***`, safe to print and log; of a
    Spark Connect URL (`sc://host:15002/;token=...`), its token.

    Cut as libpq cuts it, not as a URL parser would: libpq reads `user:password@` up to the
    last `@` before the first `/`, whatever `?` or `#` the password holds (a URL parser ends
    the authority there and would show the rest), and has no fragments, so a `password=`
    anywhere after the `?` counts.
    """
    try:
        scheme = urlsplit(url).scheme
    except ValueError:
        return "<unparseable URL>"
    prefix, slashes, rest = url.partition("//")
    if not slashes:  # not a URL of any source kind: show nothing of it
        return f"{scheme}:***"
    authority, slash, after = rest.partition("/")
    if scheme.lower() == "sc":
        authority, after = _masked_spark_params(authority), _masked_spark_params(after)
    userinfo, at, host = authority.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        authority = f"{user}:***@{host}" if colon else authority
    head, question, query = f"{authority}{slash}{after}".partition("?")
    return f"{prefix}//{head}{question}{_masked_query(query)}"
