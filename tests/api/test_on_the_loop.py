"""The routes that run on the event loop (qexport.http.one_hop.on_the_loop) block it only with
OneReads, one statement each: no SQLAlchemy Connection is opened on the loop while they
answer, on either database; what must write (a token's last use, a download's event) does so
on the thread pool."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

import qexport.api
from qexport.store.exports import SqlExportQueue
from tests.api.conftest import Api

ADA = "ada@acme.test"


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextmanager
def _connections_on_the_loop(engine: sa.Engine) -> Iterator[list[str]]:
    """The SQLAlchemy Connections opened on an event loop meanwhile (by the SQL they ran)."""
    seen: list[str] = []

    def _record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if _on_a_loop():
            seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", _record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", _record)


def _marked() -> set[str]:
    """module.function of every endpoint marked on_the_loop in qexport.api."""
    found = set()
    for module in pkgutil.iter_modules(qexport.api.__path__):
        loaded = importlib.import_module(f"qexport.api.{module.name}")
        for name, value in vars(loaded).items():
            if callable(value) and getattr(value, "_on_the_loop", None) is not None:
                found.add(f"{module.name}.{name}")
    return found


def test_routes_on_the_loop_read_only_with_one_statement_reads(api_both: Api) -> None:
    api = api_both
    api.member(ADA, "admin")
    query = api.add_query("orders")
    created = api.post("/api/v1/exports", ADA, json={"query_id": query.id, "format": "csv"})
    assert created.status_code == 202
    export_id = created.json()["id"]
    api.drain()
    assert api.get("/api/v1/queries", ADA).status_code == 200  # the token's first use, written
    requests = {
        "exports.list_exports": "/api/v1/exports?limit=5",
        "exports.get_export": f"/api/v1/exports/{export_id}",
        "exports.list_events": f"/api/v1/exports/{export_id}/events",
        "exports.get_export_file": f"/api/v1/exports/{export_id}/file",
        "queries.list_queries": "/api/v1/queries",
        "queries.read_query": f"/api/v1/queries/{query.id}",
    }
    assert _marked() == set(requests)  # every route on the loop is tried here
    assert isinstance(api.deps.exports, SqlExportQueue)
    with _connections_on_the_loop(api.deps.exports.engine) as opened:
        answers = {path: api.get(url, ADA).status_code for path, url in requests.items()}
        ranged = {**api.headers(ADA), "Range": "bytes=0-9"}
        file = api.client.get(requests["exports.get_export_file"], headers=ranged)
    assert set(answers.values()) == {200}
    assert file.status_code == 206
    assert opened == []
    events = api.get("/api/v1/audit?action=file.downloaded", ADA).json()["items"]
    assert len(events) == 2  # written meanwhile, on the thread pool
