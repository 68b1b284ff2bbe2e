"""No request calls the metadata database on the server's event loop: every read and write
of the API and the pages runs on the thread pool (the engine refuses a checkout on a loop,
qexport.store.engine), so that a database that waits holds only the requests that wait for
it; and `/healthz` touches no database at all."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from qexport.store.exports.queue import SqlExportQueue
from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person, csrf_of

ADA = "ada@acme.test"


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextmanager
def _checkouts(engine: sa.Engine) -> Iterator[list[tuple[str, bool]]]:
    """The connections taken from the pool meanwhile: (thread name, on an event loop)."""
    taken: list[tuple[str, bool]] = []

    def _record(*_args: Any) -> None:
        taken.append((threading.current_thread().name, _on_a_loop()))

    sa.event.listen(engine, "checkout", _record)
    try:
        yield taken
    finally:
        sa.event.remove(engine, "checkout", _record)


def test_no_request_calls_the_database_on_the_event_loop(api_both: Api) -> None:
    """The reads that used to run on the loop (an export, its events, the list, a download
    from the folder store, the queries), a request, the readiness and metrics routes, a bad
    token sent with a body that does not parse, a page's confirmation of a POST-only URL, the
    policy form and an HTML error page all answer, every connection they take taken off the
    loop; `/healthz` takes none."""
    api = api_both
    add_person(api, ADA, "admin")
    api.member(ADA, "admin")
    query = api.add_query("orders")
    created = api.post("/api/v1/exports", ADA, json={"query_id": query.id, "format": "csv"})
    assert created.status_code == 202
    export_id = created.json()["id"]
    api.drain()
    assert isinstance(api.deps.exports, SqlExportQueue)
    browser = Browser(api.client)
    browser.sign_in(ADA)
    policy_form = csrf_of(browser.page("/workspace/policy"))
    with _checkouts(api.deps.exports.engine) as taken:
        reads = [
            "/api/v1/exports?limit=5",
            f"/api/v1/exports/{export_id}",
            f"/api/v1/exports/{export_id}/events",
            f"/api/v1/exports/{export_id}/file",
            "/api/v1/queries",
            f"/api/v1/queries/{query.id}",
        ]
        answers = {path: api.get(path, ADA).status_code for path in reads}
        answers["ranged file"] = api.client.get(
            reads[3], headers={**api.headers(ADA), "Range": "bytes=0-9"}
        ).status_code
        answers["request"] = api.post(
            "/api/v1/exports", ADA, json={"query_id": query.id, "format": "csv"}
        ).status_code
        answers["bad token, bad body"] = api.client.post(
            "/api/v1/exports",
            content=b"{not json",
            headers={"Authorization": "Bearer qx_nope", "Content-Type": "application/json"},
        ).status_code
        answers["readyz"] = api.client.get("/readyz").status_code
        answers["metrics"] = api.client.get("/metrics").status_code
        answers["confirm cancel"] = api.client.get(
            f"/exports/{export_id}/cancel", headers={"Accept": "text/html"}
        ).status_code
        answers["policy form"] = api.client.post(
            "/workspace/policy",
            data={"csrf": policy_form, "public_links": "on"},
            follow_redirects=False,
        ).status_code
        answers["html 404"] = api.client.get(
            "/no/such/page", headers={"Accept": "text/html"}
        ).status_code
    assert answers == {
        **dict.fromkeys(reads, 200),
        "ranged file": 206,
        "request": 202,
        "bad token, bad body": 401,
        "readyz": 200,
        "metrics": 200,
        "confirm cancel": 200,
        "policy form": 303,
        "html 404": 404,
    }
    assert taken  # the requests did read, and
    assert [thread for thread, on_a_loop in taken if on_a_loop] == []  # none on a loop
    events = api.get("/api/v1/audit?action=file.downloaded", ADA).json()["items"]
    assert len(events) == 2  # the downloads' events, written off the loop too
    with _checkouts(api.deps.exports.engine) as by_healthz:
        assert api.client.get("/healthz").status_code == 200
    assert by_healthz == []  # liveness takes no connection at all
