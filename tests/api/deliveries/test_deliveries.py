"""Deliveries of settled exports to a real SMTP server and a real HTTP receiver: what each
recipient gets for a file, a failure and an expiry, and the idempotency key they carry."""

from __future__ import annotations

import json
from typing import Any

from qexport.deliveries.dispatch import DeliveryDispatcher
from qexport.domain.failures import readable_detail
from qexport.domain.schedules import DeliveryStatus, Outcome
from tests.api.deliveries.env import LINK, Deliveries
from tests.support.receivers import Hook

MAIL = "team@example.com"
DAY = 24 * 3600


def header(hook: Hook, name: str) -> str:
    return {k.lower(): v for k, v in hook.headers.items()}[name.lower()]


def payload(hook: Hook) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(hook.body)
    return body


def test_a_succeeded_export_reaches_every_recipient_with_a_working_link(
    deliveries: Deliveries,
) -> None:
    """The mail names the export, its rows, size and expiry and carries a link that downloads
    the very file; the webhook carries the same facts; both carry the delivery id."""
    env = deliveries
    export = env.export({"email": MAIL}, {"webhook": env.hooks.url("/hook")})
    assert env.dispatcher().run_once() == 2

    by_target = env.of(export.id)
    assert {d.status for d in by_target.values()} == {DeliveryStatus.SENT}
    assert {d.outcome for d in by_target.values()} == {Outcome.FILE}
    (mail,) = env.smtp.to(MAIL)
    assert mail.sender == "qexport@example.com"
    assert mail.message["Subject"] == "Export ready: orders (100 rows, csv)"
    assert mail.message["X-QExport-Delivery"] == by_target[MAIL].id
    assert mail.message["Message-ID"] == f"<{by_target[MAIL].id}@qexport>"
    text = mail.text
    assert 'query "orders"' in text
    assert "orders_2026-01-05.csv (csv)" in text
    assert "Rows:      100" in text
    assert "KB" in text
    assert "Expires:   2026-01-12 09:00 UTC" in text
    assert mail.attachments() == []  # links only by default
    (link,) = LINK.findall(text)
    response = env.open_link(link)
    assert response.status_code == 200
    assert response.content == env.file(export.id)

    (hook,) = env.hooks.at("/hook")
    assert header(hook, "Content-Type") == "application/json"
    assert header(hook, "User-Agent") == "qexport"
    assert header(hook, "X-QExport-Delivery") == by_target[env.hooks.url("/hook")].id
    body = payload(hook)
    assert body == {
        "delivery_id": by_target[env.hooks.url("/hook")].id,
        "export_id": export.id,
        "status": "succeeded",
        "subject": {"type": "query", "id": "q-orders-acme", "name": "orders"},
        "format": "csv",
        "filename": "orders_2026-01-05.csv",
        "rows": 100,
        "size_bytes": export.size_bytes,
        "sha256": export.sha256,
        "expires_at": "2026-01-12T09:00:00Z",
        "link": body["link"],
        "failure": None,
        "schedule_id": None,
    }
    assert env.open_link(body["link"]).content == env.file(export.id)
    assert body["link"] != link  # each recipient has its own link, revocable on its own


def test_a_failed_export_sends_its_code_and_reason_and_no_file(deliveries: Deliveries) -> None:
    """Recipients of a failed export learn why (code and the readable reason, without the
    engine's internal suggestion), with no link and no file."""
    env = deliveries
    env.api.add_query("broken", sql="SELECT * FROM no_such_table", parameters=())
    export = env.export({"email": MAIL}, {"webhook": env.hooks.url()}, query="q-broken-acme")
    assert export.failure_code == "query_invalid"
    assert env.dispatcher(email_attachment_max_bytes=10**6).run_once() == 2

    assert {d.outcome for d in env.of(export.id).values()} == {Outcome.FAILURE}
    (mail,) = env.smtp.to(MAIL)
    assert mail.message["Subject"] == "Export failed: broken"
    assert "query_invalid" in mail.text
    reason = readable_detail(export.failure_detail)
    assert "no_such_table does not exist" in reason
    assert reason in mail.text
    assert "pg_tables" not in mail.text
    assert not LINK.search(mail.text)
    assert mail.attachments() == []
    body = payload(env.hooks.at("/hook")[0])
    assert body["status"] == "failed"
    assert body["link"] is None
    assert body["rows"] is None
    assert body["failure"] == {"code": "query_invalid", "detail": reason}


