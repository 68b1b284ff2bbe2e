"""A PostgreSQL result read as Arrow record batches while `COPY (...) TO STDOUT` runs.

One COPY is one statement, so the statement timeout covers running and reading alike, and the
rows stream without a round trip per batch. Each batch holds about `batch_bytes` of the
result's csv text (one row more at most), so memory stays flat however many rows there are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import pyarrow as pa

from qexport.domain.failures import QExportError
from qexport.sources.postgres.arrow import CsvBatches
from qexport.sources.postgres.copy import CopyOut
from qexport.sources.postgres.session import Session


class PostgresResultStream:
    """The batches of one running COPY on its own session; read once, then closed."""

    def __init__(
        self,
        session: Session,
        parser: CsvBatches,
        exits: contextlib.ExitStack,
        *,
        batch_bytes: int,
    ) -> None:
        self.schema: pa.Schema = parser.schema
        self._session = session
        self._parser = parser
        self._exits = exits
        self._batch_bytes = batch_bytes
        self._closed = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._closed:
            raise QExportError("the result stream was already closed")
        try:
            for chunk, _rows in CopyOut(self._session.conn).chunks(self._batch_bytes):
                yield from self._parser.parse(chunk)
        except psycopg.Error as exc:
            error = self._session.error_for(exc)
            self.close()
            raise error from exc
        self.close()

    def close(self) -> None:
        """Stop the statement if it still runs and close the session; safe to call again."""
        if self._closed:
            return
        self._closed = True
        try:
            self._session.close()
        finally:
            with contextlib.suppress(psycopg.Error):
                self._exits.close()
