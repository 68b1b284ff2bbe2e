"""A worker over real SQLite metadata and a real DuckDB source, for report export tests."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.accounts import Role
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.queries import Parameter, Query
from qexport.domain.reports import Display, Report, Section
from qexport.services.requests import record_request
from qexport.sources.duckdb.source import DuckDBSource
from qexport.storage.filesystem import FilesystemObjectStore
from qexport.store.accounts import SqlAccountStore
from qexport.worker.loop import Worker
from tests.fakes import FixedSources
from tests.support.containers import container_of
from tests.support.stores import SqlMetadataStore

WORKSPACE = "acme"
ALICE = Requester("alice", WORKSPACE)
BOB = Requester("bob", WORKSPACE)
SOURCE = "shop"
# The second customer's note is markup; the first has a formula and a non-Latin-1 name.
CUSTOMERS = ('=HYPERLINK("http://evil")', "<script>alert(1)</script>", "Zoë & Co ✓")


def build_shop(path: Path, rows: int = 120) -> None:
    """orders(id, customer, amount, day, paid, owner): owner alternates alice and bob."""
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE orders AS SELECT i AS id,"
        " ['=HYPERLINK(\"http://evil\")', '<script>alert(1)</script>', 'Zoë & Co ✓'][i % 3 + 1]"
        " AS customer, (i * 2.5)::DOUBLE AS amount, DATE '2025-01-01' + i::INTEGER AS day,"
        " i % 2 = 0 AS paid, CASE WHEN i % 2 = 0 THEN 'alice' ELSE 'bob' END AS owner"
        f" FROM range(1, {rows + 1}) t(i)"
    )
    con.close()


@dataclass
class ReportEnv:
    deps: Container
    store: SqlMetadataStore

    def add_query(self, name: str, sql: str, parameters: Sequence[Parameter] = ()) -> Query:
        return self.store.add_query(
            Query(str(uuid.uuid4()), WORKSPACE, name, sql, SOURCE, tuple(parameters))
        )

    def add_report(self, title: str, *sections: Section, description: str = "") -> Report:
        return self.store.add_report(
            Report(str(uuid.uuid4()), WORKSPACE, title, description, tuple(sections))
        )

    def request(
        self, report: Report, fmt: str, requester: Requester = ALICE, **params: Any
    ) -> ExportRecord:
        return record_request(
            self.store,
            self.store,
            self.deps.clock,
            requester,
            RequestExport(SubjectRef("report", report.id), fmt, parameters=params),
        )

    def run(self, record: ExportRecord) -> ExportRecord:
        """Run the worker until the export settles; the settled record."""
        worker = Worker(self.deps, worker_id="w")
        while worker.run_once():
            pass
        final = self.store.get_export(record.id)
        assert final is not None
        return final

    def file(self, record: ExportRecord) -> bytes:
        with self.deps.objects.open(record.storage_key) as fh:
            return fh.read()


def make_env(store: SqlMetadataStore, tmp_path: Path, *, rows: int = 120) -> ReportEnv:
    path = tmp_path / "shop.duckdb"
    build_shop(path, rows)
    accounts = SqlAccountStore(store.engine)
    now = dt.datetime.now(dt.UTC)
    accounts.ensure_workspace(WORKSPACE, now=now)
    for user_id in ("alice", "bob"):
        accounts.create_user(f"{user_id}@example.com", password_hash=None, now=now, user_id=user_id)
        accounts.set_role(WORKSPACE, user_id, Role.VIEWER)
    deps = container_of(
        store=store,
        objects=FilesystemObjectStore(tmp_path / "objects"),  # files not in traced memory
        sources=FixedSources({SOURCE: DuckDBSource(SOURCE, path)}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path, statement_timeout_seconds=30),
    )
    return ReportEnv(deps, store)


def section(heading: str, query: Query, display: Display = Display.TABLE, **kw: Any) -> Section:
    return Section(heading, query.id, display=display, **kw)
