"""Wake-ups on PostgreSQL: NOTIFY when an export becomes claimable, LISTEN in the worker.

Polling always stays on underneath (a missed notification only costs one poll interval), and
QEXPORT_PG_NOTIFY=false turns this off for PgBouncer in transaction mode, where LISTEN does
not work.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from qexport.store.wakeup_thread import WakeupThread

CHANNEL = "qexport_exports"

_NOTIFY = sa.text("SELECT pg_notify(:channel, :id)")


def notify_claimable(conn: sa.Connection, export_id: str) -> None:
    """Inside the transaction that made the export claimable: delivered only on commit."""
    conn.execute(_NOTIFY, {"channel": CHANNEL, "id": export_id})


class PgListener(WakeupThread):
    """LISTENs on its own connection and calls `on_notify` for each notification."""

    failure_event = "listen_failed"

    def __init__(self, url: str, on_notify: Callable[[], None]) -> None:
        import psycopg  # here, not with the module: the stores on SQLite never load it

        super().__init__(on_notify, name="qexport-listen")
        # The database went away: polling carries on; listen again when it is back.
        self.errors = (psycopg.Error,)
        # psycopg wants a libpq URL, without SQLAlchemy's "+driver".
        self._url = sa.make_url(url).set(drivername="postgresql").render_as_string(False)

    def _watch(self) -> None:
        import psycopg

        with psycopg.connect(self._url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            while not self._stop.is_set():
                for _ in conn.notifies(timeout=0.5):
                    self._wake()
