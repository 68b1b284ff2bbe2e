"""Every door takes a use case to the same handler: the API, the pages, and the command line
on the local database and through a server give the same export for the same request, refuse
the same bad request (or one over the requester's cap) the same way, recording nothing, and
share and revoke a file's public link alike."""

from __future__ import annotations

import contextlib
import hashlib
import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from qexport.clock import SystemClock
from qexport.domain.audit import AuditFilter
from qexport.services.accounts import add_user, issue_token
from qexport.store.accounts import SqlAccountStore
from qexport.store.audit.log import SqlAuditLog
from tests.e2e.conftest import Env
from tests.e2e.test_serve import SMALL_ORDERS, N, bearer, start_server

EMAIL = "ada@example.com"
PASSWORD = "a long enough password"  # noqa: S105 - a test account's


@dataclass
class Doors:
    """One member at each door; every door answers `(export id or None, refusal)`."""

    env: Env
    url: str
    email: str
    token: str
    query_id: str
    local: Env  # the command line on the server's database, acting as the member
    remote: Env  # the command line with an empty data dir, through the server

    def signed_in(self) -> httpx2.Client:
        """A browser signed in to the pages as the member (the caller closes it)."""
        browser = httpx2.Client(base_url=self.url, timeout=30)
        sign_in = browser.get("/sign-in", headers={"Accept": "text/html"}).text
        data = {"email": self.email, "password": PASSWORD, "csrf": _csrf(sign_in), "next": "/"}
        assert browser.post("/sign-in", data=data).status_code == 303
        return browser

    def api(self, parameters: dict[str, str]) -> tuple[str | None, str]:
        with httpx2.Client(base_url=self.url, headers=bearer(self.token), timeout=30) as api:
            body = {"query_id": self.query_id, "format": "csv", "parameters": parameters}
            answer = api.post("/api/v1/exports", json=body)
        if answer.status_code == 202:
            return answer.json()["id"], ""
        problem = answer.json()
        errors = problem.get("errors") or [{"message": problem["detail"]}]
        return None, " ".join(e["message"] for e in errors)

    def pages(self, parameters: dict[str, str]) -> tuple[str | None, str]:
        with contextlib.closing(self.signed_in()) as browser:
            form = browser.get("/exports/new").text
            fields = {f"p.{name}": value for name, value in parameters.items()}
            answer = browser.post(
                "/exports/new",
                data={
                    "csrf": _csrf(form),
                    "subject": f"query:{self.query_id}",
                    "format": "csv",
                    **fields,
                },
            )
        if answer.status_code == 303:
            return answer.headers["Location"].split("/")[2].split("?")[0], ""
        return None, html.unescape(answer.text)

    def cli_local(self, parameters: dict[str, str]) -> tuple[str | None, str]:
        return _cli(self.local, parameters)

    def cli_remote(self, parameters: dict[str, str]) -> tuple[str | None, str]:
        return _cli(self.remote, parameters)

    def api_link(self, export_id: str) -> tuple[str, str, Callable[[], None]]:
        """A new link's id and URL, and how to revoke it."""
        with httpx2.Client(base_url=self.url, headers=bearer(self.token), timeout=30) as api:
            made = api.post(f"/api/v1/exports/{export_id}/links")
        assert made.status_code == 201, made.text

        def revoke() -> None:
            with httpx2.Client(base_url=self.url, headers=bearer(self.token), timeout=30) as api:
                assert api.delete(f"/api/v1/links/{made.json()['id']}").status_code == 204

        return made.json()["id"], made.json()["url"], revoke

    def pages_link(self, export_id: str) -> tuple[str, str, Callable[[], None]]:
        browser = self.signed_in()
        page = browser.get(f"/exports/{export_id}").text
        made = browser.post(f"/exports/{export_id}/links", data={"csrf": _csrf(page)})
        assert made.status_code == 303, made.text
        page = browser.get(made.headers["Location"]).text  # shows the new URL this once
        url = re.search(r'id="public-url" type="text" readonly value="([^"]+)"', page)
        link_id = re.search(r'<tr id="link-([^"]+)">', page)
        assert url, page
        assert link_id, page

        def revoke() -> None:
            action = f"/exports/{export_id}/links/{link_id.group(1)}/revoke"
            answer = browser.post(action, data={"csrf": _csrf(page), "confirmed": "yes"})
            assert answer.status_code == 303, answer.text
            browser.close()

        return link_id.group(1), html.unescape(url.group(1)), revoke

    def cli_local_link(self, export_id: str) -> tuple[str, str, Callable[[], None]]:
        return _cli_link(self.local, export_id)

    def cli_remote_link(self, export_id: str) -> tuple[str, str, Callable[[], None]]:
        return _cli_link(self.remote, export_id)

    def api_decide(self, approval_id: str) -> str:
        """Approve a request; "" when it was, else what the door said."""
        with httpx2.Client(base_url=self.url, headers=bearer(self.token), timeout=30) as api:
            answer = api.post(f"/api/v1/approvals/{approval_id}/approve", json={"reason": "ok"})
        return "" if answer.status_code == 200 else answer.json()["detail"]

    def pages_decide(self, approval_id: str) -> str:
        with contextlib.closing(self.signed_in()) as browser:
            page = browser.get("/approvals").text
            answer = browser.post(
                f"/approvals/{approval_id}/approve", data={"csrf": _csrf(page), "reason": "ok"}
            )
        return "" if answer.status_code == 303 else html.unescape(answer.text)

    def cli_local_decide(self, approval_id: str) -> str:
        return _cli_decide(self.local, approval_id)

    def cli_remote_decide(self, approval_id: str) -> str:
        return _cli_decide(self.remote, approval_id)

    def deciders(self) -> dict[str, Callable[[str], str]]:
        return {
            "api": self.api_decide,
            "pages": self.pages_decide,
            "cli (local)": self.cli_local_decide,
            "cli (server)": self.cli_remote_decide,
        }

    def all(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "pages": self.pages,
            "cli (local)": self.cli_local,
            "cli (server)": self.cli_remote,
        }


