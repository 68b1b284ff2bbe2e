"""A file download's time to first byte, with and without its audit event, in the same run.

    python bench/download_ttfb.py [--requests 400] [--backend sqlite --backend postgresql]

One installation per backend (a fresh SQLite data dir, or a throwaway PostgreSQL database on
QEXPORT_BENCH_PG_URL or postgresql://postgres@127.0.0.1:5432/postgres), one succeeded csv
export, and two servers over it (uvicorn, in this process): the anchor, whose audit log
records nothing, and qexport as it ships, which records every download (once its first
chunk has gone out: http/download.py says why). Requests alternate between the two on
kept-alive connections, so that both see the same machine; TTFB is from sending the request
to reading the first byte of the body.

Prints p50 and p90 of each and the p50 difference (the issue's budget: at most 1 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import secrets
import shutil
import socket
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import psycopg
import sqlalchemy as sa
import uvicorn

from qexport import bootstrap
from qexport.app import create_app
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.accounts import Role, new_api_token
from qexport.domain.audit import AuditEvent, AuditFilter, RecordedEvent
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.sources.demo_data import build_demo_database
from qexport.worker.loop import Worker

PG_URL = os.environ.get("QEXPORT_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


class NoAudit:
    """The anchor's audit log: records nothing."""

    failures = 0

    def record(self, event: AuditEvent) -> bool:
        return True

    def list_events(self, **_: object) -> list[RecordedEvent]:
        return []

    def chains(self) -> list[str]:
        return []

    def anchor(self, workspace_id: str) -> str:
        return "0" * 64

    def chain(self, workspace_id: str) -> Iterator[RecordedEvent]:
        return iter(())

    def prune(self, *, before: datetime, event: AuditEvent) -> dict[str, int]:
        return {}


@contextlib.contextmanager
def database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        yield ""
        return
    name = f"qexport_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield sa.make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(container: Container) -> Iterator[int]:
    port = _free_port()
    config = uvicorn.Config(create_app(container), port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join()


def ttfb(conn: http.client.HTTPConnection, path: str, token: str) -> float:
    start = time.perf_counter()
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    response.read(1)
    first = time.perf_counter() - start
    response.read()
    assert response.status == 200, response.status
    return first * 1000


def measure(backend: str, requests: int) -> str:
    root = Path(tempfile.mkdtemp(prefix="qexport-bench-ttfb-"))
    try:
        demo = build_demo_database(root / "shop.duckdb", orders=1_000).path
        with database(backend) as url:
            settings = Settings(
                data_dir=root / "data",
                database_url=url,
                secret_key=secrets.token_hex(32),  # required on PostgreSQL, as in production
                sources={"shop": f"duckdb://{demo}"},
                source_workspaces={"shop": frozenset({"acme"})},
            )
            container = bootstrap.build(settings)
            now = container.clock.now()
            container.accounts.ensure_workspace("acme", now=now)
            user = container.accounts.create_user("ann@acme.test", password_hash=None, now=now)
            container.accounts.set_role("acme", user.id, Role.ADMIN)
            token_id, token, secret_hash = new_api_token()
            container.accounts.add_token(
                token_id=token_id,
                user_id=user.id,
                workspace_id="acme",
                secret_hash=secret_hash,
                now=now,
            )
            container.catalog.add_query(
                Query("q1", "acme", "orders", "SELECT * FROM orders LIMIT 100", "shop")
            )
            record = record_request(
                container.exports,
                container.catalog,
                container.clock,
                Requester(user.id, "acme"),
                RequestExport(SubjectRef("query", "q1", by_name=True), "csv"),
            )
            Worker(container, drain=True).run()
            path = f"/api/v1/exports/{record.id}/file"
            anchor = replace(container, audit=NoAudit())
            times: dict[str, list[float]] = {"anchor": [], "qexport": []}
            with serving(anchor) as anchor_port, serving(container) as port:
                conns = {
                    "anchor": http.client.HTTPConnection("127.0.0.1", anchor_port),
                    "qexport": http.client.HTTPConnection("127.0.0.1", port),
                }
                for _ in range(20):  # warm both
                    for conn in conns.values():
                        ttfb(conn, path, token)
                for i in range(requests):
                    order = ("anchor", "qexport") if i % 2 == 0 else ("qexport", "anchor")
                    for name in order:
                        times[name].append(ttfb(conns[name], path, token))
                for conn in conns.values():
                    conn.close()
            recorded = container.audit.list_events(
                workspace_id="acme", narrow=AuditFilter(action="file.downloaded"), limit=10_000
            )
            assert len(recorded) == requests + 20, len(recorded)
            container.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def q(values: list[float], at: float) -> float:
        return statistics.quantiles(values, n=100)[int(at) - 1]

    a50, b50 = statistics.median(times["anchor"]), statistics.median(times["qexport"])
    return (
        f"{backend:10} TTFB p50 anchor {a50:.2f} ms, qexport {b50:.2f} ms"
        f" ({b50 - a50:+.2f} ms, budget +1 ms); p90 anchor {q(times['anchor'], 90):.2f} ms,"
        f" qexport {q(times['qexport'], 90):.2f} ms; ratio {b50 / a50:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    for backend in args.backend or ["sqlite", "postgresql"]:
        print(measure(backend, args.requests), flush=True)


if __name__ == "__main__":
    main()
