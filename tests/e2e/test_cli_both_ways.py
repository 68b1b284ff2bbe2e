"""The client commands print the same and exit the same on the local database and through a
server: a link revoked by the start of its id, a start two ids share, a mistyped name, a
preview and its refusals, and lists that name people rather than their ids."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx2

from qexport.domain.accounts import hash_secret
from qexport.store.tables.exports import links
from tests.e2e.conftest import Env
from tests.e2e.test_doors import EMAIL, Doors, _doors, _member
from tests.e2e.test_serve import bearer


def _both(doors: Doors, *args: str) -> tuple[subprocess.CompletedProcess[str], ...]:
    """The command run on the local database and through the server, as the same member."""
    return tuple(cli.run(*args, check=False) for cli in (doors.local, doors.remote))


def _alike(doors: Doors, *args: str) -> subprocess.CompletedProcess[str]:
    """The command's run at one end, once its output and exit status are the other's."""
    here, there = _both(doors, *args)
    assert (here.returncode, here.stdout, here.stderr) == (
        there.returncode,
        there.stdout,
        there.stderr,
    ), args
    return here


def _succeeded_export(doors: Doors) -> str:
    export_id, refusal = doors.api({"n": "5"})
    assert export_id is not None, refusal
    assert doors.env.start_worker("--drain").wait(timeout=120) == 0
    return export_id


def _link_with_id(env: Env, export_id: str, link_id: str, created_by: str) -> None:
    """A link of a chosen id (ids are random otherwise), as `links create` saves one."""
    with env.store.engine.begin() as conn:
        conn.execute(
            links.insert().values(
                id=link_id,
                export_id=export_id,
                token_hash=hash_secret(link_id),
                created_by=created_by,
                created_at=datetime.now(UTC),
            )
        )


def test_a_link_is_revoked_by_the_start_of_its_id_alike(env: Env, tmp_path: Path) -> None:
    """`links revoke` takes a link's start at both ends and says the same; a start two links
    share is refused naming both (exit 2), one of no link the member may revoke is "no link"
    (exit 1), in the same words at both ends."""
    ada = _doors(env, tmp_path)
    export_id = _succeeded_export(ada)
    for cli in (ada.local, ada.remote):
        made = cli.json("links", "create", export_id[:8])
        done = cli.run("links", "revoke", made["id"][:6])
        assert done.stdout.strip() == f"link {made['id']} revoked"
        assert httpx2.get(made["url"], timeout=30).status_code == 410
        assert cli.json("links", "list", export_id[:8])["items"] == []

    ada_id = ada.local.extra["QEXPORT_USER"]
    for n in (1, 2):
        _link_with_id(env, export_id, f"abcd000{n}-0000-4000-8000-00000000000{n}", ada_id)
    ambiguous = _alike(ada, "links", "revoke", "abcd")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.startswith("error: link id 'abcd' is ambiguous; it starts ")
    short = export_id[:8]
    assert f"abcd0001-0000-4000-8000-000000000001 (export {short})" in ambiguous.stderr
    assert f"abcd0002-0000-4000-8000-000000000002 (export {short})" in ambiguous.stderr
    unknown = _alike(ada, "links", "revoke", "00000000")
    assert (unknown.returncode, unknown.stderr) == (1, "error: no link '00000000'\n")
    # Someone else's link is no link of theirs to revoke, by its start as by its id.
    cy = _member(env, ada.url, "cy@example.com", "editor", tmp_path)
    assert _alike(cy, "links", "revoke", "abcd0001").stderr == "error: no link 'abcd0001'\n"
    short_start = _alike(ada, "links", "revoke", "abc")
    assert short_start.returncode == 2
    assert "a link id prefix needs at least 4 characters" in short_start.stderr
    # Once one of the two is revoked, the start names the other: through the server, then
    # locally, where it is revoked already and so no live link.
    ada.local.run("links", "revoke", "abcd0001-0000-4000-8000-000000000001")
    revoked = ada.remote.run("links", "revoke", "abcd")
    assert revoked.stdout.strip() == "link abcd0002-0000-4000-8000-000000000002 revoked"
    gone = ada.local.run("links", "revoke", "abcd", check=False)
    assert (gone.returncode, gone.stderr) == (1, "error: no link 'abcd'\n")


def test_a_mistyped_name_gets_the_same_suggestion_at_both_ends(env: Env, tmp_path: Path) -> None:
    """Every command that takes a query's name answers a typo with the nearest names and the
    same exit status, locally and through a server; a query's id start names it."""
    ada = _doors(env, tmp_path)
    typo = "error: no query 'smal_orders' that you can read; did you mean 'small_orders'?"
    for args, status in (
        (("queries", "preview", "smal_orders"), 2),
        (("queries", "delete", "smal_orders"), 1),
        (("exports", "create", "--query", "smal_orders", "--format", "csv"), 2),
        (("schedules", "add", "smal_orders", "--format", "csv", "--cron", "0 8 * * 1"), 2),
    ):
        refused = _alike(ada, *args)
        assert (refused.returncode, refused.stderr) == (status, f"{typo} (not_found)\n"), args
    listed = _alike(ada, "exports", "list", "--subject", "smal_orders")
    assert listed.returncode == 2
    assert listed.stderr == (
        "error: --subject: no query or report 'smal_orders' that you can read;"
        " did you mean 'small_orders'?\n"
    )
    by_start = _alike(ada, "queries", "preview", ada.query_id[:6], "--param", "n=2", "--json")
    assert '"query_name": "small_orders"' in by_start.stdout


