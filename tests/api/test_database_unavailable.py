"""A metadata database that is unavailable, or past the server's deadline, is a 503 that says
so and when to try again: `database_unavailable` with Retry-After from the API, the same
status and header on a page."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from qexport.domain.failures import MetadataUnavailableError
from qexport.http.errors import RETRY_UNAVAILABLE_SECONDS
from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person

ADA = "ada@acme.test"


class _Unavailable:
    """An export queue whose every call finds the database gone."""

    def __getattr__(self, name: str) -> Any:
        def call(*_args: Any, **_kwargs: Any) -> Any:
            raise MetadataUnavailableError("the metadata database is unavailable: timeout")

        return call


def test_an_unavailable_database_is_503_with_retry_after(api: Api) -> None:
    """An export read when the database is gone: the API's problem says
    `database_unavailable` with Retry-After, and so does the export's page (503, the header,
    the site's page for it)."""
    add_person(api, ADA, "admin")
    api.member(ADA, "admin")
    browser = Browser(api.client)
    browser.sign_in(ADA)
    api.client.app.state.context = replace(api.deps, exports=_Unavailable())  # type: ignore[attr-defined]
    answer = api.get("/api/v1/exports/some-id", ADA)
    assert answer.status_code == 503
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "database_unavailable"
    assert answer.headers["Retry-After"] == str(RETRY_UNAVAILABLE_SECONDS)
    page = api.client.get("/exports/some-id", headers={"Accept": "text/html"})
    assert page.status_code == 503
    assert page.headers["Retry-After"] == str(RETRY_UNAVAILABLE_SECONDS)
    assert "Temporarily unavailable" in page.text
