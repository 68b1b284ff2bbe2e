"""Every door requests an export through the same handler: the API, the pages, and the
command line on the local database and through a server give the same export for the same
request, and refuse the same bad request (or one over the requester's cap) the same way,
recording nothing."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from qexport.clock import SystemClock
from qexport.services.accounts import add_user, issue_token
from qexport.store.accounts import SqlAccountStore
from tests.e2e.conftest import Env
from tests.e2e.test_serve import SMALL_ORDERS, N, bearer, start_server

EMAIL = "ada@example.com"
PASSWORD = "a long enough password"  # noqa: S105 - a test account's


@dataclass
class Doors:
    """One member, ada, at each door; every door answers `(export id or None, refusal)`."""

    env: Env
    url: str
    token: str
    query_id: str
    local: Env  # the command line on the server's database, acting as ada
    remote: Env  # the command line with an empty data dir, through the server

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
        with httpx2.Client(base_url=self.url, timeout=30) as browser:
            sign_in = browser.get("/sign-in", headers={"Accept": "text/html"}).text
            data = {"email": EMAIL, "password": PASSWORD, "csrf": _csrf(sign_in), "next": "/"}
            assert browser.post("/sign-in", data=data).status_code == 303
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

    def all(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "pages": self.pages,
            "cli (local)": self.cli_local,
            "cli (server)": self.cli_remote,
        }


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
    env.extra.update(settings)  # for the server and both command lines alike
    env.add_query("small_orders", SMALL_ORDERS, N)
    accounts, clock = SqlAccountStore(env.store.engine), SystemClock()
    ada = add_user(accounts, clock, EMAIL, workspace="demo", role="editor", password=PASSWORD)
    token = issue_token(accounts, clock, EMAIL).token
    url, _ = start_server(env)
    query = env.store.find_query("demo", "small_orders")
    assert query is not None
    local = Env(env.data_dir, {**env.extra, "QEXPORT_USER": ada.user.id})
    remote = Env(tmp_path / "client", {"QEXPORT_URL": url, "QEXPORT_TOKEN": token})
    return Doors(env, url, token, query.id, local, remote)


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
