"""Every data source by name within a workspace: the configured ones and those registered in
the database, and which workspaces may use each (domain/sources.py: names are per
workspace)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import unquote, urlsplit

import structlog

from qexport.config import Settings
from qexport.domain.failures import AccessLostError, SourceUnavailableError
from qexport.domain.sources import AUDIT_SOURCE, EVERY_WORKSPACE, RegisteredSource, usable_in
from qexport.ports import Source, SourceRecordStore

log = structlog.get_logger()

DEMO_SOURCE = "demo"
DEMO_WORKSPACE = "demo"
# The built-in sources' names, which no workspace may register.
BUILT_IN_NAMES = frozenset({DEMO_SOURCE, AUDIT_SOURCE})


class SourceRegistry:
    """Configured sources, then those registered with `qexport sources add`; a SourceCatalog.

    Every lookup reads the registered sources from the database again, so that a worker
    started before a source was registered finds it at its next export, and taking a source
    away (or registering a workspace's own of the same name) holds at once. A registered
    source is built once per process, keyed by its workspace and name; a configured one is
    opened when first used (the built-in DuckDB sources load DuckDB and Arrow: a command that
    reads no source never does).
    """

    def __init__(
        self,
        configured: Mapping[str, Callable[[], Source]],
        grants: Mapping[str, frozenset[str]],
        registered: Callable[[], Iterable[RegisteredSource]],
        build: Callable[[RegisteredSource], Source],
    ) -> None:
        self._configured = dict(configured)
        self._grants = {n: w for n, w in grants.items() if n in self._configured}
        self._registered = registered
        self._build = build
        self._built: dict[tuple[str, str], Source] = {}
        self._opened: dict[str, Source] = {}
        self._lock = threading.Lock()

    def source_for(self, name: str, workspace_id: str) -> Source:
        """The source `name` means in `workspace_id`: SourceUnavailableError for a name known
        nowhere, AccessLostError for one the workspace may not use."""
        registered = list(self._registered())
        usable = usable_in(workspace_id, self._grants, registered)
        if name not in usable:
            if name in self._configured or any(r.name == name for r in registered):
                raise AccessLostError(
                    f"workspace {workspace_id!r} may no longer use the data source {name!r}"
                )
            raise SourceUnavailableError(f"no data source named {name!r} is configured")
        found = usable[name]
        if found is None:
            with self._lock:
                opened = self._opened.get(name)
                if opened is None:
                    opened = self._opened[name] = self._configured[name]()
            return opened
        with self._lock:
            source = self._built.get(found.key)
        if source is not None:
            return source
        try:
            source = self._build(found)
        except ValueError:
            # Checked when it was registered; a row edited by hand since is not a source.
            log.warning("source_unusable", source=name, owner=found.workspace_id)
            raise SourceUnavailableError(f"the data source {name!r} is not usable") from None
        with self._lock:
            return self._built.setdefault(found.key, source)

    def close(self) -> None:
        """Close every source this registry holds that has something to close (DuckDB's
        connection and scratch folder); each opens again on next use."""
        with self._lock:
            held = [*self._opened.values(), *self._built.values()]
        for source in held:
            close: Callable[[], None] | None = getattr(source, "close", None)
            if close is not None:
                close()

    def names_for(self, workspace_id: str) -> list[str]:
        """The sources `workspace_id` may use, sorted."""
        return list(usable_in(workspace_id, self._grants, self._registered()))


def configured_names(settings: Settings) -> frozenset[str]:
    """The sources of the configuration (QEXPORT_SOURCE_*), the built-in demo and audit
    included."""
    return frozenset({*BUILT_IN_NAMES, *settings.sources})


def configured_grants(settings: Settings) -> dict[str, frozenset[str]]:
    """Who may use each configured source: QEXPORT_SOURCE_<NAME>_WORKSPACES; the demo source
    belongs to the demo workspace unless that says otherwise; anything else to nobody."""
    grants = {DEMO_SOURCE: frozenset({DEMO_WORKSPACE})}
    grants.update({n: frozenset() for n in settings.sources})
    grants.update({n: w for n, w in settings.source_workspaces.items() if n in grants})
    return grants


def usable_sources_in(
    settings: Settings, accounts: SourceRecordStore, workspace_id: str
) -> dict[str, RegisteredSource | None]:
    """Every name a query of `workspace_id` may use, and the registered source it means
    there (None: the configured one)."""
    return usable_in(workspace_id, configured_grants(settings), accounts.registered_sources())


def usable_source_names(
    settings: Settings, accounts: SourceRecordStore, workspace_id: str
) -> frozenset[str]:
    """Every source a query of `workspace_id` may name: configured or registered."""
    return frozenset(usable_sources_in(settings, accounts, workspace_id))


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
