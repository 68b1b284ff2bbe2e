"""The one place that picks concrete adapters from the settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.sources import RegisteredSource
from qexport.ports import Clock, ObjectStore, Source
from qexport.sources.credentials import unseal
from qexport.sources.duckdb import DuckDBSource
from qexport.sources.registry import DEMO_SOURCE as DEMO_SOURCE  # noqa: PLC0414 - re-exported
from qexport.sources.registry import SourceRegistry, configured_grants
from qexport.storage.filesystem import FilesystemObjectStore
from qexport.store.accounts import SqlAccountStore
from qexport.store.deliveries import SqlDeliveryStore
from qexport.store.engine import create_engine, migrate
from qexport.store.exports import SqlMetadataStore
from qexport.store.notify import PgListener
from qexport.store.schedules import SqlScheduleStore
from qexport.store.sqlite_watch import SqliteChangeWatcher, sqlite_path
from qexport.worker.runner import Deps

if TYPE_CHECKING:
    from qexport.api.context import ApiContext
    from qexport.deliveries.dispatch import DeliveryDispatcher


def object_store(settings: Settings) -> ObjectStore:
    url = urlparse(settings.storage_url)
    if url.scheme == "file":
        return FilesystemObjectStore(Path(unquote(url.path)))
    if url.scheme == "s3":
        from qexport.storage.s3 import S3ObjectStore  # boto3 loads only when S3 is used

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
    parsed = urlparse(url)
    if parsed.scheme == "duckdb":
        return DuckDBSource(
            name,
            Path(unquote(parsed.path)),
            memory_limit=settings.duckdb_memory_limit,
            temp_limit=settings.duckdb_temp_limit,
        )
    if parsed.scheme in ("postgresql", "postgres"):
        from qexport.sources.postgres import PostgresSource

        return PostgresSource(name, url, allow_privileged_role=allow_privileged_role)
    # Only the scheme is echoed: the URL may hold a password.
    raise ValueError(
        f"unsupported source URL scheme {parsed.scheme!r} for {name!r}"
        " (expected duckdb:///path or postgresql://user@host/database)"
    )


def check_source_role(
    name: str, url: str, settings: Settings, allow_privileged_role: bool
) -> list[str]:
    """Build the source as a worker will and, for PostgreSQL, connect and judge its role:
    SourceRefusedError for a privileged one not allowed; the allowed findings otherwise."""
    if urlparse(url).scheme not in ("postgresql", "postgres"):
        source_from_url(name, url, settings)
        return []
    from qexport.sources.postgres import PostgresSource

    return PostgresSource(name, url, allow_privileged_role=allow_privileged_role).check_role()


def sources(settings: Settings) -> dict[str, Source]:
    """The configured sources: the built-in demo and those of QEXPORT_SOURCE_*."""
    found: dict[str, Source] = {
        DEMO_SOURCE: DuckDBSource(
            DEMO_SOURCE,
            settings.demo_database,
            memory_limit=settings.duckdb_memory_limit,
            temp_limit=settings.duckdb_temp_limit,
        )
    }
    for name, url in settings.sources.items():
        privileged = name in settings.privileged_sources
        found[name] = source_from_url(name, url, settings, allow_privileged_role=privileged)
    return found


def registered_source(source: RegisteredSource, settings: Settings) -> Source:
    """A registered source, its stored URL opened (SourceCredentialsError if it cannot be)."""
    url = unseal(source.name, source.url, settings.secret_key)
    return source_from_url(
        source.name, url, settings, allow_privileged_role=source.allow_privileged_role
    )


def source_registry(settings: Settings, accounts: SqlAccountStore) -> SourceRegistry:
    """The configured sources, then those registered in the database (looked up on a miss)."""
    return SourceRegistry(
        sources(settings),
        configured_grants(settings),
        accounts.registered_sources,
        lambda source: registered_source(source, settings),
    )


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
    return PgListener(settings.database_url, on_notify)


def check_ready(deps: Deps) -> None:
    """Start-up checks that fail with a clear reason: the metadata database answers and the
    object store is usable (on S3, the bucket exists and the credentials may use it)."""
    deps.store.has_unsettled()
    check_bucket = getattr(deps.objects, "check_bucket", None)
    if check_bucket is not None:
        check_bucket()


def api_context(settings: Settings, deps: Deps) -> ApiContext:
    """What the HTTP API needs, over the same adapters as the worker."""
    from qexport.api.context import ApiContext

    assert isinstance(deps.store, SqlMetadataStore)
    return ApiContext(
        store=deps.store,
        accounts=SqlAccountStore(deps.store.engine),
        objects=deps.objects,
        clock=deps.clock,
        settings=settings,
        schedules=schedule_store(deps),
        deliveries=delivery_store(deps),
        sources=deps.sources,
    )


def schedule_store(deps: Deps) -> SqlScheduleStore:
    assert isinstance(deps.store, SqlMetadataStore)
    return SqlScheduleStore(deps.store.engine, notify=deps.settings.pg_notify)


def delivery_store(deps: Deps) -> SqlDeliveryStore:
    assert isinstance(deps.store, SqlMetadataStore)
    return SqlDeliveryStore(deps.store.engine)


def build(settings: Settings, *, clock: Clock | None = None, upgrade: bool = True) -> Deps:
    """Wire the adapters; with `upgrade`, bring the metadata database to the newest schema."""
    engine = create_engine(settings.database_url)
    if upgrade:
        migrate(engine)
    return Deps(
        store=SqlMetadataStore(engine, notify=settings.pg_notify),
        objects=object_store(settings),
        sources=source_registry(settings, SqlAccountStore(engine)),
        clock=clock or SystemClock(),
        settings=settings,
    )


def dispatcher(settings: Settings, deps: Deps) -> DeliveryDispatcher:
    """The delivery sender over the metadata database (email only when QEXPORT_SMTP_URL is set)."""
    from qexport.deliveries.dispatch import DeliveryDispatcher  # httpx2 loads only when sending

    assert isinstance(deps.store, SqlMetadataStore)
    return DeliveryDispatcher(
        deps.store,
        delivery_store(deps),
        schedule_store(deps),
        SqlAccountStore(deps.store.engine),
        deps.objects,
        deps.clock,
        settings,
    )
