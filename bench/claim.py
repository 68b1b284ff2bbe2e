"""The claim itself: time per `claim_next` on a busy queue, on PostgreSQL and on SQLite.

    python bench/claim.py [--requesters 50] [--queued-each 20] [--claims 200]
                          [--max-running 4] [--backend postgresql --backend sqlite]

A fresh metadata database (a throwaway PostgreSQL database on the local server,
QEXPORT_BENCH_PG_URL or postgresql://postgres@127.0.0.1:5432/postgres, or a SQLite file)
gets `--requesters` x `--queued-each` queued exports (the default unsettled cap each) behind
5000 settled ones, then `--claims` consecutive claims, each left running, so the running set
and the requesters at their cap grow as it goes. Prints the median and p99 wall time of one
claim in ms. Run against an older checkout (PYTHONPATH=that/src) to compare: a store
without fair claiming is called without `max_running_per_user`.
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from qexport.domain.exports import Result
from qexport.ports import NewExport
from qexport.store.catalog import SqlCatalog
from qexport.store.engine import create_engine, migrate
from qexport.store.exports.queue import SqlExportQueue


class SqlMetadataStore(SqlExportQueue, SqlCatalog):
    """The export queue and the catalog over one engine, as the benchmark drives both."""


PG_URL = os.environ.get("QEXPORT_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SETTLED = 5000
START = datetime(2026, 1, 1, tzinfo=UTC)


def _new(workspace: str, user: str, at: datetime) -> NewExport:
    export_id = str(uuid.uuid4())
    return NewExport(
        id=export_id,
        workspace_id=workspace,
        requested_by=user,
        subject_type="query",
        subject_id="q1",
        subject_name="q",
        format="csv",
        parameters={},
        options={},
        filename="q.csv",
        storage_key=f"exports/{workspace}/{export_id}/q.csv",
        created_at=at,
    )


@contextmanager
def _database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="qexport-bench-claim-"))
        try:
            yield f"sqlite:///{folder / 'qexport.db'}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    name = f"bench_claim_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _fill(store: SqlMetadataStore, requesters: int, queued_each: int) -> datetime:
    """Settled history, then the queue with the requesters' exports interleaved by age."""
    at = START
    for i in range(SETTLED):
        record = store.insert_export(_new("ws", f"old-{i % 50}", at))
        claimed = store.claim_next(
            worker_id="b", now=at, lease_seconds=30, admit=lambda *_: None
        ).claimed
        assert claimed is not None
        assert claimed.lease_token is not None
        store.succeed(
            record.id,
            claimed.lease_token,
            now=at,
            result=Result(size_bytes=1, row_count=1, sha256="00" * 32),
            expires_at=at + timedelta(days=7),
        )
        at += timedelta(milliseconds=1)
    for _ in range(queued_each):
        for r in range(requesters):
            store.insert_export(_new(f"ws-{r % 5}", f"user-{r}", at))
            at += timedelta(milliseconds=1)
    return at


def measure(backend: str, args: argparse.Namespace) -> list[float]:
    with _database(backend) as url:
        engine = create_engine(url)
        migrate(engine)
        store = SqlMetadataStore(engine, notify=False)
        now = _fill(store, args.requesters, args.queued_each) + timedelta(seconds=1)
        fair = "max_running_per_user" in inspect.signature(store.claim_next).parameters
        extra: dict[str, Any] = {"max_running_per_user": args.max_running} if fair else {}
        timings = []
        for _ in range(args.claims):
            started = time.perf_counter()
            result = store.claim_next(
                worker_id="w",
                now=now,
                lease_seconds=600,
                admit=lambda *_: None,
                **extra,
            )
            timings.append((time.perf_counter() - started) * 1000)
            assert result.claimed is not None
        engine.dispose()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=["postgresql", "sqlite"])
    parser.add_argument("--requesters", type=int, default=50)
    parser.add_argument("--queued-each", type=int, default=20)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--max-running", type=int, default=4)
    args = parser.parse_args()
    for backend in args.backend or ["postgresql", "sqlite"]:
        timings = sorted(measure(backend, args))
        p99 = timings[min(len(timings) - 1, int(len(timings) * 0.99))]
        print(
            f"{backend:10} claim_next: median {statistics.median(timings):.2f} ms,"
            f" p99 {p99:.2f} ms over {len(timings)} claims"
        )


if __name__ == "__main__":
    main()
