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
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from qexport.store.wakeup_thread import WakeupThread

INTERVAL_SECONDS = 0.02


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite database URL; None for other databases and in-memory ones."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


class SqliteChangeWatcher(WakeupThread):
    """Calls `on_change` when another connection has committed to the database at `path`."""

    # Polling carries on; watch again when the database can be read.
    errors = (sqlite3.Error,)
    failure_event = "sqlite_watch_failed"

    def __init__(
        self, path: Path, on_change: Callable[[], None], *, interval: float = INTERVAL_SECONDS
    ) -> None:
        super().__init__(on_change, name="qexport-sqlite-watch")
        self._path = path
        self._interval = interval

    def _watch(self) -> None:
        uri = f"{self._path.absolute().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=True)
        try:
            seen = _data_version(conn)
            while not self._stop.wait(self._interval):
                version = _data_version(conn)
                if version != seen:
                    seen = version
                    self._wake()
        finally:
            conn.close()


def _data_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA data_version").fetchone()
    return int(row[0])
