"""The lifecycle state machine against the SQL store on SQLite."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings

from qexport.ports import MetadataStore
from qexport.store.engine import create_engine, migrate
from qexport.store.sql import SqlMetadataStore
from tests.lifecycle_machine import LifecycleMachine


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
