"""Migration 0022 keys registered sources by workspace and name: an upgraded installation keeps
its sources, their owners (none, for the oldest) and their shares, and then takes a second
workspace's source of a name already registered."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from qexport.domain.sources import RegisteredSource
from qexport.store.accounts import SqlAccountStore
from qexport.store.engine import MIGRATIONS
from tests.fakes import FrozenClock
from tests.support.stores import SqlMetadataStore


def _to(engine: sa.Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        if revision == "head":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)


def test_the_upgrade_keeps_sources_owners_and_shares(
    sql_store: SqlMetadataStore, clock: FrozenClock
) -> None:
    """An ownerless source and an owned one, each shared, read back the same after 0022; a
    second workspace then registers `shop` too, and the downgrade refuses while it exists."""
    engine = sql_store.engine
    _to(engine, "0019")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO sources (name, url, created_at, workspace_id, allow_privileged_role)"
                " VALUES (:n, :u, :t, :w, false)"
            ),
            [
                {"n": "old", "u": "duckdb:///data/old.duckdb", "t": clock.now(), "w": None},
                {"n": "shop", "u": "duckdb:///data/shop.duckdb", "t": clock.now(), "w": "acme"},
            ],
        )
        conn.execute(
            sa.text("INSERT INTO source_shares (source_name, workspace_id) VALUES (:n, :w)"),
            [{"n": "old", "w": "acme"}, {"n": "shop", "w": "beta"}],
        )

    _to(engine, "head")

    accounts = SqlAccountStore(engine)
    found = {s.name: (s.workspace_id, s.workspaces) for s in accounts.registered_sources()}
    assert found == {"old": (None, {"acme"}), "shop": ("acme", {"acme", "beta"})}
    accounts.add_source(
        RegisteredSource(
            "shop", "duckdb:///data/gamma.duckdb", "gamma", frozenset(), False, clock.now()
        )
    )
    with pytest.raises(RuntimeError, match="several workspaces have a source named shop"):
        _to(engine, "0019")
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM sources WHERE workspace_id = 'gamma'"))
    _to(engine, "0019")
    with engine.connect() as conn:
        owners = conn.execute(sa.text("SELECT name, workspace_id FROM sources ORDER BY name"))
        shares = conn.execute(sa.text("SELECT source_name, workspace_id FROM source_shares"))
        assert [tuple(r) for r in owners] == [("old", None), ("shop", "acme")]
        assert sorted(tuple(r) for r in shares) == [("old", "acme"), ("shop", "beta")]
