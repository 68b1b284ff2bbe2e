"""Sending a failed delivery again (POST /api/v1/exports/{id}/deliveries/{delivery_id}/retry):
the same delivery goes back to waiting with a fresh attempt budget and is sent once more,
by its export's owner or a workspace admin only, and never through rights they lack now."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from qexport.domain.accounts import Role
from qexport.domain.schedules import DeliveryStatus
from tests.api.conftest import api_on
from tests.api.deliveries.env import ALICE, Deliveries, deliveries_over

RETRIES = {"delivery_max_attempts": 2, "delivery_retry_base_seconds": 10}
MAIL = "team@example.com"


@pytest.fixture(params=["sqlite", "postgresql"])
def resend_deliveries(
    request: pytest.FixtureRequest, tmp_path: Path, source_template: Path
) -> Iterator[Deliveries]:
    """`deliveries` on SQLite and on PostgreSQL, with the API's egress policy opened for the
    receivers on 127.0.0.1 as the dispatcher's settings are: sending again checks a webhook as
    saving does."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    with api_on(tmp_path, source_template, url, egress_allow="127.0.0.1/32") as api:
        yield from deliveries_over(api, request)


def _retry(env: Deliveries, export_id: str, delivery_id: str, who: str = ALICE) -> Any:
    return env.api.post(f"/api/v1/exports/{export_id}/deliveries/{delivery_id}/retry", who)


def _dispatch_until_settled(env: Deliveries, **settings: Any) -> None:
    dispatcher = env.dispatcher(**{**RETRIES, **settings})
    for _ in range(4):
        dispatcher.run_once()
        env.api.clock.advance(120)


def test_a_failed_webhook_sent_again_is_delivered_once_with_the_same_key(
    resend_deliveries: Deliveries,
) -> None:
    """A receiver down for both attempts fails the delivery; sent again, it is waiting, due
    now, with a fresh budget, then sent once (attempt 3) under the same idempotency key; a
    sent delivery cannot be sent again (409)."""
    env = resend_deliveries
    env.hooks.script["/flaky"] = [503, 503]
    flaky = env.hooks.url("/flaky")
    export = env.export({"webhook": flaky})
    _dispatch_until_settled(env)
    failed = env.of(export.id)[flaky]
    assert (failed.status, failed.attempt) == (DeliveryStatus.FAILED, 2)

    response = _retry(env, export.id, failed.id)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["id"], body["status"], body["attempts"]) == (failed.id, "waiting", 2)
    assert body["resent_at"] is not None
    listed = env.api.get(f"/api/v1/exports/{export.id}/deliveries", ALICE).json()["items"]
    assert listed[0]["status"] == "waiting"

    _dispatch_until_settled(env)
    sent = env.of(export.id)[flaky]
    assert (sent.status, sent.attempt, sent.tries) == (DeliveryStatus.SENT, 3, 1)
    assert [h.status for h in env.hooks.at("/flaky")] == [503, 503, 200]
    assert {h.headers["X-QExport-Delivery"] for h in env.hooks.at("/flaky")} == {failed.id}
    again = _retry(env, export.id, failed.id)
    assert again.status_code == 409
    assert "only a failed delivery can be sent again" in again.json()["detail"]


def test_an_email_without_smtp_fails_with_its_reason_and_can_be_sent_again(
    resend_deliveries: Deliveries,
) -> None:
    """With no SMTP server configured the email fails at once with a reason that says so;
    once the server has one, sending it again delivers it."""
    env = resend_deliveries
    export = env.export({"email": MAIL})
    _dispatch_until_settled(env, smtp_url="")
    (failed,) = env.of(export.id).values()
    assert failed.status is DeliveryStatus.FAILED
    assert failed.last_error == "email is not configured (set QEXPORT_SMTP_URL)"
    assert _retry(env, export.id, failed.id).status_code == 200
    _dispatch_until_settled(env)
    assert env.of(export.id)[MAIL].status is DeliveryStatus.SENT
    assert len(env.smtp.to(MAIL)) == 1


def test_only_the_owner_or_an_admin_sends_again_and_with_rights_held_now(
    resend_deliveries: Deliveries,
) -> None:
    """Another workspace's member and a viewer who is not the owner get 404 (as for a missing
    export); an admin may; an owner demoted to viewer may not send to a webhook (403), and
    nothing changes when refused."""
    env = resend_deliveries
    env.hooks.script["/down"] = [503] * 99
    down = env.hooks.url("/down")
    export = env.export({"webhook": down})
    _dispatch_until_settled(env)
    failed = env.of(export.id)[down]
    assert failed.status is DeliveryStatus.FAILED
    env.api.member("viola@acme.test", "viewer")
    env.api.member("mallory@other.test", "admin", workspace="other")
    for who in ("viola@acme.test", "mallory@other.test"):
        refused = _retry(env, export.id, failed.id, who)
        assert refused.status_code == 404, who
    missing = _retry(env, export.id, "00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    env.api.context.accounts.set_role("acme", env.api.user_id(ALICE), Role.VIEWER)
    demoted = _retry(env, export.id, failed.id)
    assert demoted.status_code == 403
    assert "only editors and admins may name webhooks" in demoted.json()["detail"]
    assert env.of(export.id)[down].status is DeliveryStatus.FAILED
    env.api.member("ada@acme.test", "admin")
    assert _retry(env, export.id, failed.id, "ada@acme.test").status_code == 200
    assert env.of(export.id)[down].resent_by == env.api.user_id("ada@acme.test")


def test_nothing_is_sent_again_once_the_file_expired_or_its_link_was_revoked(
    resend_deliveries: Deliveries,
) -> None:
    """Its public link revoked, a delivery would carry a dead link: 409; past the file's
    expiry: 409 too (request the export again instead)."""
    env = resend_deliveries
    env.hooks.script["/down"] = [503] * 99
    down = env.hooks.url("/down")
    export = env.export({"webhook": down})
    _dispatch_until_settled(env)
    failed = env.of(export.id)[down]
    (link,) = env.api.get(f"/api/v1/exports/{export.id}/links", ALICE).json()["items"]
    assert env.api.delete(f"/api/v1/links/{link['id']}", ALICE).status_code == 204
    revoked = _retry(env, export.id, failed.id)
    assert revoked.status_code == 409
    assert "link was revoked" in revoked.json()["detail"]
    assert export.expires_at is not None
    env.api.clock.advance((export.expires_at - env.api.clock.now() + timedelta(1)).total_seconds())
    expired = _retry(env, export.id, failed.id)
    assert expired.status_code == 409
    assert "expired" in expired.json()["detail"]
    assert env.of(export.id)[down].status is DeliveryStatus.FAILED
