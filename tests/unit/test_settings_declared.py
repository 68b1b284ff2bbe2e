"""Each setting is declared once, as a field of Settings: its variable, how the variable is
parsed, its lower bound and its CLI flag twin all follow from that declaration, and the
README's configuration table lists every one of them."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
import typer
from typer.testing import CliRunner

from qexport.cli import app
from qexport.cli.common import State
from qexport.config import Bound, Bytes, Setting, Settings, declared

README = Path(__file__).parents[2] / "README.md"
# A value for each declared type, as written in a variable and as read; then another.
SAMPLES: dict[Any, tuple[tuple[str, Any], tuple[str, Any]]] = {
    str: (("from-variable", "from-variable"), ("from-flag", "from-flag")),
    int: (("5", 5), ("7", 7)),
    float: (("1.5", 1.5), ("2.5", 2.5)),
    bool: (("off", False), ("yes", True)),
    Path: (("here", Path("here")), ("elsewhere", Path("elsewhere"))),
    timedelta: (("36h", timedelta(hours=36)), ("15m", timedelta(minutes=15))),
    Bytes: (("2KiB", 2048), ("3MiB", 3 * 1024**2)),
}
# Strings a setting checks beyond their type.
CHECKED = {
    "smtp_url": (("smtp://variable:25",) * 2, ("smtp://flag:25",) * 2),
    "trusted_proxies": (("10.0.0.5",) * 2, ("10.0.0.0/24",) * 2),
    # At least 256MiB (an idle worker's memory).
    "worker_max_memory": (("512MiB", 512 * 1024**2), ("1GiB", 1024**3)),
}
SCALARS = [s for s in declared() if not s.family]
TWINS = [s for s in declared() if s.flag_name]
# the CLI's own, not settings
CLIENT_OPTIONS = ["user", "workspace", "act_as", "url", "token", "version"]


def _samples(s: Setting) -> tuple[tuple[str, Any], tuple[str, Any]]:
    return CHECKED.get(s.name) or SAMPLES[s.type]


def _ids(settings: list[Setting]) -> list[str]:
    return [s.env for s in settings]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No QEXPORT_* variable of the machine running the tests, and logging as it was (the CLI
    sets its level)."""
    for name in [n for n in os.environ if n.startswith("QEXPORT_")]:
        monkeypatch.delenv(name)
    logging = structlog.get_config()
    yield monkeypatch
    structlog.configure(**logging)


def test_every_setting_has_a_variable_and_a_help() -> None:
    """Every field of Settings is a declared setting: QEXPORT_<FIELD> (or a source family's
    QEXPORT_SOURCE_<NAME>... pattern) and a line of help."""
    assert [s.name for s in declared()] == list(Settings.__dataclass_fields__)
    for s in declared():
        assert s.help.strip()
        if s.family:
            assert s.env.startswith("QEXPORT_SOURCE_<NAME>")
        else:
            assert s.env == f"QEXPORT_{s.name.upper()}"


@pytest.mark.parametrize("s", SCALARS, ids=_ids(SCALARS))
def test_every_variable_is_read_as_its_declared_type(s: Setting) -> None:
    """Each QEXPORT_* variable reaches its setting, parsed by its declared type (durations,
    sizes with binary units, switches, numbers, paths); an empty one keeps the default."""
    (raw, value), _ = _samples(s)
    assert getattr(Settings.from_env({s.env: raw}), s.name) == value
    assert getattr(Settings.from_env({s.env: ""}), s.name) == getattr(Settings(), s.name)


TYPED = [s for s in SCALARS if s.type not in (str, Path)]


@pytest.mark.parametrize("s", TYPED, ids=_ids(TYPED))
def test_a_value_of_the_wrong_type_names_the_variable(s: Setting) -> None:
    """A value its type cannot read stops start-up naming the variable and the value."""
    with pytest.raises(ValueError, match=f"^invalid {s.env} 'lots': "):
        Settings.from_env({s.env: "lots"})


BOUNDED = [s for s in declared() if s.bound]


