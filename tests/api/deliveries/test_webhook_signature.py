"""A webhook receiver written from the documented signature scheme alone accepts what qexport
sends, and rejects a tampered body, a stale timestamp and another workspace's key."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import replace

from qexport.domain.schedules import DeliveryStatus
from qexport.services.signing import signing_key
from tests.api.deliveries.env import Deliveries
from tests.support.receivers import Hook

TOLERANCE_SECONDS = 300
SECRET_KEY = "s3cret-of-the-installation"  # noqa: S105 - a test setting


def verify(hook: Hook, key: str, now: float) -> bool:
    """What a receiver does: `X-QExport-Signature: t=<unix seconds>,v1=<hex>`, where v1 is
    HMAC-SHA256 with the workspace key over "<t>." followed by the raw body."""
    headers = {name.lower(): value for name, value in hook.headers.items()}
    fields = dict(part.split("=", 1) for part in headers["x-qexport-signature"].split(","))
    timestamp = int(fields["t"])
    if now - timestamp > TOLERANCE_SECONDS:  # a replay of an old request
        return False
    expected = hmac.new(key.encode(), f"{timestamp}.".encode() + hook.body, hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), fields["v1"])


def test_a_receiver_verifies_the_signature_and_rejects_tampering_and_replays(
    deliveries: Deliveries,
) -> None:
    """The signature holds for the body as sent, and for nothing else."""
    env = deliveries
    export = env.export({"webhook": env.hooks.url()})
    env.dispatcher().run_once()
    (delivery,) = env.of(export.id).values()
    assert delivery.status is DeliveryStatus.SENT
    (hook,) = env.hooks.at("/hook")
    context = env.api.context
    key = signing_key(context.settings, context.schedules, env.api.clock, "acme")
    now = env.api.clock.now().timestamp()

    assert verify(hook, key, now)
    tampered = json.loads(hook.body) | {"rows": 1}
    assert not verify(replace(hook, body=json.dumps(tampered).encode()), key, now)
    assert not verify(hook, key, now + TOLERANCE_SECONDS + 1)
    other = signing_key(context.settings, context.schedules, env.api.clock, "other-team")
    assert not verify(hook, other, now)


def test_the_signing_key_is_stable_and_follows_the_secret_key(deliveries: Deliveries) -> None:
    """Every process derives the same key; setting QEXPORT_SECRET_KEY changes it."""
    env = deliveries
    context, clock = env.api.context, env.api.clock
    generated = signing_key(context.settings, context.schedules, clock, "acme")
    assert generated == signing_key(context.settings, context.schedules, clock, "acme")
    assert len(generated) == 64
    configured = replace(context.settings, secret_key=SECRET_KEY)
    assert signing_key(configured, context.schedules, clock, "acme") != generated

    export = env.export({"webhook": env.hooks.url()})
    env.dispatcher(secret_key=SECRET_KEY).run_once()
    assert env.of(export.id)[env.hooks.url()].status is DeliveryStatus.SENT
    (hook,) = env.hooks.at("/hook")
    now = clock.now().timestamp()
    assert verify(hook, signing_key(configured, context.schedules, clock, "acme"), now)
    assert not verify(hook, generated, now)
