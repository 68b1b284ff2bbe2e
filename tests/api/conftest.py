"""An API over real adapters (SQLite, a folder, DuckDB) in a temporary directory.

`api.member(...)` makes accounts and returns their tokens; `api.drain()` runs a worker in
this process until nothing is queued or running.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pytest
from fastapi.testclient import TestClient

from qexport import bootstrap
from qexport.app import create_app
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.accounts import Role, new_api_token
from qexport.domain.queries import Parameter, ParamType, Query, Visibility
from qexport.worker.loop import Worker
from tests.fakes import FrozenClock

SOURCE = "shop"
EDITOR = "editor@acme.test"  # the member of `editor_api`


def _source_database(path: Path) -> None:
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE orders AS SELECT i AS id, 'customer ' || (i % 7) AS customer,"
            " (i * 1.25)::DECIMAL(10, 2) AS amount, DATE '2024-01-01' + (i % 30)::INTEGER AS day"
            " FROM range(1, 101) t(i)"
        )


@pytest.fixture(scope="session")
def source_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "shop.duckdb"
    _source_database(path)
    return path


@dataclass
class Api:
    client: TestClient
    context: Container
    deps: Container
    clock: FrozenClock
    tokens: dict[str, str] = field(default_factory=dict)

    def member(self, email: str, role: Role | str, workspace: str = "acme") -> str:
        """Create (or reuse) the user, give them `role` in `workspace`; return a new token."""
        accounts, now = self.context.accounts, self.clock.now()
        accounts.ensure_workspace(workspace, now=now)
        user = accounts.find_user(email) or accounts.create_user(email, password_hash=None, now=now)
        accounts.set_role(workspace, user.id, Role(role))
        token_id, token, secret_hash = new_api_token()
        accounts.add_token(
            token_id=token_id,
            user_id=user.id,
            workspace_id=workspace,
            secret_hash=secret_hash,
            now=now,
        )
        self.tokens[email] = token
        return token

    def user_id(self, email: str) -> str:
        user = self.context.accounts.find_user(email)
        assert user is not None
        return user.id

    def headers(self, email_or_token: str) -> dict[str, str]:
        token = self.tokens.get(email_or_token, email_or_token)
        return {"Authorization": f"Bearer {token}"}

    def add_query(
        self,
        name: str = "orders",
        *,
        workspace: str = "acme",
        sql: str = "SELECT * FROM orders WHERE day >= $since ORDER BY id",
        parameters: tuple[Parameter, ...] = (
            Parameter("since", ParamType.DATE, required=False, default="2024-01-01"),
        ),
        visibility: Visibility = Visibility.WORKSPACE,
        members: frozenset[str] = frozenset(),
        owner: str | None = None,
    ) -> Query:
        query = Query(
            id=f"q-{name}-{workspace}",
            workspace_id=workspace,
            name=name,
            sql=sql,
            source=SOURCE,
            parameters=parameters,
            visibility=visibility,
            members=members,
            owner=owner,
        )
        return self.deps.catalog.add_query(query)

    def drain(self) -> dict[str, int]:
        return Worker(self.deps, drain=True).run()

    def get(self, path: str, who: str, **kwargs: Any) -> Any:
        return self.client.get(path, headers=self.headers(who), **kwargs)

    def post(self, path: str, who: str, **kwargs: Any) -> Any:
        return self.client.post(path, headers=self.headers(who), **kwargs)

    def delete(self, path: str, who: str, **kwargs: Any) -> Any:
        return self.client.delete(path, headers=self.headers(who), **kwargs)


@contextlib.contextmanager
def api_on(
    tmp_path: Path, source_template: Path, database_url: str = "", **overrides: Any
) -> Iterator[Api]:
    """The API of a fresh installation whose metadata database is `database_url` (SQLite in
    the data directory when empty), with other settings `overrides`. On PostgreSQL it has a
    QEXPORT_SECRET_KEY, as the product requires there (its audit trail is keyed with it)."""
    source = tmp_path / "shop.duckdb"
    shutil.copy(source_template, source)
    if database_url:
        overrides.setdefault("secret_key", "api-tests-secret-" + "k" * 32)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        sources={SOURCE: f"duckdb://{source}"},
        source_workspaces={SOURCE: frozenset({"acme", "other"})},
        lease_seconds=30,
        public_base_url="http://127.0.0.1:8000",  # as `serve` sets it
    ).with_overrides(**overrides)
    settings.data_dir.mkdir()
    clock = FrozenClock()
    deps = bootstrap.build(settings, clock=clock)
    try:
        with TestClient(create_app(deps), raise_server_exceptions=False) as client:
            yield Api(client, deps, deps, clock)
    finally:
        deps.close()  # PostgreSQL connections are closed, not left to the GC


@pytest.fixture
def api(tmp_path: Path, source_template: Path) -> Iterator[Api]:
    with api_on(tmp_path, source_template) as api:
        yield api


@pytest.fixture(params=["sqlite", "postgresql"])
def api_both(
    request: pytest.FixtureRequest, tmp_path: Path, source_template: Path
) -> Iterator[Api]:
    """`api` on SQLite and on PostgreSQL, for the adversarial tests of isolation and quotas."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    with api_on(tmp_path, source_template, url) as api:
        yield api


@pytest.fixture
def editor_api(api: Api) -> Api:
    """`api` with an editor of acme (`EDITOR`) and the query `orders`."""
    api.member(EDITOR, "editor")
    api.add_query("orders")
    return api
