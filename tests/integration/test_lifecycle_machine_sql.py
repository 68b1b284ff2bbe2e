"""The lifecycle state machine against the SQL store, on SQLite and PostgreSQL."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import psycopg
import sqlalchemy as sa
from hypothesis import HealthCheck, settings

from qexport.store.engine import create_engine, migrate
from tests.support import pg
from tests.support.lifecycle_machine import LifecycleMachine
from tests.support.stores import MetadataStore, SqlMetadataStore


class SqliteLifecycle(LifecycleMachine):
    def make_store(self) -> MetadataStore:
        self._tmp = tempfile.TemporaryDirectory()
        engine = create_engine(f"sqlite:///{Path(self._tmp.name) / 'q.db'}")
        migrate(engine)
        self._engine = engine
        return SqlMetadataStore(engine)

    def teardown(self) -> None:
        self._engine.dispose()
        self._tmp.cleanup()


SqliteLifecycle.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSqliteLifecycle = SqliteLifecycle.TestCase


class PostgresLifecycle(LifecycleMachine):
    """The same machine on PostgreSQL, each run in a database of its own."""

    def make_store(self) -> MetadataStore:
        url = pg.server_url()
        self._name = f"qexport_sm_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self._name}" TEMPLATE "{PostgresLifecycle.template}"')
        self._engine = create_engine(
            sa.make_url(url).set(database=self._name).render_as_string(False)
        )
        return SqlMetadataStore(self._engine)

    def teardown(self) -> None:
        self._engine.dispose()
        with psycopg.connect(pg.server_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self._name}" WITH (FORCE)')

    template = ""


PostgresLifecycle.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_lifecycle_machine_on_postgresql(pg_template: str) -> None:
    """Every step of the lifecycle model holds on PostgreSQL too."""
    PostgresLifecycle.template = pg_template
    PostgresLifecycle.TestCase().runTest()
