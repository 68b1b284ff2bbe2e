"""The built-in `audit` source: a workspace's audit trail, queried like any other source.

An admin saves a query on it (`SELECT * FROM audit_events WHERE action = 'file.downloaded'`)
and exports or schedules it through the same lifecycle as any query. Isolation is by
construction rather than by a filter the statement could undo: each run copies only the
requester's workspace's events into a private DuckDB file of its own, and the statement runs
there through the DuckDB source (its sandbox and statement checks included); no other
workspace's event is ever in that file. Only the workspace's admins may run it, checked at
every run with their role as it is then (AccessLostError otherwise, `access_lost`).

A run reads the whole trail of the workspace into memory first (about 200 bytes an event);
a trail of millions of events would want a narrower copy, by the statement's time range.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from qexport.domain.accounts import Role
from qexport.domain.failures import AccessLostError
from qexport.domain.sensitivity import ReadsReported, ReadsReporting, Relation
from qexport.domain.sources import AUDIT_SOURCE
from qexport.ports import AccountStore, AuditLog, PreviewRows
from qexport.sources.duckdb.source import DuckDBSource, process_config

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.domain.queries import ResultColumn
    from qexport.domain.rule_check import Catalogue

TABLE = "audit_events"
_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("actor_kind", pa.string()),
        ("actor_id", pa.string()),
        ("action", pa.string()),
        ("target_kind", pa.string()),
        ("target_id", pa.string()),
        ("outcome", pa.string()),
        ("client_address", pa.string()),
        ("details", pa.string()),  # JSON text: json_extract(details, '$.bytes')
        ("prev_hash", pa.string()),
        ("hash", pa.string()),
    ]
)


class _Snapshot:
    """One run's private copy of a workspace's trail, removed when the run ends."""

    def __init__(self, folder: Path, source: DuckDBSource) -> None:
        self.folder = folder
        self.source = source

    def close(self) -> None:
        self.source.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class _ClosingStream:
    """The DuckDB result stream, removing the snapshot once it is closed."""

    def __init__(self, inner: Any, snapshot: _Snapshot) -> None:
        self._inner = inner
        self._snapshot = snapshot
        self.schema = inner.schema

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return iter(self._inner)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._snapshot.close()


class AuditSource:
    """A Source over the requester's workspace's audit trail (admins only)."""

    name = AUDIT_SOURCE
    native_copy = None  # a run's file is made for it: every format through qexport's writers
    # Its one table, as a DuckDB file names it: every statement is said to read all of it
    # (planning one would copy the whole trail first).
    reads_reporting = ReadsReporting(ReadsReported.TABLES, default_schema="main")

    def __init__(
        self,
        audit: AuditLog,
        accounts: AccountStore,
        *,
        scratch: Path | None = None,
        memory_limit: str = "256MB",
    ) -> None:
        self._audit = audit
        self._accounts = accounts
        self._scratch = scratch
        self._memory_limit = memory_limit

    def _snapshot(self, requester: Requester) -> _Snapshot:
        role = self._accounts.role_of(requester.workspace_id, requester.user_id)
        if role is not Role.ADMIN:
            raise AccessLostError("only a workspace's admins may read its audit trail")
        rows = [
            {
                "id": e.id,
                "at": e.at,
                "actor_kind": e.actor_kind,
                "actor_id": e.actor_id,
                "action": e.action,
                "target_kind": e.target_kind,
                "target_id": e.target_id,
                "outcome": e.outcome,
                "client_address": e.client_address,
                "details": e.details,
                "prev_hash": e.prev_hash,
                "hash": e.hash,
            }
            for e in self._audit.chain(requester.workspace_id)
        ]
        if self._scratch is not None:
            self._scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder = Path(tempfile.mkdtemp(prefix="audit-", dir=self._scratch))
        path = folder / "audit.duckdb"
        try:
            events = pa.Table.from_pylist(rows, schema=_SCHEMA)
            with duckdb.connect(str(path), config=process_config()) as con:
                con.register("events", events)
                con.execute(f"CREATE TABLE {TABLE} AS SELECT * FROM events ORDER BY id")
            source = DuckDBSource(AUDIT_SOURCE, path, memory_limit=self._memory_limit)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return _Snapshot(folder, source)

    def _run(self, requester: Requester, call: Callable[[DuckDBSource], Any]) -> Any:
        snapshot = self._snapshot(requester)
        try:
            return call(snapshot.source)
        finally:
            snapshot.close()

    def execute(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
        batch_rows: int | None = None,
    ) -> _ClosingStream:
        snapshot = self._snapshot(requester)
        try:
            inner = snapshot.source.execute(
                sql,
                parameters,
                requester,
                timeout_seconds=timeout_seconds,
                on_interrupt=on_interrupt,
                batch_rows=batch_rows,
            )
        except BaseException:
            snapshot.close()
            raise
        return _ClosingStream(inner, snapshot)

    def describe(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> list[ResultColumn]:
        found: list[ResultColumn] = self._run(
            requester,
            lambda s: s.describe(sql, parameters, requester, timeout_seconds=timeout_seconds),
        )
        return found

    def relations(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation]:
        """The trail's one table, whatever the statement: nothing else is in a run's file."""
        return frozenset({Relation("main", TABLE, None)})

    def check_role(self) -> list[str]:
        """Nothing to judge: the trail is read through qexport's own metadata database."""
        return []

    def catalogue(
        self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float
    ) -> Catalogue | None:
        """None: a run's file holds only a copy of the trail, no data another source reaches."""
        return None

    def preview(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        max_rows: int,
        max_cell_chars: int,
        max_bytes: int,
    ) -> PreviewRows:
        found: PreviewRows = self._run(
            requester,
            lambda s: s.preview(
                sql,
                parameters,
                requester,
                timeout_seconds=timeout_seconds,
                max_rows=max_rows,
                max_cell_chars=max_cell_chars,
                max_bytes=max_bytes,
            ),
        )
        return found
