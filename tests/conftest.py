"""Shared fixtures: metadata store backends for the contract suite, a frozen clock."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from qexport.store.engine import create_engine, migrate
from tests.fakes import FrozenClock, InMemoryMetadataStore
from tests.support.pg import pg_template, pg_url, postgresql_store
from tests.support.stores import MetadataStore, SqlMetadataStore

__all__ = ["pg_template", "pg_url", "postgresql_store"]  # fixtures for every test module

IN_CI = bool(os.environ.get("CI"))
STORE_BACKENDS = ["memory", "sqlite", "postgresql"]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite database, copied for each test (migrating once is faster)."""
    path = tmp_path_factory.mktemp("template") / "qexport.db"
    engine = create_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()  # the last connection to close checkpoints the WAL into the file
    return path


@pytest.fixture
def sqlite_store(sqlite_template: Path, tmp_path: Path) -> Iterator[SqlMetadataStore]:
    path = tmp_path / "qexport.db"
    shutil.copy(sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}")
    yield SqlMetadataStore(engine)
    engine.dispose()


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest) -> MetadataStore:
    """Every MetadataStore backend; the contract suite runs unchanged on each."""
    if request.param == "memory":
        return InMemoryMetadataStore()
    return request.getfixturevalue(f"{request.param}_store")  # type: ignore[no-any-return]


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


# What a test needs, marked from the fixtures it uses (through any chain) and the backend it
# is parametrized on, so that `-m "not spark and not browser"` selects by need. The markers
# are registered in pyproject.toml and pytest runs with --strict-markers.
NEEDS: dict[str, frozenset[str]] = {
    "postgres": frozenset({"pg_template"}),
    "mysql": frozenset({"mariadb_server"}),
    "spark": frozenset({"spark_server", "pyspark_installed"}),
    "s3": frozenset({"moto_endpoint"}),
    "browser": frozenset({"chromium"}),
}
E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in NEEDS.items():
            if used & fixtures:
                item.add_marker(marker)
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        if any(isinstance(p, str) and p == "postgresql" for p in params):
            item.add_marker("postgres")  # a backend fixture that asks for pg_url when run
        if item.path.is_relative_to(E2E):
            item.add_marker("e2e")
