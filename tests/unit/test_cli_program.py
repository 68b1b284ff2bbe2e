"""`qexport` is one program whose commands load on use (tests/integration/test_cli_imports.py
checks, in fresh interpreters, that its help imports none of the adapters' libraries); each
command, loaded, is what the list says it is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog
import typer
from typer.testing import CliRunner

from qexport.cli import app
from qexport.cli.program import COMMANDS


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A command run here configures logging for the process (WARNING and up, as a client
    command does): put it back for the tests that run next in this process."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


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
