"""The exports list's first page with each filter, over a big table, with and without the
list's indexes (migration 0013), on SQLite and PostgreSQL.

    python bench/exports_list.py [--exports 200000] [--backend sqlite --backend postgresql]

Fills a fresh metadata database with `--exports` settled exports in one workspace (20
requesters, 50 queries, five formats, a year of request times), then times the first page (50
items) of the list as an admin and as a member, with each filter the list offers, and a page
halfway down the list (a cursor), as the services run it (`list_export_page`). Prints the
median of 5 runs per case, then the same with the indexes of 0013 dropped and 0001's
ix_exports_requester back (the reference, measured in the same run).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from qexport.clock import SystemClock
from qexport.domain.exports import ExportFilter, Requester
from qexport.services.exports import ExportListing, list_export_page
from qexport.store.engine import create_engine, migrate
from qexport.store.exports.queue import SqlExportQueue
from qexport.store.tables.exports import exports

INDEXES = (
    "ix_exports_workspace_created",
    "ix_exports_requester_created",
    "ix_exports_subject_created",
    "ix_exports_status_created",
    "ix_exports_requester_status_created",
)
# 0013 drops it (ix_exports_requester_created serves all it did); the reference has it back.
SUPERSEDED = (
    "CREATE INDEX IF NOT EXISTS ix_exports_requester"
    " ON exports (workspace_id, requested_by, created_at)"
)
FORMATS = ("csv", "tsv", "jsonl", "parquet", "xlsx")
START = datetime(2026, 1, 1, tzinfo=UTC)


def fill(engine: sa.Engine, count: int) -> None:
    rows = []
    for n in range(count):
        export_id = str(uuid.uuid4())
        created = START + timedelta(seconds=n * 157)
        failed = n % 50 == 0
        rows.append(
            {
                "id": export_id,
                "workspace_id": "bench",
                "requested_by": f"user{n % 20}",
                "subject_type": "query",
                "subject_id": f"q{n % 50}",
                "subject_name": f"query number {n % 50}",
                "format": FORMATS[n % 5],
                "parameters": {"n": n},
                "options": {},
                "filename": "f.csv",
                "storage_key": f"exports/bench/{export_id}/f.csv",
                "status": "failed" if failed else "succeeded",
                "attempt": 1,
                "lease_token": None,
                "created_at": created,
                "started_at": created,
                "completed_at": created,
                "expires_at": None if failed else created + timedelta(days=7),
                "size_bytes": None if failed else 10,
                "row_count": None if failed else 1,
                "sha256": None if failed else "ab" * 32,
                "progress_rows": 0 if failed else 1,
                "failure_code": "internal" if failed else None,
                "failure_detail": "x" if failed else None,
            }
        )
        if len(rows) == 10_000:
            with engine.begin() as conn:
                conn.execute(exports.insert(), rows)
            rows = []
    if rows:
        with engine.begin() as conn:
            conn.execute(exports.insert(), rows)
    with engine.begin() as conn:
        conn.execute(sa.text("ANALYZE"))


def cases() -> dict[str, tuple[bool, ExportListing]]:
    """name -> (as admin, filters); a name ending in "deep" is read from halfway down."""
    mid = START + timedelta(days=180)
    return {
        "admin, no filter": (True, ExportListing()),
        "member, no filter": (False, ExportListing()),
        "admin, status failed": (True, ExportListing(status="failed")),
        "admin, format parquet": (True, ExportListing(narrow=ExportFilter(format="parquet"))),
        "admin, subject q7": (True, ExportListing(narrow=ExportFilter(subject_id="q7"))),
        "admin, one requester": (True, ExportListing(requested_by="user3")),
        "admin, a week": (
            True,
            ExportListing(narrow=ExportFilter(since=mid, until=mid + timedelta(days=7))),
        ),
        "admin, search 'number 4'": (True, ExportListing(narrow=ExportFilter(search="number 4"))),
        "member, status failed": (False, ExportListing(status="failed")),
        "member, status succeeded": (False, ExportListing(status="succeeded")),
        "admin, id prefix": (True, ExportListing(narrow=ExportFilter(id_prefix="abcd"))),
        "admin, no filter, deep": (True, ExportListing()),
        "member, no filter, deep": (False, ExportListing()),
    }


def timed(run: Callable[[], object], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def halfway(engine: sa.Engine) -> tuple[datetime, str]:
    """The (created_at, id) of the export halfway down the list: a deep page's cursor."""
    with engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(exports)).scalar_one()
        row = conn.execute(
            sa.select(exports.c.created_at, exports.c.id)
            .order_by(exports.c.created_at.desc(), exports.c.id.desc())
            .offset(total // 2)
            .limit(1)
        ).one()
    return row.created_at, row.id


def measure(engine: sa.Engine) -> dict[str, float]:
    queue = SqlExportQueue(engine, notify=False)
    clock = SystemClock()
    middle = halfway(engine)
    found = {}
    for name, (admin, listing) in cases().items():
        requester = Requester("user3", "bench")
        before = middle if name.endswith("deep") else None
        found[name] = timed(
            lambda a=admin, listing=listing, r=requester, b=before: list_export_page(
                queue, clock, r, listing, whole_workspace=a, limit=50, before=b
            )
        )
    return found


def run(url: str, count: int) -> None:
    engine = create_engine(url)
    migrate(engine)
    started = time.perf_counter()
    fill(engine, count)
    print(f"  filled {count:,} exports in {time.perf_counter() - started:.1f} s")
    with_indexes = measure(engine)
    with engine.begin() as conn:
        for name in INDEXES:
            conn.execute(sa.text(f"DROP INDEX IF EXISTS {name}"))
        conn.execute(sa.text(SUPERSEDED))
        conn.execute(sa.text("ANALYZE"))
    without = measure(engine)
    for name, ms in with_indexes.items():
        print(f"  {name:28} {ms:7.2f} ms   (without 0013's indexes {without[name]:7.2f} ms)")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exports", type=int, default=200_000)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    for backend in args.backend or ["sqlite", "postgresql"]:
        print(f"{backend}: first page of 50")
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.exports)
            continue
        database = f"qexport_bench_list_{uuid.uuid4().hex[:8]}"
        admin = sa.create_engine(args.pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {database}"))
        try:
            run(args.pg_url.rsplit("/", 1)[0] + f"/{database}", args.exports)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f"DROP DATABASE {database} WITH (FORCE)"))
            admin.dispose()


if __name__ == "__main__":
    main()
