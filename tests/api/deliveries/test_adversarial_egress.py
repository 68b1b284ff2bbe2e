"""Members cannot make the server connect to the inside (server-side request forgery).

A real webhook receiver listens on 127.0.0.1 (and one on ::1): under the default egress
policy no form of a loopback address reaches it, whether the recipient is refused when saved
(422 naming the field) or, saved earlier, when it is sent (`destination_refused`, at once);
`QEXPORT_EGRESS_ALLOW` lets the same delivery arrive; redirects are not followed; what
members read of a failure names no address or port. Viewers notify only themselves, an admin
may restrict webhook hosts, and recipients are masked for members who do not manage the
schedule. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qexport.deliveries.errors import DESTINATION_REFUSED
from qexport.domain.failures import FailureCode
from qexport.domain.schedules import DeliveryStatus
from tests.api.conftest import SOURCE, Api, api_on
from tests.api.deliveries.env import ALICE, Deliveries
from tests.support.receivers import WebhookReceiver, free_port, running_receiver

VERA = "vera@acme.test"  # a viewer
ADMIN = "admin@acme.test"
# Every way of writing "this machine" that getaddrinfo accepts, and a name resolving to it.
LOOPBACK_FORMS = [
    "127.0.0.1",
    "localhost",
    "127.1",
    "0x7f000001",
    "2130706433",
    "017700000001",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "0.0.0.0",  # noqa: S104 - a destination under test, nothing binds to it
]
UNSPECIFIED = "0.0.0.0"  # noqa: S104 - connecting to it reaches this machine's listeners
MONDAYS = {"query_id": "q-orders-acme", "format": "csv", "cron": "0 8 * * 1"}


def _url(receiver: WebhookReceiver, host: str, path: str = "/hook") -> str:
    return f"http://{host}:{receiver.port}{path}"


def _send(env: Deliveries, url: str, *, allow: str) -> Any:
    """An export notifying `url` (saved without the save-time check, as if the name resolved
    elsewhere then), dispatched under QEXPORT_EGRESS_ALLOW=`allow`; its one delivery."""
    export = env.export({"webhook": url})
    dispatcher = env.dispatcher(egress_allow=allow, delivery_retry_base_seconds=1)
    for _ in range(3):
        dispatcher.run_once()
        env.api.clock.advance(60)
    (delivery,) = env.of(export.id).values()
    return delivery


def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


# ---------------------------------------------------------------- send time


@pytest.mark.parametrize("host", LOOPBACK_FORMS)
def test_no_loopback_form_reaches_a_listener_under_the_default_policy(
    deliveries_both: Deliveries, host: str
) -> None:
    """Sent to any spelling of loopback, the delivery fails at once `destination_refused` and
    the listener on 127.0.0.1 receives nothing."""
    delivery = _send(deliveries_both, _url(deliveries_both.hooks, host), allow="")

    assert (delivery.status, delivery.attempt) == (DeliveryStatus.FAILED, 1)
    assert delivery.failure_code is FailureCode.DESTINATION_REFUSED
    assert delivery.last_error == DESTINATION_REFUSED
    assert deliveries_both.hooks.received == []


def test_ipv6_loopback_reaches_no_listener_on_it(deliveries_both: Deliveries) -> None:
    """`[::1]` is refused too: a listener on ::1 receives nothing."""
    with running_receiver("::1") as six:
        delivery = _send(deliveries_both, six.url(), allow="")
        assert delivery.failure_code is FailureCode.DESTINATION_REFUSED
        assert six.received == []


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[fe80::1]/"]
)
def test_metadata_and_private_addresses_are_refused_before_connecting(
    deliveries_both: Deliveries, url: str
) -> None:
    """The cloud metadata service and private or link-local addresses are refused outright,
    not tried and timed out."""
    delivery = _send(deliveries_both, url, allow="")
    assert (delivery.status, delivery.failure_code) == (
        DeliveryStatus.FAILED,
        FailureCode.DESTINATION_REFUSED,
    )


@pytest.mark.parametrize("host", [h for h in LOOPBACK_FORMS if h != UNSPECIFIED])
def test_the_allow_list_lets_the_same_delivery_arrive(
    deliveries_both: Deliveries, host: str
) -> None:
    """With QEXPORT_EGRESS_ALLOW=127.0.0.1/32 the same delivery reaches the listener once,
    with the name it was given in the Host header."""
    delivery = _send(deliveries_both, _url(deliveries_both.hooks, host), allow="127.0.0.1/32")

    assert delivery.status is DeliveryStatus.SENT
    (hook,) = deliveries_both.hooks.received
    assert hook.headers["Host"] == f"{host}:{deliveries_both.hooks.port}"


def test_an_allowed_host_name_opens_that_name_only(deliveries_both: Deliveries) -> None:
    """QEXPORT_EGRESS_ALLOW=localhost opens the name `localhost`, not 127.0.0.1 itself."""
    named = _send(
        deliveries_both, _url(deliveries_both.hooks, "localhost", "/named"), allow="localhost"
    )
    literal = _send(
        deliveries_both, _url(deliveries_both.hooks, "127.0.0.1", "/ip"), allow="localhost"
    )

    assert named.status is DeliveryStatus.SENT
    assert literal.failure_code is FailureCode.DESTINATION_REFUSED
    assert [h.path for h in deliveries_both.hooks.received] == ["/named"]


def test_a_redirect_to_a_refused_address_is_not_followed(deliveries_both: Deliveries) -> None:
    """An allowed receiver answering 302 to another local listener: the delivery fails with
    the answer, and the redirect's target receives nothing."""
    with running_receiver("127.0.0.2") as inside:
        deliveries_both.hooks.script["/bounce"] = [302] * 9
        deliveries_both.hooks.redirect["/bounce"] = inside.url("/steal")
        delivery = _send(
            deliveries_both, deliveries_both.hooks.url("/bounce"), allow="127.0.0.1/32"
        )

        assert (delivery.status, delivery.attempt) == (DeliveryStatus.FAILED, 1)
        assert delivery.last_error == "the receiver answered HTTP 302 (redirects are not followed)"
        assert inside.received == []


