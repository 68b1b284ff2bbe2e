"""PostgreSQL for the tests: one migrated template database, a fresh copy per test.

The server comes from QEXPORT_TEST_DATABASE_URL, or the local one on 127.0.0.1:5432. Without
a reachable server the PostgreSQL tests skip, except under CI, where that fails the run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa

from qexport.store.engine import create_engine, migrate
from tests.support.stores import SqlMetadataStore

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def server_url() -> str:
    return os.environ.get("QEXPORT_TEST_DATABASE_URL") or DEFAULT_URL


def _admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url, autocommit=True, connect_timeout=3)


def _with_database(url: str, name: str) -> str:
    return sa.make_url(url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """The name of a migrated template database (dropped at the end of the session)."""
    url = server_url()
    try:
        admin = _admin(url)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs PostgreSQL at {url}: {exc}")
        pytest.skip(f"no PostgreSQL at {url}")
    name = f"qexport_template_{uuid.uuid4().hex[:8]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    engine = create_engine(_with_database(url, name))
    migrate(engine)
    engine.dispose()
    yield name
    with _admin(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """A fresh migrated database for one test."""
    url = server_url()
    name = f"qexport_test_{uuid.uuid4().hex[:12]}"
    with _admin(url) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    yield _with_database(url, name)
    with _admin(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgresql_store(pg_url: str) -> Iterator[SqlMetadataStore]:
    engine = create_engine(pg_url)
    yield SqlMetadataStore(engine)
    engine.dispose()
