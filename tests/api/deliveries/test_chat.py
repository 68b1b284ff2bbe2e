"""Slack and Microsoft Teams recipients: the message a channel gets, posted to a real HTTPS
receiver standing in for the incoming webhook, under the webhooks' egress policy and retries.

A Slack channel gets Block Kit blocks naming the export, its rows, size, expiry and a working
link; a Teams channel an Adaptive Card with the same facts; both hear of a failed export. An
internal URL is refused (when saved and when sent), a 5xx answer is retried, and the URL, a
secret, is masked for members who do not manage the schedule and kept out of the logs.
Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from qexport.deliveries.errors import DESTINATION_REFUSED
from qexport.domain.failures import FailureCode, readable_detail
from qexport.domain.humanize import human_size
from qexport.domain.schedules import DeliveryStatus, Outcome
from tests.api.conftest import Api
from tests.api.deliveries.env import ALICE, LINK, Deliveries
from tests.support.receivers import Hook, WebhookReceiver, running_receiver, tls_certificate

__all__ = ["tls_certificate"]  # the fixture, from tests/support/receivers.py

SLACK_PATH = "/services/T0001/B0002/s3cr3tSlackToken"
TEAMS_PATH = "/webhookb2/abc@def/IncomingWebhook/s3cr3tTeamsToken/xyz"
SECRET = "s3cr3t"  # noqa: S105 - the marker of a URL's secret part, looked for in output
MONDAYS = {"query_id": "q-orders-acme", "format": "csv", "cron": "0 8 * * 1"}
RETRIES = {"delivery_max_attempts": 3, "delivery_retry_base_seconds": 10}


@pytest.fixture
def chat(
    tls_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[WebhookReceiver]:
    """An HTTPS receiver at https://localhost:PORT whose certificate the sender trusts."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_certificate[0]))
    with running_receiver(tls=tls_certificate) as receiver:
        yield receiver


def _dispatch(env: Deliveries, *, allow: str = "localhost", rounds: int = 1) -> None:
    """Send what is due under QEXPORT_EGRESS_ALLOW=`allow`, letting backoffs pass between."""
    dispatcher = env.dispatcher(egress_allow=allow, **RETRIES)
    for _ in range(rounds):
        dispatcher.run_once()
        env.api.clock.advance(120)


def _body(hook: Hook) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(hook.body)
    return found


def _texts(node: Any) -> list[str]:
    """Every `text` string in a Block Kit tree, in order."""
    if isinstance(node, dict):
        here = [node["text"]] if isinstance(node.get("text"), str) else []
        return here + [t for value in node.values() for t in _texts(value)]
    if isinstance(node, list):
        return [t for item in node for t in _texts(item)]
    return []


def _headers(hook: Hook) -> dict[str, str]:
    return {k.lower(): v for k, v in hook.headers.items()}


# ---------------------------------------------------------------- the messages


def test_a_slack_channel_gets_blocks_with_the_export_its_facts_and_a_working_link(
    deliveries_both: Deliveries, chat: WebhookReceiver
) -> None:
    """One Block Kit message: a header naming the export, fields with rows, size, format and
    expiry, the public link as a Download button; the link downloads the file. No signature
    (Slack checks none), the delivery id as a header."""
    env = deliveries_both
    url = chat.url(SLACK_PATH)
    export = env.export({"slack": url})
    _dispatch(env)

    (delivery,) = env.of(export.id).values()
    assert (delivery.status, delivery.outcome) == (DeliveryStatus.SENT, Outcome.FILE)
    (hook,) = chat.at(SLACK_PATH)
    assert _headers(hook)["content-type"] == "application/json"
    assert _headers(hook)["x-qexport-delivery"] == delivery.id
    assert "x-qexport-signature" not in _headers(hook)
    message = _body(hook)
    assert message["text"] == "Export ready: orders"
    header, facts, link, context = message["blocks"]
    assert header == {
        "type": "header",
        "text": {"type": "plain_text", "text": "Export ready: orders"},
    }
    assert facts["type"] == "section"
    assert [f["text"] for f in facts["fields"]] == [
        "*Rows*\n100",
        f"*Size*\n{human_size(export.size_bytes or 0)}",
        "*Format*\ncsv",
        "*Expires*\n2026-01-12 09:00 UTC",
    ]
    button = link["accessory"]
    assert (button["type"], button["text"]["text"]) == ("button", "Download")
    assert LINK.fullmatch(button["url"])
    assert link["text"]["text"] == (
        f"<{button['url']}|orders_2026-01-05.csv> can be downloaded until 2026-01-12 09:00 UTC."
    )
    assert context["elements"][0]["text"] == f"Export {export.id}"
    assert env.open_link(button["url"]).content == env.file(export.id)


