"""One frozen settings object, read once at the entrypoint from QEXPORT_* variables."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from qexport.egress import EgressPolicy, parse_allow
from qexport.smtp_url import parse_smtp_url

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """`90`, `90s`, `15m`, `12h`, `7d`, `2w` -> timedelta."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"invalid duration {text!r} (examples: 90s, 15m, 12h, 7d)")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError("must be true or false")


_SIZE = re.compile(r"^\s*(\d+)\s*(|B|KiB|MiB|GiB|TiB)\s*$")
_SIZE_UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def _parse_size(text: str) -> int:
    """`1048576`, `512MiB`, `50GiB` -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError("expected bytes, or a number with KiB, MiB, GiB or TiB")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("qexport-data")
    # URLs may carry passwords: kept out of repr (and so out of logs and tracebacks).
    database_url: str = field(default="", repr=False)
    storage_url: str = ""
    retention: timedelta = timedelta(days=7)
    lease_seconds: float = 30.0
    max_attempts: int = 3
    retry_base_seconds: float = 2.0
    retry_max_seconds: float = 300.0
    statement_timeout_seconds: float = 300.0
    max_rows: int = 50_000_000
    max_bytes: int = 10 * 1024**3
    part_size: int = 8 * 1024**2
    poll_seconds: float = 0.5
    shutdown_grace_seconds: float = 20.0
    secret_key: str = field(default="", repr=False)
    # Where public links point; unset, `serve` uses its own address and `scheduler` refuses
    # to start (the links it sends must reach people from elsewhere).
    public_base_url: str = ""
    smtp_url: str = field(default="", repr=False)
    s3_endpoint_url: str = ""
    duckdb_memory_limit: str = "256MB"
    pg_notify: bool = True
    # Queued or running exports one requester may have at once (the API answers 429 beyond).
    max_unsettled_per_user: int = 20
    # Exports of one requester running at once; 0: half the installation's worker slots (at
    # least 1). There is no registry of workers, so the installation's slots are declared
    # (QEXPORT_WORKER_SLOTS) or, when 0, taken as this `worker` command's processes x
    # concurrency: right for one worker command, too low for several (set it then).
    max_running_per_user: int = 0
    worker_slots: int = 0
    # Per workspace: live schedules, the shortest gap between a schedule's due times, live
    # public links per export, bytes of unexpired files.
    max_schedules_per_workspace: int = 100
    schedule_min_interval: timedelta = timedelta(minutes=5)
    max_links_per_export: int = 20
    workspace_quota: int = 50 * 1024**3  # bytes; 0: no quota
    # DuckDB's spill to disk per connection (its max_temp_directory_size).
    duckdb_temp_limit: str = "10GiB"
    sources: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Which workspaces may use each configured source (QEXPORT_SOURCE_<NAME>_WORKSPACES: names
    # or "*"); a configured source without an entry is usable by no workspace. The built-in
    # demo source belongs to the demo workspace unless listed here.
    source_workspaces: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Configured sources whose role may be privileged (QEXPORT_SOURCE_<NAME>_ALLOW_PRIVILEGED_ROLE).
    privileged_sources: frozenset[str] = frozenset()
    # Schedules and deliveries.
    schedule_grace: timedelta = timedelta(minutes=1)  # a due time older than this was missed
    scheduler_poll_seconds: float = 1.0
    delivery_max_attempts: int = 5
    delivery_retry_base_seconds: float = 30.0
    delivery_retry_max_seconds: float = 3600.0
    delivery_timeout_seconds: float = 30.0
    # Files up to this size are attached to delivery emails; 0: links only.
    email_attachment_max_bytes: int = 0
    # Rows (every section's together) a PDF report may hold: ReportLab keeps the laid-out
    # pages in memory until the file is saved, about 0.45 KiB a row.
    report_pdf_max_rows: int = 100_000
    # Internal destinations (comma-separated CIDRs and host names) that webhooks may reach
    # although the egress policy refuses them by default (loopback, private, link-local...).
    egress_allow: str = ""
    # Bytes of cell data (every section's together) a report holds in memory while it renders:
    # string and binary values by length, others at a fixed size each.
    report_max_bytes: int = 64 * 1024**2
    # Password checks (argon2, 64 MiB each) one server process runs at once; sign-ins that
    # wait longer than a few seconds for one get 503.
    signin_concurrency: int = 2

    def __post_init__(self) -> None:
        if not self.database_url:
            object.__setattr__(self, "database_url", f"sqlite:///{self.data_dir / 'qexport.db'}")
        if not self.storage_url:
            object.__setattr__(
                self, "storage_url", f"file://{(self.data_dir / 'objects').absolute()}"
            )
        if self.max_attempts < 1:
            raise ValueError("QEXPORT_MAX_ATTEMPTS must be at least 1")
        if self.lease_seconds <= 0:
            raise ValueError("QEXPORT_LEASE_SECONDS must be positive")
        if self.max_unsettled_per_user < 1:
            raise ValueError("QEXPORT_MAX_UNSETTLED_PER_USER must be at least 1")
        self._check_quotas()
        if self.delivery_max_attempts < 1:
            raise ValueError("QEXPORT_DELIVERY_MAX_ATTEMPTS must be at least 1")
        if self.email_attachment_max_bytes < 0:
            raise ValueError("QEXPORT_EMAIL_ATTACHMENT_MAX_BYTES must not be negative")
        if self.report_pdf_max_rows < 1:
            raise ValueError("QEXPORT_REPORT_PDF_MAX_ROWS must be at least 1")
        try:
            parse_allow(self.egress_allow)
        except ValueError as exc:
            raise ValueError(f"invalid QEXPORT_EGRESS_ALLOW {self.egress_allow!r}: {exc}") from None
        if self.report_max_bytes < 1:
            raise ValueError("QEXPORT_REPORT_MAX_BYTES must be at least 1")
        if self.smtp_url:
            parse_smtp_url(self.smtp_url)  # ValueError naming QEXPORT_SMTP_URL, never the password

        if self.signin_concurrency < 1:
            raise ValueError("QEXPORT_SIGNIN_CONCURRENCY must be at least 1")

    def egress_policy(self) -> EgressPolicy:
        """Where webhooks may connect (QEXPORT_EGRESS_ALLOW opens internal destinations)."""
        return EgressPolicy.from_allow(self.egress_allow)

    def _check_quotas(self) -> None:
        for name in (
            "max_running_per_user",
            "worker_slots",
            "max_schedules_per_workspace",
            "max_links_per_export",
            "workspace_quota",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"QEXPORT_{name.upper()} must not be negative")

    def running_cap(self, group_slots: int) -> int:
        """QEXPORT_MAX_RUNNING_PER_USER, or half the installation's worker slots (at least 1)."""
        if self.max_running_per_user:
            return self.max_running_per_user
        return max(1, (self.worker_slots or group_slots) // 2)

    @property
    def metadata_on_postgresql(self) -> bool:
        return self.database_url.startswith(("postgresql", "postgres"))

    def service_refusal(self, service: str) -> str | None:
        """Why `service` (serve, worker, scheduler) must not start on these settings, or None.

        On PostgreSQL the master secret must come from QEXPORT_SECRET_KEY: a database shared
        with others and backed up elsewhere is no place for the key that signs sessions,
        webhooks and delivery links. The scheduler sends links, so it needs their address."""
        if self.metadata_on_postgresql and not self.secret_key:
            return (
                f"{service} cannot start: QEXPORT_SECRET_KEY is required when the metadata"
                " database is PostgreSQL (the generated secret is kept only in an embedded"
                " SQLite database); set it to a long random value, the same on every machine"
            )
        if service == "scheduler" and not self.public_base_url:
            return (
                "scheduler cannot start: QEXPORT_PUBLIC_BASE_URL is not set; the links it"
                " delivers must point at the address people reach qexport at"
                " (e.g. https://qexport.example.com)"
            )
        return None

    @property
    def demo_database(self) -> Path:
        return self.data_dir / "demo.duckdb"

    def with_overrides(self, **changes: Any) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read QEXPORT_* variables; unknown values fail loudly with the variable's name."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}

        def get(name: str) -> str | None:
            value = env.get(f"QEXPORT_{name}")
            return value if value not in (None, "") else None

        def read(name: str, parse: Callable[[str], Any]) -> None:
            if (v := get(name)) is not None:
                try:
                    values[name.lower()] = parse(v)
                except ValueError as exc:
                    raise ValueError(f"invalid QEXPORT_{name} {v!r}: {exc}") from None

        read("DATA_DIR", Path)
        for name in (
            "DATABASE_URL",
            "STORAGE_URL",
            "SECRET_KEY",
            "PUBLIC_BASE_URL",
            "SMTP_URL",
            "S3_ENDPOINT_URL",
            "DUCKDB_MEMORY_LIMIT",
            "EGRESS_ALLOW",
            "DUCKDB_TEMP_LIMIT",
        ):
            read(name, str)
        read("PG_NOTIFY", _parse_bool)
        for name in ("RETENTION", "SCHEDULE_GRACE", "SCHEDULE_MIN_INTERVAL"):
            read(name, parse_duration)
        for name in (
            "LEASE_SECONDS",
            "STATEMENT_TIMEOUT_SECONDS",
            "POLL_SECONDS",
            "RETRY_BASE_SECONDS",
            "RETRY_MAX_SECONDS",
            "SHUTDOWN_GRACE_SECONDS",
            "SCHEDULER_POLL_SECONDS",
            "DELIVERY_RETRY_BASE_SECONDS",
            "DELIVERY_RETRY_MAX_SECONDS",
            "DELIVERY_TIMEOUT_SECONDS",
        ):
            read(name, float)
        for name in (
            "MAX_ATTEMPTS",
            "MAX_ROWS",
            "MAX_BYTES",
            "PART_SIZE",
            "MAX_UNSETTLED_PER_USER",
            "DELIVERY_MAX_ATTEMPTS",
            "EMAIL_ATTACHMENT_MAX_BYTES",
            "REPORT_PDF_MAX_ROWS",
            "REPORT_MAX_BYTES",
            "SIGNIN_CONCURRENCY",
            "MAX_RUNNING_PER_USER",
            "WORKER_SLOTS",
            "MAX_SCHEDULES_PER_WORKSPACE",
            "MAX_LINKS_PER_EXPORT",
        ):
            read(name, int)
        read("WORKSPACE_QUOTA", _parse_size)
        values.update(_source_settings(env))
        return cls(**values)


_SOURCE_PREFIX = "QEXPORT_SOURCE_"
_WORKSPACES_SUFFIX = "_WORKSPACES"
_PRIVILEGED_SUFFIX = "_ALLOW_PRIVILEGED_ROLE"


def _source_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """QEXPORT_SOURCE_<NAME>=URL and its _WORKSPACES and _ALLOW_PRIVILEGED_ROLE companions."""
    urls: dict[str, str] = {}
    workspaces: dict[str, frozenset[str]] = {}
    privileged: set[str] = set()
    for key, value in env.items():
        if not key.startswith(_SOURCE_PREFIX) or not value:
            continue
        name = key.removeprefix(_SOURCE_PREFIX)
        if name.endswith(_WORKSPACES_SUFFIX):
            listed = frozenset(w.strip() for w in value.split(",") if w.strip())
            workspaces[name.removesuffix(_WORKSPACES_SUFFIX).lower()] = listed
        elif name.endswith(_PRIVILEGED_SUFFIX):
            try:
                allowed = _parse_bool(value)
            except ValueError as exc:
                raise ValueError(f"invalid {key} {value!r}: {exc}") from None
            if allowed:
                privileged.add(name.removesuffix(_PRIVILEGED_SUFFIX).lower())
        else:
            urls[name.lower()] = value
    return {
        "sources": urls,
        "source_workspaces": workspaces,
        "privileged_sources": frozenset(privileged),
    }
