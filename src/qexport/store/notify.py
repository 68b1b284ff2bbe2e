"""Wake-ups on PostgreSQL: NOTIFY when an export becomes claimable, LISTEN in the worker.

Polling always stays on underneath (a missed notification only costs one poll interval), and
QEXPORT_PG_NOTIFY=false turns this off for PgBouncer in transaction mode, where LISTEN does
not work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import sqlalchemy as sa
import structlog

CHANNEL = "qexport_exports"
_RECONNECT_SECONDS = 2.0

log = structlog.get_logger()


_NOTIFY = sa.text("SELECT pg_notify(:channel, :id)")


def notify_claimable(conn: sa.Connection, export_id: str) -> None:
    """Inside the transaction that made the export claimable: delivered only on commit."""
    conn.execute(_NOTIFY, {"channel": CHANNEL, "id": export_id})


class PgListener:
    """LISTENs on its own connection and calls `on_notify` for each notification."""

    def __init__(self, url: str, on_notify: Callable[[], None]) -> None:
        # psycopg wants a libpq URL, without SQLAlchemy's "+driver".
        self._url = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
        self._on_notify = on_notify
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="qexport-listen", daemon=True)
        self.received = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self.received += 1
                            self._on_notify()
            except psycopg.Error:
                # The database went away: polling carries on; listen again when it is back.
                log.warning("listen_failed", exc_info=True)
                self._stop.wait(_RECONNECT_SECONDS)
