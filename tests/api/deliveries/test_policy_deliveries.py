"""Deliveries under a workspace's policy: an address outside its recipient domains is never
mailed, links are left out when public links are off, and live no longer than it allows."""

from __future__ import annotations

from datetime import timedelta

from qexport.domain.failures import FailureCode
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.schedules import DeliveryStatus
from qexport.domain.sensitivity import SensitiveTable
from tests.api.deliveries.env import LINK, Deliveries

INSIDE = "team@acme.test"
OUTSIDE = "someone@gmail.com"


def _policy(env: Deliveries, **rules: object) -> None:
    env.api.context.accounts.set_workspace_policy("acme", WorkspacePolicy(**rules))  # type: ignore[arg-type]


def test_an_address_saved_before_the_domains_were_restricted_is_not_mailed(
    deliveries: Deliveries,
) -> None:
    env = deliveries
    export = env.export({"email": INSIDE}, {"email": OUTSIDE})
    _policy(env, recipient_domains=("acme.test",))
    env.dispatcher().run_once()
    by_target = env.of(export.id)
    assert by_target[INSIDE].status is DeliveryStatus.SENT
    refused = by_target[OUTSIDE]
    assert refused.status is DeliveryStatus.FAILED
    assert refused.failure_code is FailureCode.DESTINATION_REFUSED
    assert env.smtp.to(OUTSIDE) == []
    assert len(env.smtp.to(INSIDE)) == 1


def test_with_public_links_off_the_mail_carries_no_link(deliveries: Deliveries) -> None:
    env = deliveries
    _policy(env, public_links=False)
    export = env.export({"email": INSIDE})
    env.dispatcher().run_once()
    (mail,) = env.smtp.to(INSIDE)
    assert LINK.findall(mail.text) == []
    assert "sign in to qexport and open the export" in mail.text
    assert env.api.context.accounts.list_links(export.id) == []


def test_a_delivered_link_lives_no_longer_than_the_policy_allows(deliveries: Deliveries) -> None:
    env = deliveries
    _policy(env, link_max_days=1)
    export = env.export({"email": INSIDE})
    env.dispatcher().run_once()
    text = env.smtp.to(INSIDE)[0].text
    assert "The link works until 2026-01-06 09:00 UTC (the workspace's policy)." in text
    (link,) = LINK.findall(text)
    assert env.open_link(link).status_code == 200
    env.api.clock.advance(int(timedelta(days=1).total_seconds()) + 1)
    assert env.open_link(link).status_code == 410
    assert env.file(export.id)  # the file itself is still there for members


def test_a_file_of_what_became_sensitive_goes_out_neither_linked_nor_attached(
    deliveries: Deliveries,
) -> None:
    """The table its query reads was marked sensitive after the file was made, before its
    delivery went out: the mail tells the recipient to sign in, and carries no link and no
    attachment; no link is made."""
    env = deliveries
    export = env.export({"email": INSIDE})
    _policy(env, sensitive_tables=(SensitiveTable("shop", "main", "orders"),))
    env.dispatcher().run_once()
    (mail,) = env.smtp.to(INSIDE)
    assert LINK.findall(mail.text) == []
    assert "marks what it was made from sensitive" in mail.text
    assert mail.attachments() == []
    assert env.api.context.accounts.list_links(export.id) == []
