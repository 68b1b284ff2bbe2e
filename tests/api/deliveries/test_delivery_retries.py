"""Retries per recipient: a failing receiver is retried with a backoff until it answers or
the attempts run out, permanent refusals fail at once, and no other recipient hears twice."""

from __future__ import annotations

import pytest

from qexport.domain.schedules import DeliveryStatus
from tests.api.deliveries.env import Deliveries

MAIL = "team@example.com"
RETRIES = {"delivery_max_attempts": 3, "delivery_retry_base_seconds": 10}


def run_for_a_while(env: Deliveries, rounds: int = 6) -> None:
    """Dispatch, then let more than the longest backoff pass; again and again."""
    dispatcher = env.dispatcher(**RETRIES)
    for _ in range(rounds):
        dispatcher.run_once()
        env.api.clock.advance(120)


def test_a_receiver_failing_twice_gets_one_delivery_and_the_others_hear_once(
    deliveries: Deliveries,
) -> None:
    """500, 500, then 200: sent on attempt 3; the other recipients got exactly one each."""
    env = deliveries
    env.hooks.script["/flaky"] = [500, 500]
    flaky, steady = env.hooks.url("/flaky"), env.hooks.url("/steady")
    export = env.export({"email": MAIL}, {"webhook": flaky}, {"webhook": steady})
    run_for_a_while(env)

    by_target = env.of(export.id)
    assert (by_target[flaky].status, by_target[flaky].attempt) == (DeliveryStatus.SENT, 3)
    assert [h.status for h in env.hooks.at("/flaky")] == [500, 500, 200]
    assert len(env.hooks.at("/steady")) == 1
    assert len(env.smtp.to(MAIL)) == 1
    assert {d.status for d in by_target.values()} == {DeliveryStatus.SENT}
    keys = {h.headers["X-QExport-Delivery"] for h in env.hooks.at("/flaky")}
    assert keys == {by_target[flaky].id}  # every retry carries the same key


def test_a_receiver_that_always_fails_ends_failed_and_the_others_are_unaffected(
    deliveries: Deliveries,
) -> None:
    """After the configured attempts the delivery is failed with the last answer as reason."""
    env = deliveries
    env.hooks.script["/down"] = [503] * 99
    down, steady = env.hooks.url("/down"), env.hooks.url("/steady")
    export = env.export({"email": MAIL}, {"webhook": down}, {"webhook": steady})
    run_for_a_while(env)

    by_target = env.of(export.id)
    assert by_target[down].status is DeliveryStatus.FAILED
    assert by_target[down].last_error == (
        "gave up after 3 attempts: the receiver answered HTTP 503"
    )
    assert len(env.hooks.at("/down")) == 3
    assert len(env.hooks.at("/steady")) == 1
    assert len(env.smtp.to(MAIL)) == 1
    assert by_target[steady].status is by_target[MAIL].status is DeliveryStatus.SENT


def test_a_receiver_answering_404_fails_at_once(deliveries: Deliveries) -> None:
    """A 4xx answer would not change on retry: failed after one attempt, with the answer."""
    env = deliveries
    env.hooks.script["/gone"] = [404]
    export = env.export({"webhook": env.hooks.url("/gone")})
    run_for_a_while(env)

    (delivery,) = env.of(export.id).values()
    assert (delivery.status, delivery.attempt) == (DeliveryStatus.FAILED, 1)
    assert delivery.last_error == "the receiver answered HTTP 404"
    assert len(env.hooks.at("/gone")) == 1


@pytest.mark.parametrize(
    ("answers", "status", "attempt", "error"),
    [
        (
            [302],
            DeliveryStatus.FAILED,
            1,
            "the receiver answered HTTP 302 (redirects are not followed)",
        ),
        ([429], DeliveryStatus.SENT, 2, None),
        ([408], DeliveryStatus.SENT, 2, None),
    ],
)
def test_redirects_are_permanent_and_throttling_is_retried(
    deliveries: Deliveries,
    answers: list[int],
    status: DeliveryStatus,
    attempt: int,
    error: str | None,
) -> None:
    """A redirect is never followed (it fails at once); 429 and 408 are asked again later."""
    env = deliveries
    env.hooks.script["/hook"] = answers
    export = env.export({"webhook": env.hooks.url()})
    run_for_a_while(env)

    (delivery,) = env.of(export.id).values()
    assert (delivery.status, delivery.attempt) == (status, attempt)
    if error is not None:
        assert delivery.last_error == error
    assert len(env.hooks.at("/hook")) == attempt


def test_smtp_refusals_550_fails_at_once_and_451_is_retried(deliveries: Deliveries) -> None:
    """A 5xx reply to RCPT is permanent (no retry); a 4xx reply is retried and then sent."""
    env = deliveries
    env.smtp.refuse["gone@example.com"] = ["550 no such user"] * 9
    env.smtp.refuse["busy@example.com"] = ["451 try again later"]
    export = env.export({"email": "gone@example.com"}, {"email": "busy@example.com"})
    run_for_a_while(env)

    by_target = env.of(export.id)
    gone, busy = by_target["gone@example.com"], by_target["busy@example.com"]
    assert (gone.status, gone.attempt) == (DeliveryStatus.FAILED, 1)
    assert gone.last_error == "the mail server refused the recipient (SMTP 550)"
    assert env.smtp.to("gone@example.com") == []
    assert (busy.status, busy.attempt) == (DeliveryStatus.SENT, 2)
    assert len(env.smtp.to("busy@example.com")) == 1
    assert env.smtp.refuse["gone@example.com"] == ["550 no such user"] * 8  # asked only once


def test_an_unreachable_smtp_server_is_retried_then_given_up(deliveries: Deliveries) -> None:
    """Connection errors are transient: retried up to the limit, then failed with one readable
    reason that names neither the server's address nor its port."""
    env = deliveries
    export = env.export({"email": MAIL})
    dispatcher = env.dispatcher(smtp_url="smtp://127.0.0.1:1", **RETRIES)
    for _ in range(6):
        dispatcher.run_once()
        env.api.clock.advance(120)

    (delivery,) = env.of(export.id).values()
    assert (delivery.status, delivery.attempt) == (DeliveryStatus.FAILED, 3)
    assert delivery.last_error == "gave up after 3 attempts: could not connect to the mail server"
