"""A /metrics scrape's database reads over a big audit trail, against summing the trail at
each scrape; and what keeping the download totals adds to recording a download's event.

    python bench/metrics_scrape.py [--events 200000] [--backend sqlite --backend postgresql]

Fills a fresh metadata database with `--events` audit events in 20 workspaces (85% of them
downloads: whole files, ranges, 304s, refusals, public links, presigned URLs; the rest
requests and sign-ins), fills the totals as migration 0017 does, then prints the median of 5
scrapes (`read_stats`), of 5 sums of the download figures over audit_events (without an
index; and the counts alone, without the bytes, over a partial index), and of 200 recordings
of a download's event and of a sign-in's (which keeps no totals).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from qexport.domain.audit import Action, ActorKind, AuditEvent
from qexport.domain.audit_keys import AuditKeys
from qexport.store.audit.chain import add_to_download_totals, tally_downloads, use_keys
from qexport.store.audit.log import SqlAuditLog
from qexport.store.engine import create_engine, migrate
from qexport.store.stats import read_stats
from qexport.store.tables.audit import audit_events

START = datetime(2026, 1, 1, tzinfo=UTC)
DOWNLOADS = "action IN ('file.downloaded', 'file.presigned') AND outcome = 'ok'"
PARTIAL_INDEX = (
    f"CREATE INDEX ix_bench_downloads ON audit_events (workspace_id, actor_kind) WHERE {DOWNLOADS}"
)


def _event(rnd: random.Random, n: int) -> dict[str, object]:
    r = rnd.random()
    action, actor, outcome = "file.downloaded", "user", "ok"
    details: dict[str, object] = {"bytes": rnd.randrange(10**6), "filename": "f.csv", "status": 200}
    if r < 0.05:
        details.update(bytes=0, status=304)
    elif r < 0.10:
        details.update(bytes=100, range="bytes=0-99", status=206)
    elif r < 0.15:
        action, details = "file.presigned", {"filename": "f.csv", "status": 307}
    elif r < 0.20:
        outcome, actor, details = "refused", "public_link", {"bytes": 0, "status": 410}
    elif r < 0.30:
        actor = "public_link"
    elif r < 0.45:
        action, details = "export.requested", {"format": "csv", "parameters": ["since"]}
    elif r < 0.55:
        action, details = "sign_in", {"method": "password"}
    return {
        "at": START + timedelta(seconds=n * 10),
        "workspace_id": f"ws{rnd.randrange(20)}",
        "actor_kind": actor,
        "actor_id": f"u{n % 50}",
        "action": action,
        "target_kind": "export",
        "target_id": str(uuid.uuid4()),
        "outcome": outcome,
        "client_address": "10.0.0.1",
        "details": json.dumps(details, sort_keys=True, separators=(",", ":")),
        "prev_hash": "0" * 64,  # chains are not walked here
        "hash": "1" * 64,
        "seq": n + 1,  # unique in its chain, as the schema wants
    }


def fill(engine: sa.Engine, count: int) -> None:
    rnd = random.Random(1)
    for first in range(0, count, 20_000):
        rows = [_event(rnd, n) for n in range(first, min(count, first + 20_000))]
        with engine.begin() as conn:
            conn.execute(audit_events.insert(), rows)
    with engine.begin() as conn:
        for workspace_id, tally in tally_downloads(conn).items():
            add_to_download_totals(conn, workspace_id, tally)
        conn.execute(sa.text("ANALYZE"))


def _summed(engine: sa.Engine, with_bytes: bool) -> Callable[[], object]:
    postgresql = engine.dialect.name == "postgresql"
    sent = "(details::json ->> 'bytes')::bigint" if postgresql else "details ->> '$.bytes'"
    status = "(details::json ->> 'status')" if postgresql else "details ->> '$.status'"
    not_modified = "'304'" if postgresql else "304"  # ->> gives text there, a number here
    bytes_sum = f", sum({sent})" if with_bytes else ""
    not_304 = f" AND {status} <> {not_modified}" if with_bytes else ""
    sql = sa.text(
        f"SELECT workspace_id, count(*), count(CASE WHEN actor_kind = 'public_link' THEN 1 END)"
        f"{bytes_sum} FROM audit_events WHERE {DOWNLOADS}{not_304} GROUP BY workspace_id"
    )

    def run() -> object:
        with engine.connect() as conn:
            return conn.execute(sql).all()

    return run


def timed(run: Callable[[], object], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def recording(engine: sa.Engine, action: Action) -> float:
    audit = SqlAuditLog(engine)
    details = {"bytes": 1000, "filename": "f.csv", "status": 200}
    event = AuditEvent(None, "ws1", ActorKind.USER, "u1", action, "export", "e1", details=details)
    return timed(lambda: audit.record(event), repeat=200)


def run(url: str, count: int) -> None:
    engine = create_engine(url)
    migrate(engine)
    use_keys(engine, AuditKeys.from_secrets("bench-secret"))
    started = time.perf_counter()
    fill(engine, count)
    print(f"  filled {count:,} events and their totals in {time.perf_counter() - started:.1f} s")
    now = START + timedelta(days=400)
    print(
        f"  scrape (read_stats)                   {timed(lambda: read_stats(engine, now)):8.2f} ms"
    )
    print(f"  summed from audit_events, no index    {timed(_summed(engine, True)):8.2f} ms")
    with engine.begin() as conn:
        conn.execute(sa.text(PARTIAL_INDEX))
        conn.execute(sa.text("ANALYZE"))
    print(f"  counts alone, partial index           {timed(_summed(engine, False)):8.2f} ms")
    download = recording(engine, Action.FILE_DOWNLOADED)
    sign_in = recording(engine, Action.SIGN_IN)
    print(f"  record a download's event (totals)    {download:8.2f} ms")
    print(f"  record a sign-in's event (no totals)  {sign_in:8.2f} ms")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    for backend in args.backend or ["sqlite", "postgresql"]:
        print(f"{backend}: {args.events:,} audit events")
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.events)
            continue
        database = f"qexport_bench_metrics_{uuid.uuid4().hex[:8]}"
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
