"""Who may name which recipients, and where a webhook may point, checked when they are saved
(a schedule's recipients, an export's `notify`). The dispatcher checks again at send time.

- Viewers may notify only their own email address; webhooks (Slack, Teams) and other people's
  addresses need the editor role (a viewer could otherwise make the server mail or POST
  anywhere).
- A webhook's host, and a Slack or Teams URL's, must be among the workspace's webhook hosts
  when its admin set them: they are all POSTs the server makes on a member's behalf.
- An email address must be at one of the workspace's recipient domains when its policy
  names them (domain/policies.py).
- Their host must pass the egress policy: a literal internal address, or a name that
  resolves to one, is refused (422 naming the field). A name that does not resolve now is
  accepted; the send-time check decides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import structlog

from qexport.domain.accounts import Role, at_least
from qexport.domain.failures import ForbiddenError, InvalidRequestError, Problems
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.schedules import Channel, Recipient, parse_recipient, parse_recipients
from qexport.net.egress import (
    EgressPolicy,
    EgressRefusedError,
    UnresolvedError,
    check_webhook_host,
    normal_host,
)
from qexport.ports import AccountStore, WorkspaceStore

log = structlog.get_logger()

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class RecipientRules:
    """What the person saving recipients may name."""

    role: Role
    own_email: str | None  # a viewer may notify this address only
    webhook_hosts: tuple[str, ...] | None  # None: any host the egress policy allows
    egress: EgressPolicy
    policy: WorkspacePolicy = field(default_factory=WorkspacePolicy)  # its email domains


def rules_for(
    accounts: AccountStore,
    workspace_id: str,
    user_id: str,
    role: Role,
    egress: EgressPolicy,
) -> RecipientRules:
    user = accounts.get_user(user_id)
    return RecipientRules(
        role=role,
        own_email=user.email if user else None,
        webhook_hosts=accounts.workspace_webhook_hosts(workspace_id),
        egress=egress,
        policy=accounts.workspace_policy(workspace_id),
    )


MAX_WEBHOOK_HOSTS = 50
_HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"
)


def parse_webhook_hosts(values: Any, field_name: str = "webhook_hosts") -> tuple[str, ...]:
    """Host names (lower case, no trailing dot, duplicates removed) or InvalidRequestError."""
    if not isinstance(values, list | tuple):
        raise InvalidRequestError("webhook_hosts must be a list of host names", field=field_name)
    if len(values) > MAX_WEBHOOK_HOSTS:
        raise InvalidRequestError(
            f"at most {MAX_WEBHOOK_HOSTS} webhook hosts may be given", field=field_name
        )
    hosts: dict[str, None] = {}
    for index, value in enumerate(values):
        host = normal_host(value) if isinstance(value, str) else ""
        if not _HOST_NAME.match(host):
            shown = str(value)[:80]
            raise InvalidRequestError(
                f"{shown!r} is not a host name (e.g. hooks.example.com)",
                field=f"{field_name}[{index}]",
            )
        hosts[host] = None
    return tuple(hosts)


def set_webhook_hosts(
    accounts: WorkspaceStore, role: Role, workspace_id: str, hosts: Any
) -> tuple[str, ...] | None:
    """Restrict the workspace's webhooks to `hosts` (None lifts it); workspace admins only.
    Existing recipients elsewhere are checked again when they are sent."""
    if role is not Role.ADMIN:
        raise ForbiddenError("only workspace admins may restrict webhook hosts")
    checked = None if hosts is None else parse_webhook_hosts(hosts)
    accounts.set_workspace_webhook_hosts(workspace_id, checked)
    return checked


def admit_recipients(
    raw: Sequence[Any], rules: RecipientRules, field_name: str = "recipients"
) -> tuple[Recipient, ...]:
    """The recipients, parsed and checked; every refused one at once, each naming its field
    (`recipients[1].webhook`). One the person's role may not name is ForbiddenError."""
    items = list(raw)
    recipients = parse_recipients(items, field_name)  # the shape of every item, and the count
    problems = Problems()
    for index, item in enumerate(items):
        recipient = parse_recipient(item, f"{field_name}[{index}]")
        where = f"{field_name}[{index}].{recipient.channel.value}"
        _check_role(recipient, rules, where)
        refusal = None
        if recipient.channel is Channel.EMAIL:
            refusal = rules.policy.address_refusal(recipient.target)
        if refusal is not None:
            problems.add(InvalidRequestError(refusal, field=where))
        if recipient.posts:
            with problems.check():
                check_destination(recipient.target, rules, where)
    problems.raise_any()
    return recipients


def _check_role(recipient: Recipient, rules: RecipientRules, where: str) -> None:
    if at_least(rules.role, Role.EDITOR):
        return
    if recipient.posts:
        what = "webhooks" if recipient.channel is Channel.WEBHOOK else "Slack or Teams channels"
        raise ForbiddenError(f"{where}: only editors and admins may name {what}")
    own = (rules.own_email or "").lower()
    if recipient.target.lower() != own:
        raise ForbiddenError(
            f"{where}: viewers may notify only their own email address; other addresses"
            " need the editor role"
        )


def check_destination(url: str, rules: RecipientRules, where: str) -> None:
    """InvalidRequestError naming `where` when the webhook's (Slack's, Teams') host is
    refused."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
    except ValueError:
        raise InvalidRequestError("the webhook URL has an invalid port", field=where) from None
    try:
        check_webhook_host(host, rules.webhook_hosts)
    except EgressRefusedError:
        allowed = ", ".join(rules.webhook_hosts or ()) or "none"
        raise InvalidRequestError(
            f"webhooks of this workspace may only go to these hosts: {allowed}", field=where
        ) from None
    try:
        rules.egress.resolve_checked(host, port)
    except EgressRefusedError as exc:
        log.info("recipient_refused", field=where, reason=exc.reason)
        raise InvalidRequestError(
            f"{host[:80]!r} is not an allowed destination: webhooks may not reach loopback,"
            " private, link-local or other internal addresses",
            field=where,
        ) from None
    except UnresolvedError:
        pass  # maybe a passing DNS failure: checked again when the delivery is sent