def test_a_failure_names_no_address_or_port(deliveries_both: Deliveries) -> None:
    """A closed port on an allowed address reads "could not connect", without the address or
    port: the error cannot be used to scan ports."""
    closed = free_port()
    delivery = _send(deliveries_both, f"http://127.0.0.1:{closed}/x", allow="127.0.0.1/32")

    assert (delivery.status, delivery.failure_code) == (DeliveryStatus.WAITING, None)  # retried
    assert delivery.last_error == "could not connect to the receiver"


# ---------------------------------------------------------------- save time


@pytest.mark.parametrize("host", [*LOOPBACK_FORMS, "[::1]", "169.254.169.254", "192.168.1.1"])
def test_a_schedule_recipient_pointing_inside_is_refused_when_saved(
    api_both: Api, host: str
) -> None:
    """422 naming the recipient's field, for a literal address in any form or a name that
    resolves to loopback; nothing is saved."""
    api_both.member(ALICE, "editor")
    api_both.add_query("orders")
    recipients = [{"email": "ops@example.com"}, {"webhook": f"http://{host}:8080/in"}]
    response = api_both.post("/api/v1/schedules", ALICE, json={**MONDAYS, "recipients": recipients})

    assert _problem(response, 422)["field"] == "recipients[1].webhook"
    assert api_both.get("/api/v1/schedules", ALICE).json()["items"] == []


def test_changing_recipients_to_an_inside_address_is_refused(api_both: Api) -> None:
    """PATCH with a webhook to the metadata service is 422 naming the field; the schedule
    keeps its recipients."""
    api_both.member(ALICE, "editor")
    api_both.add_query("orders")
    created = api_both.post(
        "/api/v1/schedules", ALICE, json={**MONDAYS, "recipients": [{"email": "a@example.com"}]}
    ).json()
    response = api_both.client.patch(
        f"/api/v1/schedules/{created['id']}",
        headers=api_both.headers(ALICE),
        json={"recipients": [{"webhook": "http://169.254.169.254/latest"}]},
    )
    assert _problem(response, 422)["field"] == "recipients[0].webhook"
    assert api_both.get(f"/api/v1/schedules/{created['id']}", ALICE).json() == created


def test_notify_pointing_inside_is_refused_and_records_nothing(api_both: Api) -> None:
    """POST /exports with `notify` to loopback is 422 naming `notify[0].webhook`; no export."""
    api_both.member(ALICE, "editor")
    api_both.add_query("orders")
    response = api_both.post(
        "/api/v1/exports",
        ALICE,
        json={
            "query_id": "q-orders-acme",
            "format": "csv",
            "notify": [{"webhook": "http://127.1/"}],
        },
    )
    assert _problem(response, 422)["field"] == "notify[0].webhook"
    assert api_both.get("/api/v1/exports", ALICE).json()["items"] == []


