"""A source kind is chosen by its URL scheme through the `qexport.sources` entry points: the
built-in kinds register that way, and a separate package adds one the same way."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from qexport import bootstrap
from qexport.config import Settings
from qexport.domain.failures import InvalidRequestError
from qexport.services.source_urls import check_source_url
from qexport.sources import schemes
from qexport.sources.duckdb.source import DuckDBSource
from qexport.sources.generic.source import GenericSource
from qexport.sources.postgres.source import PostgresSource

PASSWORD = "s3cret-pw"  # noqa: S105 - a test value


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Path]:
    """An installed package `qexport-echo` declaring the scheme `echo` (and `broken`, whose
    module does not import), as pip would lay it out: a module and its dist-info."""
    (tmp_path / "qexport_echo.py").write_text(
        "class EchoSource:\n"
        "    def __init__(self, name, url):\n"
        "        self.name, self.url = name, url\n"
        "    def check_role(self):\n"
        "        return []\n"
        "def from_url(name, url, settings, *, allow_privileged_role=False):\n"
        "    return EchoSource(name, url)\n"
    )
    info = tmp_path / "qexport_echo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: qexport-echo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[qexport.sources]\necho = qexport_echo:from_url\nbroken = qexport_echo_missing:from_url\n"
    )
    sys.path.insert(0, str(tmp_path))
    schemes._installed.cache_clear()
    yield tmp_path
    sys.path.remove(str(tmp_path))
    sys.modules.pop("qexport_echo", None)
    schemes._installed.cache_clear()


def test_the_built_in_kinds_are_entry_points(tmp_path: Path) -> None:
    """duckdb, postgresql/postgres and sqlalchemy+<dialect> each build their own source."""
    settings = Settings()
    built = {
        "duckdb": bootstrap.source_from_url("a", f"duckdb:///{tmp_path}/a.duckdb", settings),
        "postgresql": bootstrap.source_from_url("b", "postgresql://u:pw@db/x", settings),
        "postgres": bootstrap.source_from_url("c", "postgres://u:pw@db/x", settings),
        "sqlalchemy": bootstrap.source_from_url(
            "d", f"sqlalchemy+sqlite:///{tmp_path}/d.db", settings
        ),
    }
    assert isinstance(built["duckdb"], DuckDBSource)
    assert isinstance(built["postgresql"], PostgresSource)
    assert isinstance(built["postgres"], PostgresSource)
    assert isinstance(built["sqlalchemy"], GenericSource)
    assert {"duckdb", "postgresql", "postgres", "sqlalchemy"} <= set(schemes.installed_schemes())


def test_a_plus_scheme_falls_back_to_its_head_and_a_bare_plus_names_nothing() -> None:
    assert schemes.kind_of("sqlalchemy+mssql+pyodbc") == "sqlalchemy"
    assert schemes.kind_of("sqlalchemy+oracle+cx_oracle") == "sqlalchemy"
    assert schemes.kind_of("sqlalchemy+") is None
    assert schemes.kind_of("nosuch+thing") is None
    oracle = "SQLAlchemy+Oracle+cx_oracle://u@h/db"
    assert schemes.scheme_of(oracle) == "sqlalchemy+oracle+cx_oracle"
    assert schemes.scheme_of("/just/a/path") is None


def test_an_unknown_scheme_names_the_installed_ones_never_the_url() -> None:
    with pytest.raises(ValueError, match="unsupported source URL scheme 'postgresq'") as caught:
        bootstrap.source_from_url("w", f"postgresq://reader:{PASSWORD}@db/sales", Settings())
    message = str(caught.value)
    assert PASSWORD not in message
    assert "; installed: " in message
    for scheme in ("duckdb", "postgresql", "sqlalchemy"):
        assert scheme in message
    with pytest.raises(ValueError, match="has no scheme"):
        bootstrap.source_from_url("w", "reader@db/sales", Settings())


def test_saving_a_source_with_an_unknown_scheme_is_refused_naming_the_installed_ones() -> None:
    with pytest.raises(InvalidRequestError, match=r"unsupported source URL scheme 'ftp'.*duckdb"):
        check_source_url(f"ftp://u:{PASSWORD}@host/x")


def test_a_separate_package_adds_a_kind_of_source(plugin: Path) -> None:
    """Installed beside qexport, its scheme is served and listed; nothing else changes."""
    source = bootstrap.source_from_url("feed", "echo://somewhere/x", Settings())
    assert type(source).__name__ == "EchoSource"
    assert source.name == "feed"
    assert "echo" in schemes.installed_schemes()
    check_source_url("echo://somewhere/x")  # a kind the installation has may be registered
    assert bootstrap.check_source_role("feed", "echo://somewhere/x", Settings(), False) == []


def test_a_kind_whose_package_does_not_import_names_the_package(plugin: Path) -> None:
    with pytest.raises(ValueError, match="'broken' source of 'qexport-echo' cannot be loaded"):
        bootstrap.source_from_url("feed", f"broken://u:{PASSWORD}@h", Settings())
