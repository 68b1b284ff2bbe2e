"""A DuckDB result read as Arrow record batches, under a statement timeout."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pyarrow as pa

from qexport.domain.failures import QExportError
from qexport.sources.duckdb_errors import translate_error

# Errors the Arrow reader raises while DuckDB produces the rows (DuckDB's message inside).
_READ_ERRORS = (OSError, pa.ArrowException, duckdb.Error)


class Deadline:
    """Interrupts a running statement once `seconds` have passed, unless cancelled first.

    A non-positive or infinite number of seconds sets no deadline.
    """

    def __init__(self, seconds: float, interrupt: Callable[[], None]) -> None:
        self.validate(seconds)
        self.seconds = seconds
        self.expired = False
        self._interrupt = interrupt
        self._lock = threading.Lock()
        self._cancelled = False
        self._timer: threading.Timer | None = None
        if 0 < seconds < math.inf:
            self._timer = threading.Timer(seconds, self._expire)
            self._timer.daemon = True
            self._timer.start()

    @staticmethod
    def validate(seconds: float) -> None:
        if seconds < 0 or math.isnan(seconds):
            raise ValueError(f"timeout_seconds must be >= 0, got {seconds}")

    def _expire(self) -> None:
        # The lock keeps a late timer from interrupting a cursor that close() already released.
        with self._lock:
            if self._cancelled:
                return
            self.expired = True
            with contextlib.suppress(duckdb.Error):
                self._interrupt()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
        if self._timer is not None:
            self._timer.cancel()

    def error_for(self, exc: BaseException) -> QExportError:
        return translate_error(exc, timed_out=self.expired, timeout_seconds=self.seconds)


class DuckDBResultStream:
    """The batches of one running statement on its own cursor; read once, then closed."""

    def __init__(self, reader: Any, cursor: duckdb.DuckDBPyConnection, deadline: Deadline) -> None:
        self.schema: pa.Schema = reader.schema
        self._reader = reader
        self._cursor = cursor
        self._deadline = deadline
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