def test_the_operator_allow_list_opens_saving_too(tmp_path: Path, source_template: Path) -> None:
    """With QEXPORT_EGRESS_ALLOW=127.0.0.1/32 a webhook to 127.0.0.1 is saved; 10.0.0.1 still
    is not."""
    with api_on(tmp_path, source_template, egress_allow="127.0.0.1/32") as api:
        api.member(ALICE, "editor")
        api.add_query("orders")
        ok = api.post(
            "/api/v1/schedules",
            ALICE,
            json={**MONDAYS, "recipients": [{"webhook": "http://127.0.0.1:9/in"}]},
        )
        refused = api.post(
            "/api/v1/schedules",
            ALICE,
            json={**MONDAYS, "recipients": [{"webhook": "http://10.0.0.1/in"}]},
        )
    assert ok.status_code == 201, ok.text
    assert _problem(refused, 422)["field"] == "recipients[0].webhook"


# ---------------------------------------------------------------- who may name recipients


def test_a_viewer_may_notify_only_their_own_address(api_both: Api) -> None:
    """A viewer's export may notify their own email; another address or any webhook is 403
    and records nothing."""
    api_both.member(VERA, "viewer")
    api_both.add_query("orders")
    body = {"query_id": "q-orders-acme", "format": "csv"}

    own = api_both.post("/api/v1/exports", VERA, json={**body, "notify": [{"email": VERA.upper()}]})
    other = api_both.post(
        "/api/v1/exports", VERA, json={**body, "notify": [{"email": "boss@acme.test"}]}
    )
    hook = api_both.post(
        "/api/v1/exports",
        VERA,
        json={**body, "notify": [{"webhook": "https://hooks.example.com/x"}]},
    )

    assert own.status_code == 202, own.text
    assert _problem(other, 403)["code"] == "forbidden"
    assert _problem(hook, 403)["code"] == "forbidden"
    assert len(api_both.get("/api/v1/exports", VERA).json()["items"]) == 1


# ---------------------------------------------------------------- webhook hosts


def _hosts(api: Api, who: str, hosts: Any, workspace: str = "acme") -> Any:
    return api.client.patch(
        f"/api/v1/workspaces/{workspace}", headers=api.headers(who), json={"webhook_hosts": hosts}
    )


def test_an_admin_restricts_webhooks_to_listed_hosts(api_both: Api) -> None:
    """After PATCH webhook_hosts, a webhook to another host is 422 naming the field and one to
    a listed host is saved; null lifts the restriction."""
    api_both.member(ADMIN, "admin")
    api_both.member(ALICE, "editor")
    api_both.add_query("orders")

    set_ = _hosts(api_both, ADMIN, ["Hooks.Example.com."])
    assert set_.status_code == 200, set_.text
    assert set_.json()["webhook_hosts"] == ["hooks.example.com"]

    def save(url: str) -> Any:
        recipients = [{"webhook": url}]
        return api_both.post("/api/v1/schedules", ALICE, json={**MONDAYS, "recipients": recipients})

    assert _problem(save("https://elsewhere.example.com/in"), 422)["field"] == (
        "recipients[0].webhook"
    )
    assert save("https://hooks.example.com/in").status_code == 201
    assert _hosts(api_both, ADMIN, None).json()["webhook_hosts"] is None
    assert save("https://elsewhere.example.com/in").status_code == 201


def test_only_an_admin_of_the_workspace_restricts_hosts(api_both: Api) -> None:
    """An editor is 403, another workspace is 404, a malformed host is 422 naming it."""
    api_both.member(ADMIN, "admin")
    api_both.member(ALICE, "editor")
    api_both.member("otto@other.test", "admin", workspace="other")

    assert _problem(_hosts(api_both, ALICE, ["hooks.example.com"]), 403)["code"] == "forbidden"
    assert _hosts(api_both, ADMIN, ["x"], workspace="other").status_code == 404
    assert _problem(_hosts(api_both, ADMIN, ["ok.example.com", "no/slash"]), 422)["field"] == (
        "webhook_hosts[1]"
    )
    assert api_both.get("/api/v1/workspaces/acme", ALICE).json()["webhook_hosts"] is None


