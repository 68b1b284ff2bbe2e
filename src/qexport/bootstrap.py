"""The one place that picks concrete adapters from the settings and builds the container."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import unquote, urlparse

import sqlalchemy as sa

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.audit_keys import AuditKeys
from qexport.domain.failures import MetadataUnavailableError, StorageUnavailableError
from qexport.domain.sources import AUDIT_SOURCE, EVERY_WORKSPACE, RegisteredSource
from qexport.ports import (
    AuditLog,
    Clock,
    ExportQueue,
    LocalFiles,
    ObjectStore,
    Presigner,
    RetentionRules,
    Source,
    SourceCatalog,
)
from qexport.private_files import make_private_dirs, open_private
from qexport.sources import schemes
from qexport.sources.credentials import unseal
from qexport.sources.registry import DEMO_SOURCE as DEMO_SOURCE  # noqa: PLC0414 - re-exported
from qexport.sources.registry import SourceRegistry, configured_grants
from qexport.storage.filesystem import FilesystemObjectStore
from qexport.store.accounts import SqlAccountStore
from qexport.store.approvals import SqlApprovalStore
from qexport.store.audit.chain import use_keys
from qexport.store.audit.log import SqlAuditLog
from qexport.store.catalog import SqlCatalog
from qexport.store.deliveries import SqlDeliveryStore
from qexport.store.engine import (
    create_engine,
    current_revision,
    migrate,
    schema_mismatch,
    serve_on_this_loop,
)
from qexport.store.exports.queue import SqlExportQueue
from qexport.store.rates import SqlRateLimits
from qexport.store.schedules import SqlScheduleStore
from qexport.store.sqlite_watch import SqliteChangeWatcher, sqlite_path
from qexport.store.stats import read_stats

if TYPE_CHECKING:
    from qexport.deliveries.dispatch import DeliveryDispatcher
    from qexport.previews.processes import PreviewProcesses, StartMethod
    from qexport.storage.s3.store import S3ObjectStore
    from qexport.store.notify import PgListener

# Read, never written: a stat of a key nobody uses tells whether the store answers.
PROBE_KEY = "exports/readyz/probe"
# How long a source registered or shared may take to say what data it reaches.
IDENTITY_TIMEOUT_SECONDS = 10.0
# Where the embedded default keeps the audit chain's secret when QEXPORT_SECRET_KEY is unset:
# in the data directory, never in the database (which holds the other generated secret).
AUDIT_SECRET_FILE = "audit-chain.secret"  # noqa: S105 - a file name, not a secret


def audit_keys(settings: Settings) -> AuditKeys | None:
    """The keys of the audit chains: QEXPORT_SECRET_KEY's, and its former values' (and the
    generated secret's, if events were keyed with it before the variable was set); without
    the variable, on SQLite, a secret generated once into the data directory (0600); on
    PostgreSQL, none: its servers refuse to start, and a command that records fails."""
    path = settings.data_dir / AUDIT_SECRET_FILE
    former = settings.previous_secret_keys
    if settings.secret_key:
        generated = _read_secret(path)
        return AuditKeys.from_secrets(settings.secret_key, [*former, *filter(None, [generated])])
    if settings.metadata_on_postgresql:
        return None
    return AuditKeys.from_secrets(_generated_secret(path), former)


def _read_secret(path: Path) -> str | None:
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not found:
        raise ValueError(f"{path} is empty: restore it from a backup (it keys the audit trail)")
    return found


def _generated_secret(path: Path) -> str:
    """The secret in `path`, generated first if missing: written whole to a file beside it
    and linked into place, so that processes starting at once all read the same one."""
    found = _read_secret(path)
    if found is not None:
        return found
    make_private_dirs(path.parent)
    draft = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    try:
        with open_private(draft) as handle:
            handle.write(secrets.token_hex(32).encode())
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # made first by another: theirs is the one
            os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)
    generated = _read_secret(path)
    assert generated is not None
    return generated


def object_store(settings: Settings) -> ObjectStore:
    url = urlparse(settings.storage_url)
    if url.scheme == "file":
        return FilesystemObjectStore(Path(unquote(url.path)))
    if url.scheme == "s3":
        from qexport.storage.s3.store import S3ObjectStore  # boto3 loads only when S3 is used

        return S3ObjectStore.from_url(
            settings.storage_url, endpoint_url=settings.s3_endpoint_url or None
        )
    raise ValueError(
        f"unsupported QEXPORT_STORAGE_URL {settings.storage_url!r}"
        " (expected file:///path or s3://bucket/prefix)"
    )


def source_from_url(
    name: str, url: str, settings: Settings, *, allow_privileged_role: bool = False
) -> Source:
    """The source a URL names, by its scheme's `qexport.sources` entry point (schemes.py);
    ValueError, naming the installed schemes, for a scheme nothing serves."""
    return schemes.source_from_url(name, url, settings, allow_privileged_role=allow_privileged_role)


def check_source_role(
    name: str, url: str, settings: Settings, allow_privileged_role: bool
) -> list[str]:
    """Build the source as a worker will and, where its kind can judge a login (PostgreSQL,
    MySQL), connect and judge it: SourceRefusedError for a privileged one not allowed; the
    allowed findings otherwise."""
    source = source_from_url(name, url, settings, allow_privileged_role=allow_privileged_role)
    return source.check_role()


def source_identity(name: str, url: str, settings: Settings) -> str | None:
    """The identity of the data the source over `url` reaches, as it says (a DuckDB file's
    path, without opening it; a PostgreSQL or MySQL server, connecting); None for a kind
    that cannot say (services/sensitive_rules.py)."""
    source = source_from_url(name, url, settings)
    catalogue = source.catalogue((), timeout_seconds=IDENTITY_TIMEOUT_SECONDS)
    return None if catalogue is None else catalogue.identity


def sources(settings: Settings) -> dict[str, Callable[[], Source]]:
    """The configured sources, each opened on first use: the built-in demo and those of
    QEXPORT_SOURCE_*, whose URLs are checked here (a bad one stops the process starting)."""

    def demo() -> Source:
        from qexport.sources.duckdb.source import DuckDBSource  # DuckDB and Arrow: on first use

        return DuckDBSource(
            DEMO_SOURCE,
            settings.demo_database,
            memory_limit=settings.duckdb_memory_limit,
            temp_limit=settings.duckdb_temp_limit,
        )

    found: dict[str, Callable[[], Source]] = {DEMO_SOURCE: demo}
    for name, url in settings.sources.items():
        privileged = name in settings.privileged_sources
        source = source_from_url(name, url, settings, allow_privileged_role=privileged)
        found[name] = functools.partial(_same, source)
    return found


def _same(source: Source) -> Source:
    """A source already opened (functools.partial of this: no closure over a loop's name)."""
    return source


def registered_source(source: RegisteredSource, settings: Settings) -> Source:
    """A registered source, its stored URL opened (SourceCredentialsError if it cannot be)."""
    url = unseal(source.name, source.url, settings.secret_key, owner=source.workspace_id)
    return source_from_url(
        source.name, url, settings, allow_privileged_role=source.allow_privileged_role
    )


def source_registry(
    settings: Settings, accounts: SqlAccountStore, audit: AuditLog | None = None
) -> SourceRegistry:
    """The configured sources (and the built-in `audit`, open to every workspace's admins),
    then those registered in the database (looked up on a miss)."""
    configured, grants = sources(settings), configured_grants(settings)
    if audit is not None:
        trail = audit

        def audit_source() -> Source:
            from qexport.sources.audit import AuditSource

            return AuditSource(trail, accounts, memory_limit=settings.duckdb_memory_limit)

        configured[AUDIT_SOURCE] = audit_source
        grants[AUDIT_SOURCE] = frozenset({EVERY_WORKSPACE})
    return SourceRegistry(
        configured,
        grants,
        accounts.registered_sources,
        lambda source: registered_source(source, settings),
    )


def preview_sources(settings: Settings) -> tuple[SourceCatalog, Callable[[], None]]:
    """The sources as a preview process opens them (previews/child.py), over a metadata
    engine of its own (registered sources, the audit source), and what closes them."""
    engine = create_engine(settings.database_url)
    accounts = SqlAccountStore(engine)
    registry = source_registry(settings, accounts, SqlAuditLog(engine))

    def close() -> None:
        registry.close()
        engine.dispose()

    return registry, close


def preview_processes(
    settings: Settings, *, start_method: StartMethod = "forkserver"
) -> PreviewProcesses:
    """Where previews run (previews/processes.py): processes forked from a forkserver, or,
    for a process that has opened no source yet and previews once (the CLI), forked from
    it ("fork")."""
    from qexport.previews.processes import PreviewProcesses

    return PreviewProcesses(settings, preview_sources, start_method=start_method)


def listener(
    settings: Settings, on_notify: Callable[[], None]
) -> PgListener | SqliteChangeWatcher | None:
    """What wakes an idle worker before its next poll: a LISTEN connection on PostgreSQL (when
    notifications are on), a watch for other processes' commits on a SQLite file."""
    path = sqlite_path(settings.database_url)
    if path is not None:
        return SqliteChangeWatcher(path, on_notify)
    if not settings.pg_notify or not settings.metadata_on_postgresql:
        return None
    from qexport.store.notify import PgListener  # psycopg: PostgreSQL's only

    return PgListener(settings.database_url, on_notify)


def check_ready(container: Container) -> None:
    """Start-up checks that fail with a clear reason: the metadata database answers and the
    object store is usable (on S3, the bucket exists and the credentials may use it)."""
    container.exports.has_unsettled()
    s3 = _on_s3(container.objects)
    if s3 is not None:
        s3.check_bucket()


def upgrade_database(settings: Settings) -> str | None:
    """Bring the metadata database to the newest schema; the revision it is at."""
    engine = create_engine(settings.database_url)
    try:
        migrate(engine)
        return current_revision(engine)
    finally:
        engine.dispose()


def build(
    settings: Settings, *, clock: Clock | None = None, upgrade: bool = True, serving: bool = False
) -> Container:
    """Wire the adapters, each store once; with `upgrade`, bring the metadata database to the
    newest schema. `serving`: for a server, whose metadata database has a deadline
    (QEXPORT_DATABASE_TIMEOUT_SECONDS, see qexport.store.engine)."""
    deadline = settings.database_timeout_seconds if serving else None
    engine = create_engine(settings.database_url, deadline=deadline)
    if upgrade:
        migrate(engine)
    keys = audit_keys(settings)
    if keys is not None:
        use_keys(engine, keys)
    exports = SqlExportQueue(engine, notify=settings.pg_notify)
    accounts = SqlAccountStore(engine)
    audit = SqlAuditLog(engine)
    objects = object_store(settings)
    presigner, local_files = object_capabilities(objects)
    previews = preview_processes(settings)

    def close() -> None:
        previews.close()
        engine.dispose()

    return Container(
        exports=exports,
        catalog=SqlCatalog(engine),
        approvals=SqlApprovalStore(engine, notify=settings.pg_notify),
        accounts=accounts,
        schedules=SqlScheduleStore(engine, notify=settings.pg_notify),
        deliveries=SqlDeliveryStore(engine),
        audit=audit,
        objects=objects,
        presigner=presigner,
        local_files=local_files,
        sources=source_registry(settings, accounts, audit),
        previews=previews,
        rates=SqlRateLimits(engine),
        clock=clock or SystemClock(),
        settings=settings,
        check_database=lambda: _check_database(settings, exports),
        check_schema=lambda: _check_schema(settings, engine),
        serve_on_this_loop=serve_on_this_loop,
        check_storage=lambda: _check_storage(objects),
        stats=lambda now: read_stats(engine, now),
        retention_rules=lambda: _retention_rules(objects),
        close=close,
    )


def _check_database(settings: Settings, exports: ExportQueue) -> None:
    _sqlite_file_there(settings)
    exports.has_unsettled()


def _check_schema(settings: Settings, engine: sa.Engine) -> str | None:
    _sqlite_file_there(settings)  # (a new connection would create an empty one)
    return schema_mismatch(engine)


def _sqlite_file_there(settings: Settings) -> None:
    path = sqlite_path(settings.database_url)
    # A pooled connection keeps reading a SQLite file that was deleted or replaced.
    if path is not None and not path.is_file():
        raise MetadataUnavailableError(f"the SQLite database {path} is gone")


def _check_storage(objects: ObjectStore) -> None:
    s3 = _on_s3(objects)
    if s3 is not None:
        s3.check_bucket()
        return
    if isinstance(objects, FilesystemObjectStore) and not _usable_folder(objects.root):
        raise StorageUnavailableError(
            f"the storage folder {objects.root} is not a writable directory"
        )
    objects.head(PROBE_KEY)


def _usable_folder(root: Path) -> bool:
    """The folder, or the nearest existing folder it would be created in, is writable (the
    store creates it with its first upload)."""
    probe = root.absolute()
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def object_capabilities(objects: ObjectStore) -> tuple[Presigner | None, LocalFiles | None]:
    """What the object store can do besides storing, as the container tells it: sign
    download URLs (S3), or give the path of a file on this machine (a folder)."""
    local = objects if isinstance(objects, FilesystemObjectStore) else None
    return _on_s3(objects), local


def _on_s3(objects: ObjectStore) -> S3ObjectStore | None:
    """The S3 store, or None; without importing boto3 to find out."""
    s3 = sys.modules.get("qexport.storage.s3.store")
    if s3 is not None and isinstance(objects, s3.S3ObjectStore):
        return cast("S3ObjectStore", objects)
    return None


def _retention_rules(objects: ObjectStore) -> RetentionRules | None:
    if isinstance(objects, FilesystemObjectStore):
        from qexport.storage.filesystem.lifecycle import FilesystemRetention

        return FilesystemRetention(objects)
    s3 = _on_s3(objects)
    if s3 is not None:
        from qexport.storage.s3.lifecycle import S3Retention

        return S3Retention(s3)
    return None


def dispatcher(container: Container, *, settings: Settings | None = None) -> DeliveryDispatcher:
    """The delivery sender over the container's stores (email only when QEXPORT_SMTP_URL is
    set), on `settings` when given (the container's otherwise)."""
    from qexport.deliveries.dispatch import DeliveryDispatcher  # httpx2 loads only when sending

    c = container
    return DeliveryDispatcher(
        c.exports,
        c.deliveries,
        c.schedules,
        c.accounts,
        c.objects,
        c.clock,
        settings or c.settings,
        catalog=c.catalog,
    )