def _cli_link(cli: Env, export_id: str) -> tuple[str, str, Callable[[], None]]:
    made = cli.json("links", "create", export_id[:8])  # an id's start, as anywhere in the CLI

    def revoke() -> None:
        cli.run("links", "revoke", made["id"])

    return made["id"], made["url"], revoke


def _cli_decide(cli: Env, approval_id: str) -> str:
    proc = cli.run("approvals", "approve", approval_id, "--reason", "ok", check=False)
    if proc.returncode == 0:
        assert "approved: export" in proc.stdout
        return ""
    assert proc.returncode == 1, proc.stderr  # a decision refused, at either end
    return proc.stderr


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def _cli(cli: Env, parameters: dict[str, str]) -> tuple[str | None, str]:
    params = [arg for name, value in parameters.items() for arg in ("--param", f"{name}={value}")]
    proc = cli.run(
        "exports", "create", "--query", "small_orders", "--format", "csv", *params, "--json",
        check=False,
    )  # fmt: skip
    if proc.returncode == 0:
        return re.search(r'"id": "([^"]+)"', proc.stdout).group(1), ""  # type: ignore[union-attr]
    assert proc.returncode == 2, proc.stderr  # a refused request is bad input at either end
    return None, proc.stderr


def _doors(env: Env, tmp_path: Path, **settings: str) -> Doors:
    """ada, an editor, at every door of a server on `env` (with `settings`)."""
    env.extra.update(settings)  # for the server and both command lines alike
    env.add_query("small_orders", SMALL_ORDERS, N)
    url, _ = start_server(env)
    return _member(env, url, EMAIL, "editor", tmp_path)


def _member(env: Env, url: str, email: str, role: str, tmp_path: Path) -> Doors:
    accounts, clock = SqlAccountStore(env.store.engine), SystemClock()
    added = add_user(accounts, clock, email, workspace="demo", role=role, password=PASSWORD)
    token = issue_token(accounts, clock, email).token
    query = env.store.find_query("demo", "small_orders")
    assert query is not None
    # The local command line makes links for the server's address, as the server does.
    local = Env(
        env.data_dir,
        {**env.extra, "QEXPORT_USER": added.user.id, "QEXPORT_PUBLIC_BASE_URL": url},
    )
    remote = Env(tmp_path / email, {"QEXPORT_URL": url, "QEXPORT_TOKEN": token})
    return Doors(env, url, email, token, query.id, local, remote)