def test_a_saved_webhook_outside_the_hosts_fails_when_sent(deliveries_both: Deliveries) -> None:
    """A webhook saved before the admin restricted hosts fails `destination_refused` at send
    time and the receiver gets nothing."""
    env = deliveries_both
    env.api.member(ADMIN, "admin")
    assert _hosts(env.api, ADMIN, ["hooks.example.com"]).status_code == 200
    delivery = _send(env, env.hooks.url(), allow="127.0.0.1/32")

    assert delivery.failure_code is FailureCode.DESTINATION_REFUSED
    assert env.hooks.received == []


def _cli(api: Api, *args: str, user: str = "") -> subprocess.CompletedProcess[str]:
    """`qexport ARGS` on the api fixture's database (and source), as `user` in acme."""
    settings = api.deps.settings
    environ = {k: v for k, v in os.environ.items() if not k.startswith("QEXPORT_")}
    environ |= {
        "QEXPORT_DATA_DIR": str(settings.data_dir),
        "QEXPORT_DATABASE_URL": settings.database_url,
        f"QEXPORT_SOURCE_{SOURCE.upper()}": settings.sources[SOURCE],
        "QEXPORT_WORKSPACE": "acme",
        "QEXPORT_USER": user or "nobody",
    }
    if settings.secret_key:  # the installation's, which keys its audit trail
        environ["QEXPORT_SECRET_KEY"] = settings.secret_key
    return subprocess.run(
        [sys.executable, "-m", "qexport", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_cli_checks_notify_like_the_api(api_both: Api) -> None:
    """`exports create --webhook` to loopback exits 2 naming --webhook; a viewer's --email to
    someone else exits 2; neither records an export."""
    api_both.member(ALICE, "editor")
    api_both.member(VERA, "viewer")
    api_both.add_query("orders")
    create = ("exports", "create", "--query", "orders", "--format", "csv")

    inside = _cli(
        api_both, *create, "--webhook", "http://127.1:8080/x", user=api_both.user_id(ALICE)
    )
    other = _cli(api_both, *create, "--email", "boss@acme.test", user=api_both.user_id(VERA))

    assert inside.returncode == 2, inside.stderr
    assert "--webhook: '127.1' is not an allowed destination" in inside.stderr
    assert other.returncode == 2, other.stderr
    assert "viewers may notify only their own email address" in other.stderr
    assert api_both.deps.exports.list_exports(workspace_id="acme") == []


def test_the_cli_sets_and_lifts_webhook_hosts(api_both: Api) -> None:
    """`qexport workspaces webhook-hosts W HOST...` sets them, without hosts prints them, and
    `--clear` lifts the restriction."""
    api_both.member(ADMIN, "admin")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _cli(api_both, "workspaces", "webhook-hosts", *args)

    assert run("acme", "hooks.example.com", "b.example.com").returncode == 0
    assert api_both.context.accounts.workspace_webhook_hosts("acme") == (
        "hooks.example.com",
        "b.example.com",
    )
    assert run("acme").stdout.split() == ["hooks.example.com", "b.example.com"]
    assert run("acme", "bad host").returncode == 2
    assert run("acme", "--clear").returncode == 0
    assert api_both.context.accounts.workspace_webhook_hosts("acme") is None


# ---------------------------------------------------------------- masking


def test_recipients_are_shown_in_full_only_to_the_owner_and_admins(api_both: Api) -> None:
    """A member who reads the schedule but does not manage it sees the webhook's host name and
    a masked address; its owner and an admin see them whole."""
    api_both.member(ALICE, "editor")
    api_both.member("bob@acme.test", "editor")
    api_both.member(ADMIN, "admin")
    api_both.add_query("orders")
    hook_url = "https://hooks.example.com/in/s3cr3t-token?sig=abc"
    recipients = [{"email": "finance.lead@example.com"}, {"webhook": hook_url}]
    created = api_both.post("/api/v1/schedules", ALICE, json={**MONDAYS, "recipients": recipients})
    assert created.status_code == 201, created.text
    path = f"/api/v1/schedules/{created.json()['id']}"

    for who in (ALICE, ADMIN):
        assert api_both.get(path, who).json()["recipients"] == recipients
    seen = api_both.get(path, "bob@acme.test").json()["recipients"]
    listed = api_both.get("/api/v1/schedules", "bob@acme.test").json()["items"][0]["recipients"]
    assert (
        seen
        == listed
        == [
            {"email": "f***@example.com"},
            {"webhook": "https://hooks.example.com/***"},
        ]
    )
    assert not re.search("s3cr3t|finance", str(seen))
