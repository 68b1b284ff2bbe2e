"""The web pages over the API's in-process fixture (real SQLite, folder, DuckDB)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from qexport.domain.accounts import Role
from qexport.services.accounts import hash_password
from tests.api.conftest import Api, api, api_both, source_template

__all__ = ["api", "api_both", "source_template"]

PASSWORD = "correct horse battery staple"  # noqa: S105 - a test account's password
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "the page has no CSRF field"
    return found.group(1)


@dataclass
class Browser:
    """A TestClient that keeps the session cookie, as a browser without JavaScript would."""

    client: TestClient

    def page(self, path: str) -> str:
        response = self.client.get(path, headers={"Accept": "text/html"})
        assert response.status_code == 200, response.text
        return response.text

    def sign_in(self, email: str, password: str = PASSWORD) -> None:
        token = csrf_of(self.page("/sign-in"))
        response = self.client.post(
            "/sign-in",
            data={"email": email, "password": password, "csrf": token, "next": "/"},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text


def add_person(api: Api, email: str, role: Role | str = "editor", workspace: str = "acme") -> str:
    """A user with PASSWORD and a role in the workspace; returns their user id."""
    accounts, now = api.context.accounts, api.clock.now()
    accounts.ensure_workspace(workspace, now=now)
    user = accounts.find_user(email) or accounts.create_user(
        email, password_hash=hash_password(PASSWORD), now=now
    )
    accounts.set_role(workspace, user.id, Role(role))
    return user.id


@pytest.fixture
def browser(api: Api) -> Browser:
    return Browser(api.client)