def test_a_preview_prints_and_refuses_alike(env: Env, tmp_path: Path) -> None:
    """The same table and the same JSON at both ends; a bad parameter is the same one line
    (exit 2), led by its option and ending with its code; a statement the source refuses
    exits 1 at both ends."""
    ada = _doors(env, tmp_path)
    table = _alike(ada, "queries", "preview", "small_orders", "--param", "n=3")
    assert table.stdout.splitlines()[-1] == "3 rows; nothing was saved"
    shown = _alike(ada, "queries", "preview", "small_orders", "--param", "n=4", "--json")
    assert '"row_count": 4' in shown.stdout
    bad = _alike(ada, "queries", "preview", "small_orders", "--param", "n=many")
    assert (bad.returncode, bad.stderr) == (
        2,
        "error: --param n: parameter 'n' must be an integer, got 'many' (invalid_request)\n",
    )
    env.add_query("broken", "SELECT * FROM no_such_table")
    broken = _both(ada, "queries", "preview", "broken")
    assert [proc.returncode for proc in broken] == [1, 1]
    assert all(proc.stderr.strip().endswith("(query_invalid)") for proc in broken)


def test_lists_name_people_by_email_alike(env: Env, tmp_path: Path) -> None:
    """bea, an admin, lists ada's requests and ada's links by ada's email (not her id), the
    same at both ends, and approves one request at each end by the start of its id; ada
    lists her own by her email."""
    ada = _doors(env, tmp_path)
    export_id = _succeeded_export(ada)
    ada.local.json("links", "create", export_id[:8])
    env.run("workspaces", "policy", "demo", "--sensitive-queries", "small_orders")
    bea = _member(env, ada.url, "bea@example.com", "admin", tmp_path)
    with httpx2.Client(base_url=ada.url, headers=bearer(ada.token), timeout=30) as api:
        body = {"query_id": ada.query_id, "format": "csv", "parameters": {"n": "4"}}
        asked = [api.post("/api/v1/exports", json=body).json()["id"] for _ in range(2)]
    ada_id = ada.local.extra["QEXPORT_USER"]
    wide = {"COLUMNS": "250"}  # a terminal each row fits in
    for who in (bea, ada):
        for cli in (who.local, who.remote):
            cli.extra.update(wide)
        for args in (("approvals", "list"), ("links", "list", export_id[:8])):
            shown = _alike(who, *args).stdout
            assert EMAIL in shown, (who.email, args)
            assert ada_id not in shown, (who.email, args)
    for cli, request_id in zip((bea.local, bea.remote), asked, strict=True):
        said = cli.run("approvals", "approve", request_id[:8], "--reason", "ok").stdout
        assert said.startswith("approved: export ")
