"""A worker that has returned uses the database no more: its audit checkpoint pass ends
before `run` does, so closing the installation after a drain closes every connection it
opened, however slow that pass was (a loaded machine, a slow object store)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from qexport.services import audit_checkpoints
from tests.api.conftest import api_on
from tests.support.pg import server_url

VIEWER = "vera@acme.test"
SLOW_PASS_SECONDS = 1.0


def _open_connections(url: str) -> int:
    """Sessions on the test's database (`url`'s), from a connection to the server's own."""
    with psycopg.connect(server_url()) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (sa.make_url(url).database,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_drained_worker_leaves_no_connection_once_closed(
    tmp_path: Path, source_template: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's first checkpoint pass, made slower than the export it ran beside, has
    ended when the drain returns; once the installation is closed, the database has no
    session of it left (before, the pass went on, opened a connection in the closed
    engine's new pool and never closed it)."""
    passes_done = threading.Event()
    run_once = audit_checkpoints.Checkpointer.run_once

    def slow_pass(self: audit_checkpoints.Checkpointer, **kwargs: Any) -> Any:
        time.sleep(SLOW_PASS_SECONDS)
        try:
            return run_once(self, **kwargs)
        finally:
            passes_done.set()

    monkeypatch.setattr(audit_checkpoints.Checkpointer, "run_once", slow_pass)
    with api_on(tmp_path, source_template, pg_url) as api:
        api.member(VIEWER, "viewer")
        api.add_query("orders")
        created = api.post(
            "/api/v1/exports", VIEWER, json={"query_id": "q-orders-acme", "format": "csv"}
        )
        assert created.status_code == 202, created.text
        assert api.drain() == {"succeeded": 1}
        assert passes_done.is_set()  # the pass ended before the drain returned
    assert passes_done.wait(timeout=30)
    assert _open_connections(pg_url) == 0
