"""Settings from QEXPORT_* variables: typed, with clear errors for bad values."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from qexport.config import Settings


def test_defaults_live_in_the_data_dir() -> None:
    """Without variables: SQLite and the object folder inside ./qexport-data, 7-day retention."""
    settings = Settings.from_env({})
    assert settings.database_url == f"sqlite:///{Path('qexport-data') / 'qexport.db'}"
    assert settings.storage_url.endswith("qexport-data/objects")
    assert settings.retention == timedelta(days=7)
    assert settings.pg_notify is True


def test_variables_are_parsed_and_typed() -> None:
    """Durations, numbers, switches and extra sources come through typed."""
    settings = Settings.from_env(
        {
            "QEXPORT_RETENTION": "36h",
            "QEXPORT_MAX_ATTEMPTS": "5",
            "QEXPORT_LEASE_SECONDS": "12.5",
            "QEXPORT_PG_NOTIFY": "off",
            "QEXPORT_SOURCE_SALES": "duckdb:///srv/sales.duckdb",
        }
    )
    assert settings.retention == timedelta(hours=36)
    assert (settings.max_attempts, settings.lease_seconds) == (5, 12.5)
    assert settings.pg_notify is False
    assert settings.sources == {"sales": "duckdb:///srv/sales.duckdb"}


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("QEXPORT_RETENTION", "a week", "invalid QEXPORT_RETENTION 'a week': invalid duration"),
        ("QEXPORT_MAX_ATTEMPTS", "three", "invalid QEXPORT_MAX_ATTEMPTS 'three'"),
        ("QEXPORT_LEASE_SECONDS", "long", "invalid QEXPORT_LEASE_SECONDS 'long'"),
        ("QEXPORT_PG_NOTIFY", "maybe", "invalid QEXPORT_PG_NOTIFY 'maybe': must be true or false"),
        ("QEXPORT_MAX_ATTEMPTS", "0", "at least 1"),
    ],
)
def test_bad_values_are_refused_by_name(name: str, value: str, message: str) -> None:
    """A bad value stops start-up with a message naming the problem."""
    with pytest.raises(ValueError, match=message):
        Settings.from_env({name: value})


def test_secrets_are_masked_in_repr() -> None:
    """The secret key and SMTP URL never appear when settings are printed or logged."""
    settings = Settings(secret_key="s3cr3t", smtp_url="smtps://user:pw@mail")  # noqa: S106 - a fake
    assert "s3cr3t" not in repr(settings)
    assert "pw@mail" not in repr(settings)


def test_settings_never_show_passwords_in_their_repr() -> None:
    settings = Settings(
        database_url="postgresql://qexport:db-secret@db/qexport",
        sources={"warehouse": "postgresql://reader:source-secret@wh/dw"},
    )
    shown = repr(settings)
    assert "db-secret" not in shown
    assert "source-secret" not in shown


@pytest.mark.parametrize("url", ["smtp://mailer:hunter2@mail.internal", "smtp://mailer@mail:25"])
def test_smtp_credentials_over_plain_smtp_are_refused(url: str) -> None:
    """A login on smtp:// (clear text) stops start-up naming QEXPORT_SMTP_URL and the schemes
    that protect it, without the password; the same login over STARTTLS or TLS is accepted."""
    with pytest.raises(ValueError, match="QEXPORT_SMTP_URL") as caught:
        Settings.from_env({"QEXPORT_SMTP_URL": url})
    assert "smtp+starttls://" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    for safe in ("smtp+starttls://mailer:hunter2@mail.internal", "smtps://mailer:hunter2@mail"):
        assert Settings.from_env({"QEXPORT_SMTP_URL": safe}).smtp_url == safe
    assert Settings.from_env({"QEXPORT_SMTP_URL": "smtp://relay:25"}).smtp_url == "smtp://relay:25"


def test_report_max_bytes_is_read_and_checked() -> None:
    """QEXPORT_REPORT_MAX_BYTES defaults to 64 MiB, is read as an integer, and must be positive."""
    assert Settings.from_env({}).report_max_bytes == 64 * 1024**2
    assert Settings.from_env({"QEXPORT_REPORT_MAX_BYTES": "1000"}).report_max_bytes == 1000
    with pytest.raises(ValueError, match="QEXPORT_REPORT_MAX_BYTES must be at least 1"):
        Settings.from_env({"QEXPORT_REPORT_MAX_BYTES": "0"})


@pytest.mark.parametrize("service", ["serve", "worker", "scheduler"])
def test_services_on_postgresql_need_a_secret_key(service: str) -> None:
    """On a PostgreSQL metadata database every service refuses to start without
    QEXPORT_SECRET_KEY, saying why; with it (or on the embedded SQLite default) it may start."""
    pg = {"QEXPORT_DATABASE_URL": "postgresql://qexport@db/qexport"}
    links = {"QEXPORT_PUBLIC_BASE_URL": "https://qexport.example.com"}
    refusal = Settings.from_env({**pg, **links}).service_refusal(service)
    assert refusal is not None
    assert refusal.startswith(f"{service} cannot start: QEXPORT_SECRET_KEY is required")
    keyed = {**pg, **links, "QEXPORT_SECRET_KEY": "k" * 40}
    assert Settings.from_env(keyed).service_refusal(service) is None
    assert Settings.from_env(links).service_refusal(service) is None


def test_a_scheduler_needs_the_public_base_url() -> None:
    """Without QEXPORT_PUBLIC_BASE_URL the scheduler (which sends links) refuses to start,
    naming the variable; serve and worker do not need it."""
    refusal = Settings.from_env({}).service_refusal("scheduler")
    assert refusal is not None
    assert "QEXPORT_PUBLIC_BASE_URL is not set" in refusal
    assert Settings.from_env({}).service_refusal("serve") is None
    assert Settings.from_env({}).service_refusal("worker") is None


def test_quota_settings_are_parsed_with_their_units() -> None:
    """Sizes take binary units, the interval a duration; the running cap defaults to half
    the worker slots, at least 1, unless set."""
    settings = Settings.from_env(
        {
            "QEXPORT_WORKSPACE_QUOTA": "2GiB",
            "QEXPORT_SCHEDULE_MIN_INTERVAL": "15m",
            "QEXPORT_MAX_LINKS_PER_EXPORT": "3",
            "QEXPORT_DUCKDB_TEMP_LIMIT": "1GiB",
        }
    )
    assert settings.workspace_quota == 2 * 1024**3
    assert settings.schedule_min_interval == timedelta(minutes=15)
    assert (settings.max_links_per_export, settings.duckdb_temp_limit) == (3, "1GiB")
    assert Settings().running_cap(8) == 4
    assert Settings().running_cap(1) == 1
    assert Settings(worker_slots=10).running_cap(2) == 5
    assert Settings(max_running_per_user=3, worker_slots=10).running_cap(2) == 3
    with pytest.raises(ValueError, match="invalid QEXPORT_WORKSPACE_QUOTA '5 gigs'"):
        Settings.from_env({"QEXPORT_WORKSPACE_QUOTA": "5 gigs"})
    with pytest.raises(ValueError, match="QEXPORT_MAX_RUNNING_PER_USER must not be negative"):
        Settings.from_env({"QEXPORT_MAX_RUNNING_PER_USER": "-1"})


def test_the_workers_memory_limit_is_read_with_units_and_checked() -> None:
    """QEXPORT_WORKER_MAX_MEMORY defaults to 2 GiB and takes binary units (0: not watched); a
    value below what an idle worker takes, or one that leaves DuckDB's own memory limit less
    than half of it, is refused naming both settings."""
    assert Settings.from_env({}).worker_max_memory == 2 * 1024**3
    assert Settings.from_env({"QEXPORT_WORKER_MAX_MEMORY": "512MiB"}).worker_max_memory == (
        512 * 1024**2
    )
    assert Settings.from_env({"QEXPORT_WORKER_MAX_MEMORY": "0"}).worker_max_memory == 0
    with pytest.raises(ValueError, match="invalid QEXPORT_WORKER_MAX_MEMORY '2 gigs'"):
        Settings.from_env({"QEXPORT_WORKER_MAX_MEMORY": "2 gigs"})
    with pytest.raises(ValueError, match="QEXPORT_WORKER_MAX_MEMORY must be at least 256MiB"):
        Settings.from_env({"QEXPORT_WORKER_MAX_MEMORY": "100MiB"})
    with pytest.raises(
        ValueError,
        match=r"QEXPORT_DUCKDB_MEMORY_LIMIT \(1GB\) must be at most half of"
        r" QEXPORT_WORKER_MAX_MEMORY \(1 GiB\)",
    ):
        Settings.from_env(
            {"QEXPORT_WORKER_MAX_MEMORY": "1GiB", "QEXPORT_DUCKDB_MEMORY_LIMIT": "1GB"}
        )
    unwatched = {"QEXPORT_WORKER_MAX_MEMORY": "0", "QEXPORT_DUCKDB_MEMORY_LIMIT": "8GB"}
    assert Settings.from_env(unwatched).duckdb_memory_limit == "8GB"