def test_a_teams_channel_gets_an_adaptive_card_with_the_same_facts(
    deliveries_both: Deliveries, chat: WebhookReceiver
) -> None:
    """A `message` whose one attachment is an Adaptive Card: a heading naming the export, a
    fact set with rows, size, format and expiry, and an Open URL action with the link."""
    env = deliveries_both
    export = env.export({"teams": chat.url(TEAMS_PATH)})
    _dispatch(env)

    (hook,) = chat.at(TEAMS_PATH)
    message = _body(hook)
    assert message["type"] == "message"
    (attachment,) = message["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert (card["type"], card["version"]) == ("AdaptiveCard", "1.4")
    heading, facts, footer = card["body"]
    assert (heading["type"], heading["text"]) == ("TextBlock", "Export ready: orders")
    assert facts == {
        "type": "FactSet",
        "facts": [
            {"title": "Rows", "value": "100"},
            {"title": "Size", "value": human_size(export.size_bytes or 0)},
            {"title": "Format", "value": "csv"},
            {"title": "Expires", "value": "2026-01-12 09:00 UTC"},
        ],
    }
    assert footer["text"] == f"Export {export.id}"
    (action,) = card["actions"]
    assert (action["type"], action["title"]) == ("Action.OpenUrl", "Download orders_2026-01-05.csv")
    assert env.open_link(action["url"]).content == env.file(export.id)


@pytest.mark.parametrize("channel", ["slack", "teams"])
def test_a_failed_export_is_announced_with_its_code_and_reason_and_no_link(
    deliveries_both: Deliveries, chat: WebhookReceiver, channel: str
) -> None:
    """The channel hears `Export failed: NAME` with the failure code and reason; no link."""
    env = deliveries_both
    env.api.add_query("broken", sql="SELECT * FROM no_such_table", parameters=())
    export = env.export({channel: chat.url("/in")}, query="q-broken-acme")
    assert export.failure_code == "query_invalid"
    _dispatch(env)

    (delivery,) = env.of(export.id).values()
    assert (delivery.status, delivery.outcome) == (DeliveryStatus.SENT, Outcome.FAILURE)
    message = _body(chat.at("/in")[0])
    texts = _texts(message) if channel == "slack" else _texts(message["attachments"])
    assert "Export failed: broken" in texts
    assert readable_detail(export.failure_detail) in texts
    assert "pg_tables" not in json.dumps(message)  # the engine's internal suggestion
    assert "query_invalid" in json.dumps(message)
    assert not LINK.search(json.dumps(message))


def test_names_are_shown_as_written_never_as_mentions_or_links(
    deliveries_both: Deliveries, chat: WebhookReceiver
) -> None:
    """A query named `<!here> [x](https://e.io)` pings no one in Slack (mrkdwn escaped,
    header plain text) and links nowhere in Teams (brackets escaped)."""
    env = deliveries_both
    name = "<!here> [x](https://e.io)"
    query = env.api.add_query(name)
    env.export({"slack": chat.url("/s")}, {"teams": chat.url("/t")}, query=query.id)
    _dispatch(env)

    slack = _body(chat.at("/s")[0])
    assert slack["text"] == "Export ready: &lt;!here&gt; [x](https://e.io)"
    assert slack["blocks"][0]["text"] == {"type": "plain_text", "text": f"Export ready: {name}"}
    assert "<!here>" not in json.dumps(slack["text"])
    card = _body(chat.at("/t")[0])["attachments"][0]["content"]
    assert card["body"][0]["text"] == r"Export ready: <!here> \[x\](https://e.io)"


# ---------------------------------------------------------------- egress and retries


@pytest.mark.parametrize("channel", ["slack", "teams"])
def test_an_internal_url_is_refused_when_sent_and_nothing_arrives(
    deliveries_both: Deliveries, chat: WebhookReceiver, channel: str
) -> None:
    """Under the default egress policy a Slack or Teams URL on loopback fails at once
    `destination_refused`, and the listener receives nothing."""
    env = deliveries_both
    export = env.export({channel: chat.url("/in")})
    _dispatch(env, allow="", rounds=3)

    (delivery,) = env.of(export.id).values()
    assert (delivery.status, delivery.attempt) == (DeliveryStatus.FAILED, 1)
    assert delivery.failure_code is FailureCode.DESTINATION_REFUSED
    assert delivery.last_error == DESTINATION_REFUSED
    assert chat.received == []


@pytest.mark.parametrize("channel", ["slack", "teams"])
def test_an_internal_url_is_refused_when_saved(api_both: Api, channel: str) -> None:
    """A schedule naming a Slack or Teams URL on an internal address is 422 naming the field;
    nothing is saved."""
    api_both.member(ALICE, "editor")
    api_both.add_query("orders")
    recipients = [{"email": "ops@example.com"}, {channel: "https://169.254.169.254/hook"}]
    response = api_both.post("/api/v1/schedules", ALICE, json={**MONDAYS, "recipients": recipients})

    assert response.status_code == 422, response.text
    assert response.json()["field"] == f"recipients[1].{channel}"
    assert api_both.get("/api/v1/schedules", ALICE).json()["items"] == []


@pytest.mark.parametrize("channel", ["slack", "teams"])
def test_a_channel_answering_5xx_is_retried_until_it_takes_the_message(
    deliveries_both: Deliveries, chat: WebhookReceiver, channel: str
) -> None:
    """503, 500, then 200: sent on attempt 3 with the same message and delivery id each time."""
    env = deliveries_both
    chat.script["/flaky"] = [503, 500]
    export = env.export({channel: chat.url("/flaky")})
    _dispatch(env, rounds=5)

    (delivery,) = env.of(export.id).values()
    assert (delivery.status, delivery.attempt) == (DeliveryStatus.SENT, 3)
    hooks = chat.at("/flaky")
    assert [h.status for h in hooks] == [503, 500, 200]
    assert len({h.body for h in hooks}) == 1
    assert {_headers(h)["x-qexport-delivery"] for h in hooks} == {delivery.id}


def test_a_revoked_slack_webhook_fails_at_once(
    deliveries_both: Deliveries, chat: WebhookReceiver
) -> None:
    """Slack answers 404 for a removed webhook: asking again cannot help, so one attempt."""
    env = deliveries_both
    chat.script["/gone"] = [404] * 9
    export = env.export({"slack": chat.url("/gone")})
    _dispatch(env, rounds=3)

    (delivery,) = env.of(export.id).values()
    assert (delivery.status, delivery.attempt) == (DeliveryStatus.FAILED, 1)
    assert delivery.last_error == "the receiver answered HTTP 404"


def test_an_admins_webhook_hosts_bind_slack_and_teams_too(
    deliveries_both: Deliveries, chat: WebhookReceiver
) -> None:
    """With the workspace's webhook hosts set to hooks.slack.com only, a Teams URL elsewhere
    fails `destination_refused` when sent and receives nothing."""
    env = deliveries_both
    env.api.context.accounts.set_workspace_webhook_hosts("acme", ("hooks.slack.com",))
    export = env.export({"teams": chat.url("/in")})
    _dispatch(env)

    (delivery,) = env.of(export.id).values()
    assert delivery.failure_code is FailureCode.DESTINATION_REFUSED
    assert chat.received == []


# ---------------------------------------------------------------- the URL is a secret


def test_the_url_is_masked_for_members_who_do_not_manage_the_schedule(api_both: Api) -> None:
    """The owner and admins read the Slack and Teams URLs whole; another member reads their
    host names only."""
    api_both.member(ALICE, "editor")
    api_both.member("bob@acme.test", "editor")
    api_both.member("admin@acme.test", "admin")
    api_both.add_query("orders")
    recipients = [
        {"slack": f"https://hooks.slack.com{SLACK_PATH}"},
        {"teams": f"https://acme.webhook.office.com{TEAMS_PATH}"},
    ]
    created = api_both.post("/api/v1/schedules", ALICE, json={**MONDAYS, "recipients": recipients})
    assert created.status_code == 201, created.text
    path = f"/api/v1/schedules/{created.json()['id']}"

    for who in (ALICE, "admin@acme.test"):
        assert api_both.get(path, who).json()["recipients"] == recipients
    seen = api_both.get(path, "bob@acme.test").json()["recipients"]
    assert seen == [
        {"slack": "https://hooks.slack.com/***"},
        {"teams": "https://acme.webhook.office.com/***"},
    ]
    listed = api_both.get("/api/v1/schedules", "bob@acme.test").json()["items"][0]["recipients"]
    assert listed == seen


def test_the_url_stays_out_of_the_logs(deliveries_both: Deliveries, chat: WebhookReceiver) -> None:
    """Sending, retrying and failing log the delivery, never the URL's secret path."""
    env = deliveries_both
    chat.script[SLACK_PATH] = [500, 404]
    with capture_logs() as logs:
        export = env.export({"slack": chat.url(SLACK_PATH)})
        _dispatch(env, rounds=3)

    assert {d.status for d in env.of(export.id).values()} == {DeliveryStatus.FAILED}
    assert {"delivery_retrying", "delivery_failed"} <= {entry["event"] for entry in logs}
    assert SECRET not in repr(logs)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("recipient", "field", "says"),
    [
        ({"slack": "http://hooks.slack.com/services/T/B/s3cr3t"}, "recipients[0].slack", "https"),
        ({"teams": "ftp://acme.webhook.office.com/s3cr3t"}, "recipients[0].teams", "https"),
        ({"slack": "https://u:s3cr3t@hooks.slack.com/x"}, "recipients[0].slack", "password"),
        ({"teams": "https:///s3cr3t"}, "recipients[0].teams", "with a host"),
        ({}, "recipients.0", "exactly one of"),
        (
            {"slack": "https://hooks.slack.com/a", "teams": "https://x.webhook.office.com/b"},
            "recipients.0",
            "exactly one of",
        ),
        ({"discord": "https://discord.com/api/webhooks/1"}, "recipients.0", "exactly one of"),
    ],
)
def test_a_bad_chat_recipient_is_422_naming_the_field_without_echoing_the_url(
    api_both: Api, recipient: dict[str, str], field: str, says: str
) -> None:
    """Not https, a password, no host, no channel, two channels, an unknown one: each a 422
    naming the recipient's field, saying what is wrong, and never repeating a URL's secret."""
    api_both.member(ALICE, "editor")
    api_both.add_query("orders")
    response = api_both.post(
        "/api/v1/schedules", ALICE, json={**MONDAYS, "recipients": [recipient]}
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == field
    assert says in problem["detail"]
    assert SECRET not in response.text


def test_a_viewer_may_not_name_a_slack_channel(api_both: Api) -> None:
    """A viewer's export may notify only their own email: a Slack URL is 403."""
    api_both.member("vera@acme.test", "viewer")
    api_both.add_query("orders")
    response = api_both.post(
        "/api/v1/exports",
        "vera@acme.test",
        json={
            "query_id": "q-orders-acme",
            "format": "csv",
            "notify": [{"slack": "https://hooks.slack.com/services/T/B/x"}],
        },
    )
    assert response.status_code == 403, response.text
    assert "Slack or Teams" in response.json()["detail"]
