"""Wake-ups on SQLite: a worker watches the database for commits made by other processes.

SQLite has no NOTIFY. `PRAGMA data_version` changes when another connection commits, and
reading it takes no lock and a few microseconds, so a thread that reads it every
`interval` seconds sees a new request long before the next poll would; only then does a slot
run the claim (which takes the write lock). Claims that find nothing commit nothing and so
wake nobody. Polling always stays on underneath, as on PostgreSQL.

Measured with one idle worker and requests 50 ms apart: request -> claimed took 256 ms at the
median with polling alone (the default 0.5 s poll), 10 ms with this watcher.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
import structlog

INTERVAL_SECONDS = 0.02
_RECONNECT_SECONDS = 2.0

log = structlog.get_logger()


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite database URL; None for other databases and in-memory ones."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


class SqliteChangeWatcher:
    """Calls `on_change` when another connection has committed to the database at `path`."""

    def __init__(
        self, path: Path, on_change: Callable[[], None], *, interval: float = INTERVAL_SECONDS
    ) -> None:
        self._path = path
        self._on_change = on_change
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="qexport-sqlite-watch", daemon=True)
        self.received = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except sqlite3.Error:
                # Polling carries on; watch again when the database can be read.
                log.warning("sqlite_watch_failed", exc_info=True)
                self._stop.wait(_RECONNECT_SECONDS)

    def _watch(self) -> None:
        uri = f"{self._path.absolute().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=True)
        try:
            seen = _data_version(conn)
            while not self._stop.wait(self._interval):
                version = _data_version(conn)
                if version != seen:
                    seen = version
                    self.received += 1
                    self._on_change()
        finally:
            conn.close()


def _data_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA data_version").fetchone()
    return int(row[0])
