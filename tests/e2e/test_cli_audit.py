"""`qexport audit verify|prune|list` and the operator's commands on record, as an operator
runs them: each command that changes something leaves one event of the operator's."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from qexport.domain.audit import Action, ActorKind, AuditEvent
from qexport.store.audit.log import SqlAuditLog
from qexport.store.tables.audit import audit_events
from tests.e2e.conftest import Env


def _list(env: Env, *args: str) -> list[dict[str, object]]:
    body = json.loads(env.run("audit", "list", "--json", *args).stdout)
    items: list[dict[str, object]] = body["items"]
    return items


def test_operator_commands_each_leave_one_event_and_the_list_filters_them(env: Env) -> None:
    """users create, tokens create and revoke: one event each, actor the operator's CLI,
    never the token; `audit list` narrows by action and target and pages by cursor."""
    user_id = env.run(
        "users", "create", "ann@acme.test", "--workspace", "acme", "--role", "admin"
    ).stdout.strip()
    token = env.run("tokens", "create", "ann@acme.test").stdout.strip()
    token_id = token.split("_")[1]
    env.run("tokens", "revoke", token_id)
    (role,) = _list(env, "--action", "member.role_set")
    assert role["actor"] == {"kind": "operator", "id": "cli"}
    assert role["target"] == {"kind": "user", "id": user_id}
    assert role["details"] == {"email": "ann@acme.test", "role": "admin", "previous_role": None}
    (created,) = _list(env, "--action", "token.created")
    assert created["target"] == {"kind": "token", "id": token_id}
    first = json.loads(
        env.run("audit", "list", "--json", "--action", "token.", "--limit", "1").stdout
    )
    assert [e["action"] for e in first["items"]] == ["token.revoked"]
    (older,) = _list(env, "--action", "token.", "--limit", "1", "--cursor", first["next_cursor"])
    assert older["action"] == "token.created"
    assert _list(env, "--target", token_id, "--action", "token.revoked")[0]["target"] == {
        "kind": "token",
        "id": token_id,
    }
    everything = env.run("audit", "list", "--json").stdout
    assert token.split("_", 2)[2] not in everything
    bad = env.run("audit", "list", "--since", "last week", check=False)
    assert bad.returncode == 2
    assert "--since" in bad.stderr


def test_verify_names_the_first_edited_event_and_prune_keeps_the_chain_verifiable(
    env: Env,
) -> None:
    """verify exits 0 with the count; an event rewritten behind the dropped trigger makes it
    exit 1 naming that event; prune removes events past QEXPORT_AUDIT_RETENTION days, records
    itself (in the pruned chain and the installation's), and verify passes again from the
    first kept event."""
    engine = env.store.engine
    log = SqlAuditLog(engine)
    old = datetime.now(UTC) - timedelta(days=30)
    for n in range(4):
        log.record(
            AuditEvent(
                at=old + timedelta(days=n * 10),
                workspace_id="acme",
                actor_kind=ActorKind.USER,
                actor_id="u1",
                action=Action.FILE_DOWNLOADED,
                target_kind="export",
                target_id=f"e{n}",
            )
        )
    ok = env.run("audit", "verify")
    assert "4 event(s) in 1 chain(s) verified" in ok.stdout
    ids = [e.id for e in log.chain("acme")]
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER audit_events_no_update")
        conn.execute(audit_events.update().where(audit_events.c.id == ids[1]).values(actor_id="x"))
    broken = env.run("audit", "verify", "--workspace", "acme", check=False)
    assert broken.returncode == 1
    assert f"event {ids[1]} (sequence 2, file.downloaded" in broken.stdout
    assert "1 event(s) before it verified" in broken.stdout

    with engine.begin() as conn:  # put it back, and the trigger with it
        conn.execute(audit_events.update().where(audit_events.c.id == ids[1]).values(actor_id="u1"))
        conn.execute(
            sa.text(
                "CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events"
                " BEGIN SELECT RAISE(ABORT, 'audit events are append-only'); END"
            )
        )
    env.extra["QEXPORT_AUDIT_RETENTION"] = "15"
    pruned = env.run("audit", "prune")
    assert "deleted 2 event(s) older than 15 days from 1 chain(s)" in pruned.stdout
    assert [e.target_id for e in log.chain("acme")] == ["e2", "e3", None]
    assert "4 event(s) in 2 chain(s) verified" in env.run("audit", "verify").stdout
    (prune,) = _list(env, "--action", "audit.pruned", "--workspace", "*")
    assert prune["workspace"] == "*"
    assert prune["actor"] == {"kind": "operator", "id": "cli"}


def test_a_local_download_is_recorded_like_any_other(env: Env, tmp_path: Path) -> None:
    """`exports download` on the local database, to a file and to stdout, leaves one
    `file.downloaded` event each, the operator's CLI acting for the requester, of that
    export, with its bytes, before any byte is written; someone else's download, refused,
    leaves none."""
    env.add_query("items", "SELECT 42 AS answer")
    export_id = env.request("items", "csv")
    assert env.start_worker("--drain").wait(timeout=120) == 0
    size = env.record(export_id).size_bytes
    env.run("exports", "download", export_id, "-o", str(tmp_path / "items.csv"))
    assert env.run("exports", "download", export_id, "-o", "-").stdout.splitlines() == [
        "answer",
        "42",
    ]
    env.extra["QEXPORT_USER"] = "mallory"
    assert env.run("exports", "download", export_id, "-o", "-", check=False).returncode == 1
    events = _list(env, "--action", "file.downloaded")
    assert len(events) == 2
    for happened in events:
        assert happened["actor"] == {"kind": "operator", "id": "alice"}
        assert happened["target"] == {"kind": "export", "id": export_id}
        assert happened["outcome"] == "ok"
        assert happened["details"] == {"bytes": size, "filename": env.record(export_id).filename}
    assert "verified" in env.run("audit", "verify").stdout