def _what_was_asked(env: Env, export_id: str) -> dict[str, Any]:
    record = env.record(export_id)
    return {
        "status": record.status.value,
        "requested_by": record.requested_by,
        "subject": (record.subject_type, record.subject_id, record.subject_name),
        "format": record.format,
        "parameters": record.parameters,
        "options": record.options,
        "filename": record.filename,
    }


def test_each_door_records_the_same_export(env: Env, tmp_path: Path) -> None:
    doors = _doors(env, tmp_path)
    made = {}
    for door, ask in doors.all().items():
        export_id, refusal = ask({"n": "7"})
        assert export_id is not None, f"{door}: {refusal}"
        made[door] = _what_was_asked(env, export_id)
    first = made["api"]
    assert first["status"] == "queued"
    assert first["parameters"] == {"n": 7}
    assert first["options"] == {"neutralize_formulas": True}
    assert {door: asked for door, asked in made.items() if asked != first} == {}


def _count(env: Env) -> int:
    return len(env.store.list_exports(workspace_id="demo", limit=1000))


@pytest.mark.parametrize(
    ("parameters", "settings", "refusal"),
    [
        ({"n": "many"}, {}, "parameter 'n' must be an integer"),
        # One export is already queued (no worker runs): a second is over the cap of one, at
        # every door, the local command line included.
        ({"n": "3"}, {"QEXPORT_MAX_UNSETTLED_PER_USER": "1"}, "queued or running"),
    ],
    ids=["a bad value", "over the cap"],
)
def test_each_door_refuses_the_same_request_and_records_nothing(
    env: Env, tmp_path: Path, parameters: dict[str, str], settings: dict[str, str], refusal: str
) -> None:
    doors = _doors(env, tmp_path, **settings)
    if settings:
        assert doors.api({"n": "1"})[0] is not None  # the one the cap allows
    before = _count(env)
    for door, ask in doors.all().items():
        export_id, said = ask(parameters)
        assert export_id is None, f"{door} recorded {export_id}"
        assert refusal in said, f"{door}: {said}"
    assert _count(env) == before


def test_each_door_shares_a_file_and_revokes_its_link_alike(env: Env, tmp_path: Path) -> None:
    """A link made at any door downloads the file (checked against its sha256) and lives as
    long as the file; once revoked there, it downloads nothing."""
    doors = _doors(env, tmp_path)
    export_id, _ = doors.api({"n": "5"})
    assert export_id is not None
    assert env.start_worker("--drain").wait(timeout=120) == 0
    record = env.record(export_id)
    makers = {
        "api": doors.api_link,
        "pages": doors.pages_link,
        "cli (local)": doors.cli_local_link,
        "cli (server)": doors.cli_remote_link,
    }
    accounts = SqlAccountStore(env.store.engine)
    made = {}
    for door, make in makers.items():
        link_id, url, revoke = make(export_id)
        made[link_id] = door
        assert url.startswith(f"{doors.url}/p/"), f"{door}: {url}"
        shared = httpx2.get(url, timeout=30)
        assert shared.status_code == 200, f"{door}: {shared.status_code}"
        assert hashlib.sha256(shared.content).hexdigest() == record.sha256, door
        link = accounts.get_link(link_id)
        assert link is not None, door
        assert (link.created_by, link.expires_at) == (record.requested_by, None), door
        revoke()
        assert httpx2.get(url, timeout=30).status_code == 410, door
    # The trail names who acted at each door: the member through their token or their
    # session, or the operator's command line acting for them.
    trail = SqlAuditLog(env.store.engine).list_events(
        workspace_id="demo", narrow=AuditFilter(action="link.created")
    )
    actors = {made[e.target_id]: e.actor_kind for e in trail if e.target_id in made}
    assert actors == {
        "api": "token",
        "pages": "user",
        "cli (local)": "operator",
        "cli (server)": "token",
    }