def test_the_link_in_the_mail_shows_the_invalid_link_page_once_the_file_expired(
    deliveries: Deliveries,
) -> None:
    """The mailed link works until the export expires, then answers the invalid-link page."""
    env = deliveries
    export = env.export({"email": MAIL})
    env.dispatcher().run_once()
    (link,) = LINK.findall(env.smtp.to(MAIL)[0].text)
    assert env.open_link(link).status_code == 200

    assert export.expires_at is not None
    env.api.clock.advance((export.expires_at - env.api.clock.now()).total_seconds() + 1)
    gone = env.open_link(link)
    assert gone.status_code == 410
    assert b"This link is not valid" in gone.content


def test_an_export_that_expired_before_delivery_is_announced_as_expired(
    deliveries: Deliveries,
) -> None:
    """A delivery first attempted after the file expired says so, instead of a dead link."""
    env = deliveries
    export = env.export({"email": MAIL}, {"webhook": env.hooks.url()})
    env.api.clock.advance(8 * DAY)
    env.dispatcher().run_once()

    assert {d.outcome for d in env.of(export.id).values()} == {Outcome.EXPIRED}
    (mail,) = env.smtp.to(MAIL)
    assert mail.message["Subject"] == "Export expired before delivery: orders"
    assert not LINK.search(mail.text)
    body = payload(env.hooks.at("/hook")[0])
    assert (body["status"], body["link"]) == ("expired", None)


def test_a_small_file_is_attached_and_a_large_one_is_not(deliveries: Deliveries) -> None:
    """Files up to email_attachment_max_bytes travel in the mail; larger ones as a link only."""
    env = deliveries
    small = env.export({"email": "small@example.com"})
    env.dispatcher(email_attachment_max_bytes=10**6).run_once()
    large = env.export({"email": "large@example.com"})
    env.dispatcher(email_attachment_max_bytes=10).run_once()

    (mail,) = env.smtp.to("small@example.com")
    (attached,) = mail.message.iter_attachments()
    assert attached.get_filename() == "orders_2026-01-05.csv"
    assert attached.get_content_type() == "text/csv"
    assert attached.get_payload(decode=True) == env.file(small.id)  # byte for byte
    (mail,) = env.smtp.to("large@example.com")
    assert mail.attachments() == []
    assert LINK.search(mail.text)
    assert large.size_bytes is not None
    assert large.size_bytes > 10


def test_a_sender_that_died_after_sending_repeats_the_same_idempotency_key(
    deliveries: Deliveries,
) -> None:
    """At least once underneath: a delivery sent but never recorded is sent again once its
    lease expires, with the same key (and link), so the receiver can drop the repeat."""
    env = deliveries
    export = env.export({"email": MAIL}, {"webhook": env.hooks.url()})
    store = env.api.context.deliveries

    class DiesBeforeRecording:
        """The delivery store of a process killed between sending and recording it."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def mark_sent(self, *args: Any, **kwargs: Any) -> bool:
            return True

    settings = env.settings()
    doomed = DeliveryDispatcher(
        env.api.deps.exports,
        DiesBeforeRecording(),
        env.api.context.schedules,
        env.api.context.accounts,
        env.api.deps.objects,
        env.api.clock,
        settings,
    )
    env.opened.append(doomed)
    assert doomed.run_once() == 2
    assert env.dispatcher().run_once() == 0  # still leased to the dead sender
    env.api.clock.advance(settings.lease_seconds + 1)
    assert env.dispatcher().run_once() == 2

    by_target = env.of(export.id)
    assert {(d.status, d.attempt) for d in by_target.values()} == {(DeliveryStatus.SENT, 2)}
    first, second = env.hooks.at("/hook")
    assert header(first, "X-QExport-Delivery") == header(second, "X-QExport-Delivery")
    assert payload(first)["link"] == payload(second)["link"]
    seen = {header(h, "X-QExport-Delivery") for h in (first, second)}
    assert seen == {by_target[env.hooks.url()].id}  # one delivery once the repeat is dropped
    mails = env.smtp.to(MAIL)
    assert len(mails) == 2
    assert {m.message["X-QExport-Delivery"] for m in mails} == {by_target[MAIL].id}
    assert {m.message["Message-ID"] for m in mails} == {f"<{by_target[MAIL].id}@qexport>"}
    assert LINK.findall(mails[0].text) == LINK.findall(mails[1].text)


def test_email_without_smtp_configured_fails_with_the_setting_to_fix(
    deliveries: Deliveries,
) -> None:
    """An email recipient on an installation without SMTP fails at once, naming the setting;
    webhooks still go out."""
    env = deliveries
    export = env.export({"email": MAIL}, {"webhook": env.hooks.url()})
    env.dispatcher(smtp_url="").run_once()

    by_target = env.of(export.id)
    assert by_target[MAIL].status is DeliveryStatus.FAILED
    assert by_target[MAIL].last_error == "email is not configured (set QEXPORT_SMTP_URL)"
    assert by_target[env.hooks.url()].status is DeliveryStatus.SENT