@pytest.mark.parametrize("s", BOUNDED, ids=_ids(BOUNDED))
def test_bounds_are_checked_by_name(s: Setting) -> None:
    """A value below its setting's bound, from a variable or not, is refused naming the
    variable and the bound."""
    assert s.bound is not None
    low = -1 if s.bound is Bound.NOT_NEGATIVE else 0
    with pytest.raises(ValueError, match=f"^{s.env} {s.bound.value}$"):
        Settings(**{s.name: low})


def test_the_source_families_read_one_variable_per_source() -> None:
    """QEXPORT_SOURCE_<NAME>, its _WORKSPACES and its _ALLOW_PRIVILEGED_ROLE each reach their
    setting under the source's name in lower case."""
    settings = Settings.from_env(
        {
            "QEXPORT_SOURCE_SALES": "duckdb:///srv/sales.duckdb",
            "QEXPORT_SOURCE_SALES_WORKSPACES": "north, south",
            "QEXPORT_SOURCE_SALES_ALLOW_PRIVILEGED_ROLE": "true",
            "QEXPORT_SOURCE_HR_ALLOW_PRIVILEGED_ROLE": "false",
        }
    )
    assert settings.sources == {"sales": "duckdb:///srv/sales.duckdb"}
    assert settings.source_workspaces == {"sales": frozenset({"north", "south"})}
    assert settings.privileged_sources == frozenset({"sales"})


def test_the_global_options_are_the_flag_twins_and_the_clients() -> None:
    """`qexport`'s global options are the settings declared with a flag twin, each reading
    its variable, then the client's --user, --workspace, --as, --url and --token, and
    --version."""
    group = typer.main.get_command(app)
    options = group.params
    assert [p.name for p in options] == [s.name for s in TWINS] + CLIENT_OPTIONS
    for s, option in zip(TWINS, options, strict=False):
        assert (option.opts, option.envvar) == ([s.flag_name], s.env)


def test_help_lists_every_flag_twin() -> None:
    """`qexport --help` shows every flag twin with its help and, unless it is a secret, its
    variable."""
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0
    text = " ".join(shown.stdout.replace("│", " ").split())
    for s in TWINS:
        assert f"{s.flag_name} " in text
        assert " ".join(s.help.split()) in text
        assert (f"[env var: {s.env}]" in text) is not s.secret


@pytest.mark.parametrize("s", TWINS, ids=_ids(TWINS))
def test_a_flag_wins_over_its_variable(s: Setting, clean_env: pytest.MonkeyPatch) -> None:
    """Given both, the flag's value is the setting's, read as the variable would be."""
    (variable, _), (flag, value) = _samples(s)
    clean_env.setenv(s.env, variable)
    assert s.flag_name is not None
    group = typer.main.get_command(app)
    with group.make_context("qexport", [s.flag_name, flag, "db", "upgrade"]) as ctx:
        assert group.callback is not None
        ctx.invoked_subcommand = "db"  # as the group sets it before its callback runs
        ctx.invoke(group.callback, **ctx.params)
        state = ctx.obj
    assert isinstance(state, State)
    assert getattr(state.settings, s.name) == value


def _readme_configuration() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_table_lists_every_setting() -> None:
    """The README's configuration table has a row for every setting and names no variable
    qexport does not read (its own settings, and the client's QEXPORT_URL and QEXPORT_TOKEN)."""
    rows = [line for line in _readme_configuration().splitlines() if line.startswith("| `")]
    listed = {v for row in rows for v in re.findall(r"`(QEXPORT_[A-Z0-9_<>]+)`", row.split("|")[1])}
    group = typer.main.get_command(app)
    client = {p.envvar for p in group.params if p.name in CLIENT_OPTIONS}
    assert {s.env for s in declared()} <= listed
    assert listed - {s.env for s in declared()} <= client


def test_the_readme_names_every_flag_twin() -> None:
    """The README's configuration section names each flag twin, and no other setting flag."""
    named = set(re.findall(r"`(--[a-z0-9-]+)`", _readme_configuration()))
    client = {f"--{name}" for name in CLIENT_OPTIONS}
    assert named - client == {s.flag_name for s in TWINS}
