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
    settings = Settings(secret_key="s3cr3t", smtp_url="smtp://user:pw@mail")  # noqa: S106 - a fake
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