def test_each_door_decides_an_approval_alike(env: Env, tmp_path: Path) -> None:
    """An export of a query the policy marks sensitive waits for an admin. ada, its editor
    requester, may approve it at no door (the same refusal at each); bea, an admin, approves
    one request at each door, and each becomes the same export, ada's, queued; the trail
    names who decided at each door."""
    ada = _doors(env, tmp_path)
    env.run("workspaces", "policy", "demo", "--sensitive-queries", "small_orders")
    bea = _member(env, ada.url, "bea@example.com", "admin", tmp_path)
    with httpx2.Client(base_url=ada.url, headers=bearer(ada.token), timeout=30) as api:
        body = {"query_id": ada.query_id, "format": "csv", "parameters": {"n": "4"}}
        asked = [api.post("/api/v1/exports", json=body).json() for _ in range(4)]
    assert {a["kind"] for a in asked} == {"approval"}
    doors = list(bea.deciders())
    # Both command lines list the same waiting requests, newest first.
    waiting = [[a["id"] for a in cli.json("approvals", "list", "--pending")["items"]]
               for cli in (bea.local, bea.remote)]  # fmt: skip
    assert waiting == [[a["id"] for a in reversed(asked)]] * 2
    for door, decide in ada.deciders().items():
        said = decide(asked[0]["id"])
        assert "only workspace admins may approve" in said, f"{door}: {said}"
    made, approval_of = {}, {}
    for (door, decide), request in zip(bea.deciders().items(), asked, strict=True):
        assert decide(request["id"]) == "", door
        approval_of[request["id"]] = door
    with httpx2.Client(base_url=bea.url, headers=bearer(bea.token), timeout=30) as api:
        for request in asked:
            decided = api.get(f"/api/v1/approvals/{request['id']}").json()
            assert (decided["status"], decided["reason"]) == ("approved", "ok")
            export = _what_was_asked(env, decided["export_id"])
            # Each export names the request it was approved from; otherwise they are alike.
            assert export["options"].pop("approval_id") == request["id"]
            made[approval_of[request["id"]]] = export
    first = made["api"]
    assert (first["status"], first["parameters"]) == ("queued", {"n": 4})
    assert first["requested_by"] == ada.local.extra["QEXPORT_USER"]  # ada's, not bea's
    assert {door: m for door, m in made.items() if m != first} == {}
    trail = SqlAuditLog(env.store.engine).list_events(
        workspace_id="demo", narrow=AuditFilter(action="approval.decided")
    )
    decided_by = {approval_of[e.target_id]: e.actor_kind for e in trail if e.outcome == "ok"}
    assert decided_by == dict(zip(doors, ["token", "user", "operator", "token"], strict=True))


def _sees(doors: Doors, export_id: str) -> dict[str, tuple[bool, bool]]:
    """At each door: whether the member finds the export by its id, and in their list."""
    seen: dict[str, tuple[bool, bool]] = {}
    with httpx2.Client(base_url=doors.url, headers=bearer(doors.token), timeout=30) as api:
        listed = [e["id"] for e in api.get("/api/v1/exports").json()["items"]]
        found = api.get(f"/api/v1/exports/{export_id}").status_code == 200
        seen["api"] = (found, export_id in listed)
    with contextlib.closing(doors.signed_in()) as browser:
        found = browser.get(f"/exports/{export_id}").status_code == 200
        seen["pages"] = (found, export_id in browser.get("/").text)
    for door, cli in (("cli (local)", doors.local), ("cli (server)", doors.remote)):
        got = cli.run("exports", "get", export_id[:8], "--json", check=False)
        assert got.returncode in (0, 1), got.stderr
        listed = [e["id"] for e in cli.json("exports", "list")["items"]]
        seen[door] = (got.returncode == 0, export_id in listed)
    return seen


def test_each_door_shows_an_admin_the_workspace_and_a_member_their_own(
    env: Env, tmp_path: Path
) -> None:
    """ada's export is found, by its id's start too, and listed at every door for bea, a
    workspace admin, and at none for cy, another editor: the command line on the local
    database shows what the API shows."""
    ada = _doors(env, tmp_path)
    export_id, refusal = ada.api({"n": "3"})
    assert export_id is not None, refusal
    bea = _member(env, ada.url, "bea@example.com", "admin", tmp_path)
    cy = _member(env, ada.url, "cy@example.com", "editor", tmp_path)
    assert _sees(bea, export_id) == dict.fromkeys(bea.all(), (True, True))
    assert _sees(cy, export_id) == dict.fromkeys(cy.all(), (False, False))


