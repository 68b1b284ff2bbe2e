"""What the keyed audit chain costs: recording an event, a checkpoint pass, a verify walk.

    python bench/audit_chain.py [--events 100000] [--backend sqlite --backend postgresql]

Fills a fresh metadata database with `--events` keyed events in 20 workspaces (chained as the
store chains them), then prints the median of 200 recordings of a download's event (keyed
in the process, on PostgreSQL too), of 5 reads of every chain's head (a worker's
first checkpoint pass) and of 5 reads of the heads moved since the last 100 events (every
later pass), the time of a checkpoint of every chain to a folder, and how many events a
verify walk checks per second (`qexport audit verify`: the database read and the HMACs).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
import structlog

from qexport.clock import SystemClock
from qexport.domain.audit import GENESIS, Action, ActorKind, AuditEvent, linked, unchained
from qexport.domain.audit_keys import AuditKeys
from qexport.services.audit_checkpoints import Checkpointer
from qexport.services.audit_trail import verify
from qexport.storage.filesystem import FilesystemObjectStore
from qexport.store.audit.chain import use_keys
from qexport.store.audit.log import SqlAuditLog
from qexport.store.engine import create_engine, migrate
from qexport.store.tables.audit import audit_events

START = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = AuditKeys.from_secrets("bench-secret")
WORKSPACES = 20


def _event(n: int, workspace: str) -> AuditEvent:
    return AuditEvent(
        START + timedelta(seconds=n),
        workspace,
        ActorKind.USER,
        f"u{n % 50}",
        Action.FILE_DOWNLOADED,
        "export",
        str(uuid.uuid4()),
        client_address="10.0.0.1",
        details={"bytes": n * 7, "filename": "f.csv", "status": 200},
    )


def fill(engine: sa.Engine, count: int) -> None:
    heads = {f"ws{w}": (GENESIS, 0) for w in range(WORKSPACES)}
    for first in range(0, count, 20_000):
        rows = []
        for n in range(first, min(count, first + 20_000)):
            workspace = f"ws{n % WORKSPACES}"
            prev, seq = heads[workspace]
            row = linked(unchained(_event(n, workspace), START), prev, seq + 1, KEYS.current)
            rows.append(row)
            heads[workspace] = (row["hash"], seq + 1)
        with engine.begin() as conn:
            conn.execute(audit_events.insert(), rows)
    with engine.begin() as conn:
        conn.execute(sa.text("ANALYZE"))


def timed(run: Callable[[], object], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def run(url: str, count: int) -> None:
    engine = create_engine(url)
    migrate(engine)
    use_keys(engine, KEYS)
    started = time.perf_counter()
    fill(engine, count)
    print(f"  filled {count:,} keyed events in {time.perf_counter() - started:.1f} s")
    audit = SqlAuditLog(engine)
    event = _event(0, "ws1")
    print(
        f"  record a download's event             {timed(lambda: audit.record(event), 200):8.2f} ms"
    )
    print(f"  every chain's head (first pass)       {timed(audit.heads):8.2f} ms")
    last = count + 200 - 100
    moved = timed(lambda: audit.heads(after_id=last))
    print(f"  heads moved since 100 events ago      {moved:8.2f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        objects = FilesystemObjectStore(Path(tmp))
        checkpointer = Checkpointer(audit, objects, SystemClock(), timedelta(minutes=10))
        wrote = timed(lambda: checkpointer.run_once(force=True), 1)
        print(f"  checkpoint {WORKSPACES} chains to a folder        {wrote:8.2f} ms")
        started = time.perf_counter()
        reports = verify(audit, objects, checkpoint_every=timedelta(minutes=10))
        took = time.perf_counter() - started
    walked = sum(r.check.verified for r in reports)
    assert all(r.ok for r in reports), [r.finding or r.check.reason for r in reports]
    print(f"  verify: {walked:,} events in {took:.1f} s, {walked / took:,.0f} events/s")
    engine.dispose()


def main() -> None:
    # The checkpoints' log lines are not the figures.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    for backend in args.backend or ["sqlite", "postgresql"]:
        print(f"{backend}: {args.events:,} audit events")
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.events)
            continue
        database = f"qexport_bench_audit_{uuid.uuid4().hex[:8]}"
        admin = sa.create_engine(args.pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {database}"))
        try:
            run(args.pg_url.rsplit("/", 1)[0] + f"/{database}", args.events)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f"DROP DATABASE {database} WITH (FORCE)"))
            admin.dispose()


if __name__ == "__main__":
    main()
