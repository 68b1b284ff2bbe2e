"""`qexport` is one program whose commands load on use: its help and its global options import
none of the adapters' libraries, and each command, loaded, is what the list says it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
import typer
from typer.testing import CliRunner

from qexport.cli import app
from qexport.cli.program import COMMANDS

# What a client command has no use for until it reaches the adapters.
HEAVY = ("pyarrow", "sqlalchemy", "boto3", "psycopg", "duckdb", "alembic", "pandas", "fastapi")


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A command run here configures logging for the process (WARNING and up, as a client
    command does): put it back for the tests that run next in this process."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


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


def test_the_help_lists_every_command_by_its_summary() -> None:
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0
    text = " ".join(shown.stdout.replace("│", " ").split())
    for name, _, summary in COMMANDS:
        assert f"{name} {summary}" in text


@pytest.mark.parametrize(("name", "summary"), [(n, s) for n, _, s in COMMANDS])
def test_each_command_loads_and_its_help_starts_with_its_summary(name: str, summary: str) -> None:
    """The summary the list shows is where the command's own help starts: they cannot drift."""
    group = typer.main.get_command(app)
    with group.make_context("qexport", [name, "--help"], resilient_parsing=True) as ctx:
        command = group.get_command(ctx, name)  # type: ignore[attr-defined]
    assert command is not None
    assert command.name == name
    assert " ".join((command.help or "").split()).startswith(summary.rstrip("."))


def test_a_commands_own_help_lists_its_subcommands() -> None:
    shown = CliRunner().invoke(app, ["exports", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0
    for sub in ("create", "get", "list", "wait", "download", "cancel", "deliveries"):
        assert f" {sub} " in shown.stdout


def test_a_mistyped_command_is_named_with_the_nearest() -> None:
    shown = CliRunner().invoke(app, ["exprts"], env={"COLUMNS": "200"})
    assert shown.exit_code == 2
    assert "Did you mean 'exports'" in shown.output


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
