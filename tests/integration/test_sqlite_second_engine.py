"""A process that opens a second engine on a SQLite database it already uses loses nothing.

SQLite's locks are POSIX locks, which a process drops on a file when it closes ANY descriptor
of that file. If building an engine opened and closed the database file, another process
could then take the database for unused, checkpoint it and delete the WAL this process still
writes into: its later commits would vanish for everyone else.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from qexport.store.engine import create_engine

COUNT_ROWS = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1])
print(connection.execute("SELECT count(*) FROM t").fetchone()[0])
connection.close()
"""


def _rows_seen_by_another_process(path: Path) -> int:
    out = subprocess.run(
        [sys.executable, "-c", COUNT_ROWS, str(path)], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_commits_after_a_second_engine_reach_other_processes(tmp_path: Path) -> None:
    """Every row this process commits is read by another process, also after this process
    built a second engine on the same database (as a worker, a CLI command or a benchmark
    does) and another process opened and closed the database in between."""
    path = tmp_path / "qexport.db"
    first = create_engine(f"sqlite:///{path}")
    with first.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (n INTEGER)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1)")
    create_engine(f"sqlite:///{path}")  # a second engine in the same process
    assert _rows_seen_by_another_process(path) == 1
    with first.begin() as conn:
        conn.exec_driver_sql("INSERT INTO t VALUES (2)")
    assert _rows_seen_by_another_process(path) == 2
    first.dispose()


def test_a_new_database_file_is_created_private(tmp_path: Path) -> None:
    """The database file an engine creates is readable by its owner only."""
    path = tmp_path / "fresh" / "qexport.db"
    engine = create_engine(f"sqlite:///{path}")
    assert path.stat().st_mode & 0o777 == 0o600
    engine.dispose()
