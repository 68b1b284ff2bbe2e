"""`qexport schedules subscribe ID` and `unsubscribe ID` as a member runs them, locally and
through a server: their own address gets each run, `schedules list` says so, nothing else of
the schedule changes, and a refusal is one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qexport.store.deliveries import SqlDeliveryStore
from tests.e2e.conftest import Env
from tests.e2e.test_serve import SMALL_ORDERS, N, new_token, start_server

VERA = "vera@example.com"


def _json(cli: Env, *args: str) -> Any:
    return json.loads(cli.run(*args, "--json").stdout)


def _targets(env: Env, export_id: str) -> list[str]:
    found = SqlDeliveryStore(env.store.engine).list_deliveries(export_id)
    return sorted(d.recipient.target for d in found)


def _owned_schedule(env: Env) -> tuple[str, Env]:
    """A schedule of alice (an editor) mailing ops@, and vera, a viewer, acting locally."""
    alice = env.run("users", "create", "alice@example.com", "--workspace", "demo",
                    "--role", "editor").stdout.strip()  # fmt: skip
    owner = Env(env.data_dir, {"QEXPORT_USER": alice})
    created = _json(owner, "schedules", "add", "small_orders", "--format", "csv",
                    "--cron", "0 8 * * 1", "--email", "ops@example.com")  # fmt: skip
    vera = env.run("users", "create", VERA, "--workspace", "demo", "--role", "viewer")
    return created["id"], Env(env.data_dir, {"QEXPORT_USER": vera.stdout.strip()})


def test_subscribe_and_unsubscribe_locally(env: Env) -> None:
    """A viewer subscribes (the line names the address); the list marks it; a run now reaches
    the owner's recipient and the viewer; the owner is unchanged; unsubscribing ends it."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    schedule_id, vera = _owned_schedule(env)
    said = vera.run("schedules", "subscribe", schedule_id).stdout.strip()
    assert said == f"subscribed to schedule {schedule_id}: each run's export is mailed to {VERA}"
    (item,) = _json(vera, "schedules", "list")["items"]
    assert item["subscribed"] is True
    assert item["recipients"] == [{"email": "o***@example.com"}]  # still masked: not the owner
    assert "mailed to you" in vera.run("schedules", "list").stdout
    owner = Env(env.data_dir, {"QEXPORT_USER": item["owner"]})
    assert _json(owner, "schedules", "list")["items"][0]["subscribed"] is False
    export_id = owner.run("schedules", "run-now", schedule_id).stdout.strip()
    assert _targets(env, export_id) == ["ops@example.com", VERA]
    assert env.record(export_id).requested_by == item["owner"]
    refused = vera.run("schedules", "run-now", schedule_id, check=False)
    assert refused.returncode == 1  # subscribing gives no say over the schedule
    said = vera.run("schedules", "unsubscribe", schedule_id).stdout.strip()
    assert said == f"unsubscribed from schedule {schedule_id}"
    assert _json(vera, "schedules", "list")["items"][0]["subscribed"] is False
    missing = vera.run("schedules", "subscribe", "no-such-id", check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: no schedule with this id that you can see (not_found)"


def test_subscribe_through_a_server(env: Env, tmp_path: Path) -> None:
    """Through QEXPORT_URL and QEXPORT_TOKEN: subscribe, listed as subscribed, unsubscribe; a
    per-person query is refused with the server's reason and code."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    env.add_query("my_orders", "SELECT * FROM orders WHERE customer_id::VARCHAR = $user_id")
    url, _ = start_server(env)
    owner = Env(tmp_path / "ed", {"QEXPORT_URL": url,
                                  "QEXPORT_TOKEN": new_token(env, "ed@example.com")})  # fmt: skip
    viewer = Env(tmp_path / "vi", {"QEXPORT_URL": url,
                                   "QEXPORT_TOKEN": new_token(env, VERA, "viewer")})  # fmt: skip
    schedule_id = _json(owner, "schedules", "add", "small_orders", "--format", "csv",
                        "--cron", "0 8 * * 1")["id"]  # fmt: skip
    said = viewer.run("schedules", "subscribe", schedule_id).stdout.strip()
    assert said.endswith(f"mailed to {VERA}")
    assert [s["subscribed"] for s in _json(viewer, "schedules", "list")["items"]] == [True]
    viewer.run("schedules", "unsubscribe", schedule_id)
    assert [s["subscribed"] for s in _json(viewer, "schedules", "list")["items"]] == [False]
    mine = _json(owner, "schedules", "add", "my_orders", "--format", "csv",
                 "--cron", "0 8 * * 1")["id"]  # fmt: skip
    refused = viewer.run("schedules", "subscribe", mine, check=False)
    assert refused.returncode == 1
    assert "$user_id" in refused.stderr
    assert "(conflict)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
