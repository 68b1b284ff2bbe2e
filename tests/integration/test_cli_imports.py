"""`qexport` loads its commands on use, checked in fresh interpreters: importing the CLI and
its help load none of the adapters' libraries, and a client command at the newest schema loads
only what it uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# What a client command has no use for until it reaches the adapters.
HEAVY = ("pyarrow", "sqlalchemy", "boto3", "psycopg", "duckdb", "alembic", "pandas", "fastapi")


def _imported_after(code: str, env: dict[str, str] | None = None) -> list[str]:
    """The HEAVY modules a fresh interpreter has imported after running `code`."""
    probe = (
        "import json, sys\n"
        f"{code}\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_importing_the_cli_pulls_in_no_adapter_library() -> None:
    assert _imported_after("import qexport.cli") == []


def test_the_programs_help_pulls_in_no_adapter_library() -> None:
    """`qexport --help` lists every command without importing any of them."""
    code = (
        "import contextlib, io\n"
        "from qexport.cli import main\n"
        "sys.argv = ['qexport', '--help']\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()"
    )
    assert _imported_after(code) == []


def test_a_local_list_at_the_newest_schema_loads_only_what_it_uses(
    tmp_path: Path,
) -> None:
    """A client command on the embedded default, its database already at the newest schema,
    loads neither Alembic, PostgreSQL's driver, S3's client, DuckDB, Arrow nor pandas: it reads
    no source and writes no file."""
    env = {**os.environ, "QEXPORT_DATA_DIR": str(tmp_path)}
    for key in [k for k in env if k.startswith("QEXPORT_") and k != "QEXPORT_DATA_DIR"]:
        del env[key]
    upgrade = [sys.executable, "-m", "qexport", "db", "upgrade"]
    subprocess.run(upgrade, env=env, check=True, capture_output=True, timeout=120)
    code = (
        "import contextlib, io\n"
        "from qexport.cli import main\n"
        "sys.argv = ['qexport', 'exports', 'list']\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()"
    )
    loaded = _imported_after(code, env=env)
    assert "sqlalchemy" in loaded  # it did reach the database
    assert {"alembic", "psycopg", "boto3", "duckdb", "pyarrow", "pandas"}.isdisjoint(loaded)
