"""A newcomer's first commands, run as a person runs them: in a folder, with no QEXPORT_*
variables. The data directory is found like git finds its folder and made only by `init` and
`demo`; the CLI acts as the account they made, whoever is added later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def _qexport(
    cwd: Path, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("QEXPORT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "qexport", *args],
        cwd=cwd,
        env=environ,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"qexport {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def _json(cwd: Path, *args: str) -> Any:
    return json.loads(_qexport(cwd, *args, "--json").stdout)


def test_a_command_with_no_data_directory_refuses_and_makes_none(tmp_path: Path) -> None:
    """`exports download` in a folder with no qexport-data here or above says how to make one
    (exit 2) and leaves the folder as it was; `--version` says none was found."""
    proc = _qexport(tmp_path, "exports", "download", "0123abcd", check=False)
    assert proc.returncode == 2
    assert "no qexport-data folder in" in proc.stderr
    assert "qexport init --email EMAIL" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    version = _qexport(tmp_path, "--version").stdout
    assert "data directory: none here or above" in version
    assert list(tmp_path.iterdir()) == []


def test_init_makes_the_first_admin_whom_the_cli_acts_as_from_any_subfolder(
    tmp_path: Path,
) -> None:
    """`init` makes the data directory and an admin, printing the password once; from a
    folder below, `--version` names both and the admin's commands work; adding people never
    changes who the CLI acts as; `--as` acts as another member for one command; a second
    `init` is refused."""
    made = _qexport(tmp_path, "init", "--email", "Ana@Example.com", "--workspace", "team")
    assert "ana@example.com is admin of 'team'; password: " in made.stdout
    below = tmp_path / "reports" / "2026"
    below.mkdir(parents=True)
    version = _qexport(below, "--version").stdout
    assert f"data directory: {(tmp_path / 'qexport-data').resolve()}" in version
    assert "acts as: ana@example.com in workspace 'team'" in version

    _qexport(below, "users", "create", "vic@example.com", "--workspace", "team", "--role", "viewer")
    created = _qexport(
        below, "users", "create", "ed@example.com", "--workspace", "team", "--role", "editor"
    )
    assert "has no password yet" in created.stderr
    assert "qexport users set-password ed@example.com --password-stdin" in created.stderr

    sql = "SELECT 1 AS one"
    _qexport(below, "queries", "add", "one", "--sql", sql, "--source", "audit")  # still the admin
    refused = _qexport(
        below,
        "--as",
        "vic@example.com",
        "queries",
        "add",
        "two",
        "--sql",
        sql,
        "--source",
        "audit",
        check=False,
    )
    assert refused.returncode != 0
    assert [q["name"] for q in _json(below, "queries", "list")] == ["one"]
    # The audit trail's source is for admins: the editor does not see it.
    as_editor = _qexport(
        below,
        "--as",
        "ed@example.com",
        "queries",
        "add",
        "two",
        "--sql",
        sql,
        "--source",
        "audit",
        check=False,
    )
    assert as_editor.returncode == 2
    assert "unknown source 'audit'" in as_editor.stderr
    assert [q["name"] for q in _json(below, "queries", "list")] == ["one"]
    unknown = _qexport(below, "--as", "nobody@example.com", "exports", "list", check=False)
    assert unknown.returncode == 2
    assert "--as nobody@example.com: no user 'nobody@example.com'" in unknown.stderr

    again = _qexport(below, "init", "--email", "other@example.com", check=False)
    assert again.returncode == 2
    assert "is set up already: the command line acts as ana@example.com" in again.stderr


def test_init_takes_a_password_on_stdin_and_never_prints_it(tmp_path: Path) -> None:
    made = _qexport(
        tmp_path, "init", "--email", "ana@example.com", "--password-stdin", stdin="s3cret-Pass\n"
    )
    assert "s3cret-Pass" not in made.stdout + made.stderr
    assert "with the password given" in made.stdout


@pytest.mark.slow
def test_the_demo_keeps_working_after_people_are_added(tmp_path: Path) -> None:
    """The README's order: the demo, then a new user in its workspace, then the CLI and the
    demo again: the CLI still acts as the demo's admin, and every export of the second run
    succeeds (each used to fail access_lost, the CLI's user no longer a member)."""
    first = _qexport(tmp_path, "demo", "--rows", "2000", timeout=300)
    assert "Admin account: demo@example.com, password " in first.stdout
    assert "[green]" not in first.stdout
    assert "sign in as demo@example.com" in first.stdout
    _qexport(
        tmp_path, "users", "create", "ana@example.com", "--workspace", "demo", "--role", "editor"
    )
    listed = _json(tmp_path, "exports", "list")["items"]
    assert listed
    assert {item["status"] for item in listed} == {"succeeded"}
    second = _qexport(tmp_path, "demo", "--rows", "2000", timeout=300)
    assert "Try next" in second.stdout
    assert "Admin account" not in second.stdout  # the password is shown once
    items = _json(tmp_path, "exports", "list")["items"]
    assert len(items) == 18
    assert {item["status"] for item in items} == {"succeeded"}
