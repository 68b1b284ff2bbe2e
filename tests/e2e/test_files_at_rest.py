"""Files at rest are readable by the service's user only, whatever the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import duckdb

UMASK_022 = ["sh", "-c", 'umask 022 && exec "$0" "$@"', sys.executable, "-m", "qexport"]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_under_umask_022_the_data_dir_database_and_exports_are_private(tmp_path: Path) -> None:
    """With umask 022, the CLI creating a data directory, saving a query and a worker
    exporting it leave the data directory 0700, qexport.db (and its -wal/-shm) 0600, every
    directory of the object store 0700 and the stored file and its metadata 0600."""
    source = tmp_path / "shop.duckdb"
    with duckdb.connect(str(source)) as con:
        con.execute("CREATE TABLE orders AS SELECT i AS id FROM range(10) t(i)")
    data = tmp_path / "nested" / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QEXPORT_")}
    env.update(
        {
            "QEXPORT_DATA_DIR": str(data),
            "QEXPORT_SOURCE_SHOP": f"duckdb://{source}",
            "QEXPORT_SOURCE_SHOP_WORKSPACES": "*",
        }
    )

    def run(*args: str) -> str:
        done = subprocess.run(
            [*UMASK_022, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run("queries", "add", "ids", "--sql", "SELECT id FROM orders", "--source", "shop")
    run("exports", "create", "--query", "ids", "--format", "csv", "--json")
    run("worker", "--drain")

    assert _mode(data) == 0o700
    assert _mode(data.parent) == 0o700  # created on the way, not left to the umask
    database = data / "qexport.db"
    assert _mode(database) == 0o600
    for companion in (data / "qexport.db-wal", data / "qexport.db-shm"):
        if companion.exists():
            assert _mode(companion) == 0o600
    assert _mode(data / "qexport.db-writer") == 0o600  # the writers' turns (the worker wrote)
    objects = data / "objects"
    stored = [p for p in objects.rglob("*") if p.is_file() and "exports" in p.parts]
    assert len(stored) == 1
    assert stored[0].read_text().startswith("id")
    for path in [objects, *objects.rglob("*")]:
        expected = 0o700 if path.is_dir() else 0o600
        assert _mode(path) == expected, f"{path.relative_to(data)}: {oct(_mode(path))}"
