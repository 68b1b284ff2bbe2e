"""A DuckDB result read as Arrow record batches, under a statement timeout."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pyarrow as pa

from qexport.domain.failures import QExportError
from qexport.sources.deadline import Deadline
from qexport.sources.duckdb.errors import translate_error
from qexport.sources.withheld import PathShown

# Errors the Arrow reader raises while DuckDB produces the rows (DuckDB's message inside).
_READ_ERRORS = (OSError, pa.ArrowException, duckdb.Error)


class DuckDBDeadline(Deadline):
    """A DuckDB statement's deadline, which also makes its errors: named after its source in
    the log, and naming to members only the paths `shown` (a lake's files)."""

    def __init__(
        self,
        seconds: float,
        interrupt: Callable[[], None],
        *,
        source: str = "",
        shown: PathShown | None = None,
    ) -> None:
        super().__init__(seconds, functools.partial(_quietly, interrupt))
        self.source = source  # the source's name, for the log of an error's full words
        self.shown = shown  # the paths an error may name to members (a lake's files)

    def error_for(self, exc: BaseException, sql: str = "") -> QExportError:
        return translate_error(
            exc,
            timed_out=self.expired,
            timeout_seconds=self.seconds,
            sql=sql,
            source=self.source,
            shown=self.shown,
        )


def _quietly(interrupt: Callable[[], None]) -> None:
    """Interrupt a statement that may just have ended (DuckDB then raises)."""
    with contextlib.suppress(duckdb.Error):
        interrupt()


class DuckDBResultStream:
    """The batches of one running statement on its own cursor; read once, then closed."""

    def __init__(
        self,
        reader: Any,
        cursor: duckdb.DuckDBPyConnection,
        deadline: DuckDBDeadline,
        *,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.schema: pa.Schema = reader.schema
        self._reader = reader
        self._cursor = cursor
        self._deadline = deadline
        self._on_close = on_close
        self._closed = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._closed:
            raise QExportError("the result stream was already closed")
        while True:
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:
                self.close()
                return
            except _READ_ERRORS as exc:
                error = self._deadline.error_for(exc)
                self.close()
                raise error from exc
            yield batch

    def close(self) -> None:
        """Stop the clock and release the cursor; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._deadline.cancel()
        with contextlib.suppress(*_READ_ERRORS):
            self._reader.close()
        with contextlib.suppress(duckdb.Error):
            self._cursor.close()
        if self._on_close is not None:
            self._on_close()
