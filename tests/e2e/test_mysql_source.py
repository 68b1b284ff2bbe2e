"""A MariaDB source configured as a user does (QEXPORT_SOURCE_<NAME>=mysql://...), with the CLI
and `qexport worker` as subprocesses: an export with its requester's rows, and a refused login."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import Env
from tests.support.mariadb import READER, MariaDBServer, mariadb_server

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

WRONG_PASSWORD = "Wr0ng-Pa55word"  # noqa: S105 - a password the server refuses
PEOPLE = "SELECT id, name, @qexport_user_id AS seen_as FROM people WHERE owner = $user_id"


def _drain(env: Env) -> None:
    assert env.start_worker("--drain").wait(timeout=120) == 0


def test_each_requester_downloads_their_own_rows_as_csv(
    env: Env, mariadb_server: MariaDBServer, tmp_path: Path
) -> None:
    """A saved query on a mysql:// source, exported by a worker: the csv holds the rows of
    its requester ($user_id), who is also the session's @qexport_user_id."""
    env.extra["QEXPORT_SOURCE_MARIA"] = mariadb_server.url()
    env.extra["QEXPORT_SOURCE_MARIA_WORKSPACES"] = "demo"
    env.run("queries", "add", "my_people", "--sql", PEOPLE, "--source", "maria")
    env.extra["QEXPORT_USER"] = "u-alice"
    alice = env.create("my_people", "csv")
    _drain(env)
    view = env.get(alice)
    assert (view["status"], view["row_count"]) == ("succeeded", 1), view
    env.run("exports", "download", alice, "-o", str(tmp_path / "alice.csv"))
    assert (tmp_path / "alice.csv").read_bytes() == (
        b'"id","name","seen_as"\r\n1,"Ann","u-alice"\r\n'
    )


def test_a_refused_login_fails_at_once_with_a_clear_reason(
    env: Env, mariadb_server: MariaDBServer
) -> None:
    """A wrong password: failed access_lost after one attempt, saying the login was refused,
    without the password."""
    env.extra.update(
        {
            "QEXPORT_SOURCE_MARIA": mariadb_server.url(READER, WRONG_PASSWORD),
            "QEXPORT_SOURCE_MARIA_WORKSPACES": "*",
            "QEXPORT_MAX_ATTEMPTS": "3",
        }
    )
    env.add_query("q", "SELECT 1 AS one", source="maria")  # saving would ask the source
    export_id = env.create("q", "csv")
    _drain(env)
    view = env.get(export_id)
    assert (view["status"], view["attempts"]) == ("failed", 1)
    assert view["failure"]["code"] == "access_lost"
    assert "MySQL source 'maria' refused qexport's login" in view["failure"]["detail"]
    assert WRONG_PASSWORD not in view["failure"]["detail"]