def _schedule(doors: Doors) -> str:
    """A paused schedule of ada's query, made through the API; its id."""
    with httpx2.Client(base_url=doors.url, headers=bearer(doors.token), timeout=30) as api:
        body = {"query_id": doors.query_id, "format": "csv", "parameters": {"n": "2"},
                "cron": "0 8 1 1 *", "enabled": False}  # fmt: skip
        made = api.post("/api/v1/schedules", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _schedule_now(doors: Doors, schedule_id: str) -> dict[str, Any]:
    with httpx2.Client(base_url=doors.url, headers=bearer(doors.token), timeout=30) as api:
        found = api.get(f"/api/v1/schedules/{schedule_id}")
    assert found.status_code == 200, found.text
    return dict(found.json())


def _on_the_api(doors: Doors, schedule_id: str, action: str) -> str | None:
    """Resume, pause or run the schedule through the API; the export's id for a run."""
    with httpx2.Client(base_url=doors.url, headers=bearer(doors.token), timeout=30) as api:
        if action == "run":
            answer = api.post(f"/api/v1/schedules/{schedule_id}/run")
            assert answer.status_code == 202, answer.text
            return str(answer.json()["id"])
        answer = api.patch(f"/api/v1/schedules/{schedule_id}", json={"enabled": action == "resume"})
    assert answer.status_code == 200, answer.text
    return None


def _on_the_pages(doors: Doors, schedule_id: str, action: str) -> str | None:
    with contextlib.closing(doors.signed_in()) as browser:
        page = browser.get(f"/schedules/{schedule_id}").text
        answer = browser.post(f"/schedules/{schedule_id}/{action}", data={"csrf": _csrf(page)})
    assert answer.status_code == 303, answer.text
    if action == "run":
        return answer.headers["Location"].split("/")[2].split("?")[0]
    return None


def _on_the_cli(cli: Env, schedule_id: str, action: str) -> str | None:
    command = {"run": "run-now"}.get(action, action)
    done = cli.run("schedules", command, schedule_id[:8])  # an id's start, as anywhere
    return done.stdout.strip() if action == "run" else None


def test_each_door_pauses_resumes_and_runs_a_schedule_alike(env: Env, tmp_path: Path) -> None:
    """ada resumes, pauses and runs her schedule at every door: each resume gives it a next
    run, each pause takes it away, and each run records the same export, ada's, queued."""
    ada = _doors(env, tmp_path)
    schedule_id = _schedule(ada)
    doors: dict[str, Callable[[str, str], str | None]] = {
        "api": lambda sid, action: _on_the_api(ada, sid, action),
        "pages": lambda sid, action: _on_the_pages(ada, sid, action),
        "cli (local)": lambda sid, action: _on_the_cli(ada.local, sid, action),
        "cli (server)": lambda sid, action: _on_the_cli(ada.remote, sid, action),
    }
    made = {}
    for door, act in doors.items():
        assert act(schedule_id, "resume") is None
        resumed = _schedule_now(ada, schedule_id)
        assert (resumed["enabled"], resumed["next_run_at"] is not None) == (True, True), door
        assert act(schedule_id, "pause") is None
        paused = _schedule_now(ada, schedule_id)
        assert (paused["enabled"], paused["next_run_at"]) == (False, None), door
        export_id = act(schedule_id, "run")
        assert export_id is not None, door
        made[door] = _what_was_asked(env, export_id)
    first = made["api"]
    assert (first["status"], first["parameters"]) == ("queued", {"n": 2})
    assert first["requested_by"] == ada.local.extra["QEXPORT_USER"]
    assert {door: m for door, m in made.items() if m != first} == {}


def _listed(doors: Doors, kind: str) -> dict[str, list[dict[str, Any]]]:
    """The queries (`kind` "queries") or reports the member reads, at the API and at both
    ends of the command line."""
    with httpx2.Client(base_url=doors.url, headers=bearer(doors.token), timeout=30) as api:
        answer = api.get(f"/api/v1/{kind}")
    assert answer.status_code == 200, answer.text
    return {
        "api": answer.json()["items"],
        "cli (local)": doors.local.json(kind, "list"),
        "cli (server)": doors.remote.json(kind, "list"),
    }


def test_the_command_line_lists_and_deletes_queries_and_reports_alike(
    env: Env, tmp_path: Path
) -> None:
    """`queries list` and `reports list` show what the API shows, on the local database and
    through a server (before, a set QEXPORT_URL was ignored and the local database listed);
    a viewer's delete is refused the same at both ends, and ada, an editor, deletes one
    query, and one report, at each end, by name or title."""
    for name in ("gone_locally", "gone_remotely"):
        env.add_query(name, "SELECT 1 AS one")
    ada = _doors(env, tmp_path)
    for title in ("Local report", "Remote report"):
        ada.local.run("reports", "add", title, "--section", "S|small_orders|table")
    for kind in ("queries", "reports"):
        listed = _listed(ada, kind)
        assert len(listed["api"]) == (3 if kind == "queries" else 2)
        assert {door: found for door, found in listed.items() if found != listed["api"]} == {}

    vic = _member(env, ada.url, "vic@example.com", "viewer", tmp_path)
    refusals = set()
    for cli in (vic.local, vic.remote):
        refused = cli.run("queries", "delete", "gone_locally", check=False)
        assert refused.returncode == 1, refused.stderr
        refusals.add(refused.stderr.strip())
    assert len(refusals) == 1, refusals
    assert "(forbidden)" in refusals.pop()

    assert ada.local.run("queries", "delete", "gone_locally").stdout.startswith("deleted query")
    assert ada.remote.run("queries", "delete", "gone_remotely").stdout.startswith("deleted query")
    ada.local.run("reports", "delete", "Local report")
    ada.remote.run("reports", "delete", "Remote report")
    assert [q["name"] for q in _listed(ada, "queries")["api"]] == ["small_orders"]
    assert _listed(ada, "reports")["api"] == []
    missing = {
        cli.run("reports", "delete", "Local report", check=False).stderr.strip()
        for cli in (ada.local, ada.remote)
    }
    assert missing == {"error: no report 'Local report' that you can read (not_found)"}


def _cli_add_query(cli: Env, name: str, sql: str, specs: tuple[str, ...]) -> tuple[str, str]:
    """`queries add` with a `--param` per spec: (what it printed, "") when it saved the query,
    ("", the refusal) when its values were refused (exit 2, at either end)."""
    params = [arg for spec in specs for arg in ("--param", spec)]
    proc = cli.run("queries", "add", name, "--sql", sql, *params, check=False)
    if proc.returncode == 0:
        return proc.stdout, ""
    assert proc.returncode == 2, proc.stderr  # refused values, at either end
    return "", proc.stderr


def test_each_door_saves_a_query_alike_and_refuses_the_same_mistakes(
    env: Env, tmp_path: Path
) -> None:
    """One SaveQuery handler behind every door: ada saves the same query through the API, the
    pages and the command line at both ends, and each is stored alike (its SQL, source,
    parameters, owner and the columns its source described); SQL the source refuses is
    refused at each door with the source's words, and nothing is saved; `queries update`
    changes one at either end. (Before, the local command line saved without the API's
    checks of who may write and which sources a query may name.)"""
    ada = _doors(env, tmp_path)
    sql = "SELECT order_id, $note AS note FROM orders"

    def api(name: str, text: str) -> str:
        body = {"name": name, "sql": text, "source": "demo"}
        body["parameters"] = [{"name": "note", "type": "string", "default": "x"}]
        with httpx2.Client(base_url=ada.url, headers=bearer(ada.token), timeout=30) as client:
            answer = client.post("/api/v1/queries", json=body)
        return "" if answer.status_code == 201 else answer.text

    def pages(name: str, text: str) -> str:
        with contextlib.closing(ada.signed_in()) as browser:
            form = browser.get("/queries/new").text
            fields = {"name": name, "source": "demo", "sql": text, "parameters": "note:string=x"}
            answer = browser.post("/queries/new", data={"csrf": _csrf(form), **fields})
        return "" if answer.status_code == 303 else html.unescape(answer.text)

    def cli(door: Env) -> Callable[[str, str], str]:
        def save(name: str, text: str) -> str:
            shown, refused = _cli_add_query(door, name, text, ("note:string=x",))
            if not refused:
                assert "columns: order_id BIGINT, note VARCHAR" in shown
            return refused

        return save

    doors = {"api": api, "pages": pages, "cli (local)": cli(ada.local)}
    doors["cli (server)"] = cli(ada.remote)
    for door, save in doors.items():
        assert save(f"by {door}", sql) == "", door
        refused = save(f"broken by {door}", "SELECT * FROM no_such_table")
        assert "Table with name no_such_table does not exist" in refused, (door, refused)

    saved = {q["name"]: q for q in _listed(ada, "queries")["api"]}
    assert sorted(saved) == sorted([*(f"by {door}" for door in doors), "small_orders"])
    kept = ("sql", "source", "parameters", "columns", "owner", "visibility", "filename_template")
    stored = {door: {k: saved[f"by {door}"][k] for k in kept} for door in doors}
    assert stored["api"]["owner"] == ada.local.extra["QEXPORT_USER"]
    assert stored["api"]["parameters"] == [
        {"name": "note", "type": "string", "required": False, "default": "x"}
    ]
    assert {door: found for door, found in stored.items() if found != stored["api"]} == {}

    ada.local.run("queries", "update", "by api", "--sql", "SELECT order_id AS id FROM orders")
    ada.remote.run("queries", "update", "by pages", "--sql", "SELECT order_id AS id FROM orders")
    changed = {q["name"]: q for q in _listed(ada, "queries")["api"]}
    for name in ("by api", "by pages"):
        assert changed[name]["columns"] == [{"name": "id", "type": "BIGINT"}], name
        assert changed[name]["parameters"] == stored["api"]["parameters"], name


TYPED_SPECS = ("n:integer=10", "above:number=2.5", "paid:boolean=yes", "since:date=2024-01-20")
MISTYPED = ("n:integer=ten",)
TYPED_DEFAULTS = [
    {"name": "n", "type": "integer", "required": False, "default": 10},
    {"name": "above", "type": "number", "required": False, "default": 2.5},
    {"name": "paid", "type": "boolean", "required": False, "default": True},
    {"name": "since", "type": "date", "required": False, "default": "2024-01-20"},
]


def test_each_door_stores_a_parameters_default_as_its_type(env: Env, tmp_path: Path) -> None:
    """A default is stored as its parameter's type, whichever door saved the query: ada gives
    the API JSON values (10, 2.5, true) and the pages and the command line text (`n:integer=10`,
    `paid:boolean=yes`), and each query reads back with the same typed defaults; a default
    that is not of its type is refused at every door, naming the parameter. (Before, the
    pages and the command line stored the text they were given, "10" and "yes".)"""
    ada = _doors(env, tmp_path)
    sql = "SELECT order_id, $n AS n, $above AS above, $paid AS paid, $since AS since FROM orders"

    # The API is given JSON for the same declarations: typed values, or the mistyped text.
    as_json = {
        TYPED_SPECS: [{k: p[k] for k in ("name", "type", "default")} for p in TYPED_DEFAULTS],
        MISTYPED: [{"name": "n", "type": "integer", "default": "ten"}],
    }

    def api(name: str, specs: tuple[str, ...]) -> str:
        body = {"name": name, "sql": sql, "source": "demo", "parameters": as_json[specs]}
        with httpx2.Client(base_url=ada.url, headers=bearer(ada.token), timeout=30) as client:
            answer = client.post("/api/v1/queries", json=body)
        return "" if answer.status_code == 201 else answer.text

    def pages(name: str, specs: tuple[str, ...]) -> str:
        with contextlib.closing(ada.signed_in()) as browser:
            form = browser.get("/queries/new").text
            fields = {"name": name, "source": "demo", "sql": sql, "parameters": "\n".join(specs)}
            answer = browser.post("/queries/new", data={"csrf": _csrf(form), **fields})
        return "" if answer.status_code == 303 else html.unescape(answer.text)

    def cli(door: Env) -> Callable[[str, tuple[str, ...]], str]:
        return lambda name, specs: _cli_add_query(door, name, sql, specs)[1]

    doors = {"api": api, "pages": pages, "cli (local)": cli(ada.local)}
    doors["cli (server)"] = cli(ada.remote)
    for door, save in doors.items():
        assert save(f"by {door}", TYPED_SPECS) == "", door
        refused = save(f"mistyped by {door}", MISTYPED)
        assert "parameter 'n' must be an integer, got 'ten'" in refused, (door, refused)

    saved = {q["name"]: q["parameters"] for q in _listed(ada, "queries")["api"]}
    assert sorted(saved) == sorted([*(f"by {door}" for door in doors), "small_orders"])
    assert {door: saved[f"by {door}"] for door in doors} == dict.fromkeys(doors, TYPED_DEFAULTS)


def test_a_viewer_cannot_save_a_query_or_report_at_either_end_of_the_command_line(
    env: Env, tmp_path: Path
) -> None:
    """A viewer's `queries add`, `queries update` and `reports add` are refused with the
    same line on the local database and through a server, and nothing is saved (before,
    the local command line saved them: it asked nobody's role)."""
    ada = _doors(env, tmp_path)
    vic = _member(env, ada.url, "vic@example.com", "viewer", tmp_path)
    attempts = [
        ("queries", "add", "mine", "--sql", "SELECT 1 AS one"),
        ("queries", "update", "small_orders", "--sql", "SELECT 1 AS one"),
        ("reports", "add", "Mine", "--section", "S|small_orders|table"),
    ]
    for args in attempts:
        lines = set()
        for cli in (vic.local, vic.remote):
            refused = cli.run(*args, check=False)
            assert refused.returncode == 1, (args, refused.stderr)
            lines.add(refused.stderr.strip())
        assert len(lines) == 1, (args, lines)
        assert "(forbidden)" in lines.pop()
    assert [q["name"] for q in _listed(ada, "queries")["api"]] == ["small_orders"]
    assert _listed(ada, "reports")["api"] == []


def test_each_door_cancels_an_export_alike(env: Env, tmp_path: Path) -> None:
    """ada cancels a queued export of hers at every door (the command line by the start of
    its id): each settles alike (failed, code `cancelled`, as the API and `--json` say it) and
    reads "cancelled" at both ends of the command line; cancelling a settled one is refused
    at every door."""
    ada = _doors(env, tmp_path)

    def api(export_id: str) -> int:
        with httpx2.Client(base_url=ada.url, headers=bearer(ada.token), timeout=30) as client:
            return client.post(f"/api/v1/exports/{export_id}/cancel").status_code

    def pages(export_id: str) -> int:
        with contextlib.closing(ada.signed_in()) as browser:
            page = browser.get(f"/exports/{export_id}").text
            data = {"csrf": _csrf(page), "confirmed": "yes"}
            return browser.post(f"/exports/{export_id}/cancel", data=data).status_code

    def cli(door: Env) -> Callable[[str], int]:
        def cancel(export_id: str) -> int:
            return door.run("exports", "cancel", export_id[:8], check=False).returncode

        return cancel

    doors = {"api": api, "pages": pages, "cli (local)": cli(ada.local)}
    doors["cli (server)"] = cli(ada.remote)
    settled = {}
    for door, cancel in doors.items():
        export_id, refusal = ada.api({"n": "7"})
        assert export_id is not None, refusal
        assert cancel(export_id) in (200, 303, 0), door
        record = env.record(export_id)
        settled[door] = (record.status.value, record.failure_code, record.failure_detail)
        views = [cli.json("exports", "get", export_id) for cli in (ada.local, ada.remote)]
        with httpx2.Client(base_url=ada.url, headers=bearer(ada.token), timeout=30) as client:
            views.append(client.get(f"/api/v1/exports/{export_id}").json())
        shown = {(view["status"], view["failure"]["code"]) for view in views}
        assert shown == {("failed", "cancelled")}, (door, shown)
        for cli in (ada.local, ada.remote):  # what a person reads: cancelled
            assert "cancelled" in cli.run("exports", "get", export_id[:8]).stdout, door
        assert cancel(export_id) not in (200, 303, 0), f"{door} cancelled a settled export"
    assert len(set(settled.values())) == 1, settled
