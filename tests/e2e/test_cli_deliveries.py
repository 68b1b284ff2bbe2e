"""`qexport exports deliveries ID` as a person runs it, in the local database and against a
running `qexport serve`: each recipient, its status, attempts and what it means now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Env
from tests.e2e.test_serve import SMALL_ORDERS, N, new_token, start_server

TEAM = "team@example.com"


@pytest.fixture
def orders_env(linked_env: Env) -> Env:
    """`linked_env` with the query small_orders, and no SMTP server: an email delivery fails,
    and says why."""
    linked_env.add_query("small_orders", SMALL_ORDERS, N)
    return linked_env


def test_deliveries_are_listed_locally_as_they_go(orders_env: Env) -> None:
    """Waiting for the export; then, with no SMTP server, failed with the reason; as JSON
    the API's fields; an unknown export is one line and exit 1."""
    created = json.loads(
        orders_env.run(
            "exports", "create", "--query", "small_orders", "--format", "csv", "--email", TEAM,
            "--json",
        ).stdout
    )  # fmt: skip
    export_id = created["id"]
    waiting = orders_env.run("exports", "deliveries", export_id).stdout
    assert f"email {TEAM}" in waiting
    assert "waiting" in waiting
    assert "waits for the export to finish" in waiting
    orders_env.run("worker", "--drain")
    orders_env.run("scheduler", "--once")
    failed = orders_env.run("exports", "deliveries", export_id).stdout
    assert "failed" in failed
    assert "email is not configured" in " ".join(failed.split())
    items = json.loads(orders_env.run("exports", "deliveries", export_id, "--json").stdout)["items"]
    assert [(i["recipient"], i["status"], i["attempts"]) for i in items] == [
        ({"email": TEAM}, "failed", 1)
    ]
    missing = orders_env.run("exports", "deliveries", "no-such-export", check=False)
    assert missing.returncode == 1
    assert "no export 'no-such-export'" in missing.stderr


def test_deliveries_are_listed_through_the_server(orders_env: Env, tmp_path: Path) -> None:
    """Remotely the same list comes from the API; another member's export is the server's
    404, as one line."""
    url, _ = start_server(orders_env)
    token = new_token(orders_env, "ann@example.com")
    client = Env(tmp_path / "client", {"QEXPORT_URL": url, "QEXPORT_TOKEN": token})
    created = json.loads(
        client.run(
            "exports", "create", "--query", "small_orders", "--format", "csv", "--email",
            "ann@example.com", "--json",
        ).stdout
    )  # fmt: skip
    listed = client.run("exports", "deliveries", created["id"]).stdout
    assert "email ann@example.com" in listed
    assert "waits for the export to finish" in listed
    as_json = json.loads(client.run("exports", "deliveries", created["id"], "--json").stdout)
    assert as_json["items"][0]["status"] == "waiting"
    bob = Env(
        tmp_path / "bob",
        {"QEXPORT_URL": url, "QEXPORT_TOKEN": new_token(orders_env, "bob@example.com")},
    )
    refused = bob.run("exports", "deliveries", created["id"], check=False)
    assert refused.returncode == 1
    assert "(not_found)" in refused.stderr
    assert not client.data_dir.exists()
