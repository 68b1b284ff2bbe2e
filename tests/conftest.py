"""Shared fixtures: metadata store backends for the contract suite, a frozen clock."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from qexport.store.engine import create_engine, migrate
from tests.fakes import FrozenClock, InMemoryMetadataStore
from tests.pg import pg_template, pg_url, postgresql_store
from tests.stores import MetadataStore, SqlMetadataStore

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
