"""Building audit events: who acts, from where (the request's origin).

The HTTP layer sets the request's origin (client address, user agent) once per request
(http/origin.py), and notes who authenticated (a session or an API token) when it knows; the
services that record an event read it here, so that no service signature grows parameters
for it. Outside a request (the CLI, the scheduler) it is empty and the caller names the actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from qexport.domain.accounts import OPERATOR_TOKEN_ID, SESSION_TOKEN_ID, Principal
from qexport.domain.audit import (
    Action,
    Actor,
    ActorKind,
    AuditEvent,
    Outcome,
    bounded,
    operator_for,
)
from qexport.domain.schedules import Recipient
from qexport.ports import Clock, NewExport


@dataclass
class Origin:
    """Where a request came from, as the server saw it, and who it authenticated as (set
    once the principal is known: mutable, since dependencies run in copies of the context)."""

    address: str | None = None
    user_agent: str | None = None
    actor: Actor | None = None


_OUTSIDE = Origin()  # outside any request: never noted on
_ORIGIN: ContextVar[Origin] = ContextVar("qexport_origin", default=_OUTSIDE)


def set_origin(origin: Origin) -> Token[Origin]:
    return _ORIGIN.set(origin)


def reset_origin(token: Token[Origin]) -> None:
    _ORIGIN.reset(token)


def origin() -> Origin:
    return _ORIGIN.get()


def note_principal(principal: Principal) -> None:
    """Record who the current request authenticated as (the API's and the pages' auth)."""
    current = _ORIGIN.get()
    if current is not _OUTSIDE:
        current.actor = actor_of(principal)


def actor_for(user_id: str) -> Actor:
    """The actor behind a service call on `user_id`'s behalf: the request's authenticated
    principal when it is that user (a token or a session), the user otherwise."""
    noted = _ORIGIN.get().actor
    if noted is not None and noted.id == user_id:
        return noted
    return Actor(ActorKind.USER, user_id)


def actor_of(principal: Principal) -> Actor:
    """A person through a session (user), through an API token (token, with its id), or the
    operator's command line acting for them on the local database."""
    if principal.token_id == SESSION_TOKEN_ID:
        return Actor(ActorKind.USER, principal.user_id)
    if principal.token_id == OPERATOR_TOKEN_ID:
        return operator_for(principal.user_id)
    return Actor(ActorKind.TOKEN, principal.user_id, via=principal.token_id)


def event(
    clock: Clock | None,
    actor: Actor | Principal,
    action: Action,
    *,
    workspace_id: str | None = None,
    target: tuple[str, str | None] | None = None,
    outcome: Outcome = Outcome.OK,
    details: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """An event at the clock's now (no clock: when the store writes it), from the current
    request's origin (if any).

    `workspace_id` defaults to the principal's. Never pass a secret, a token, a password or
    row data in `details`.
    """
    if isinstance(actor, Principal):
        workspace_id = workspace_id or actor.workspace_id
        actor = actor_of(actor)
    assert workspace_id is not None, "an operator's or scheduler's event names its workspace"
    extra = dict(details or {})
    if actor.via is not None:
        extra["token_id"] = actor.via
    where = origin()
    if where.user_agent is not None:
        extra.setdefault("user_agent", bounded(where.user_agent))
    kind, target_id = target if target is not None else (None, None)
    return AuditEvent(
        at=clock.now() if clock is not None else None,
        workspace_id=workspace_id,
        actor_kind=actor.kind,
        actor_id=actor.id,
        action=action,
        target_kind=kind,
        target_id=target_id,
        outcome=outcome,
        client_address=where.address,
        details=extra,
    )


def export_requested(
    clock: Clock, new: NewExport, recipients: int = 0, *, actor: Actor | None = None
) -> AuditEvent:
    """The event of a request for `new` (by its requester unless `actor` says otherwise):
    its subject and format, and the names of its parameters, never their values."""
    return event(
        clock,
        actor or actor_for(new.requested_by),
        Action.EXPORT_REQUESTED,
        workspace_id=new.workspace_id,
        target=("export", new.id),
        details={
            "subject_type": new.subject_type,
            "subject_id": new.subject_id,
            "subject_name": new.subject_name,
            "format": new.format,
            "parameters": sorted(new.parameters),
            "recipients": recipients,
        },
    )


def recipient_on_record(recipient: Recipient) -> str:
    """A recipient as the audit trail names it: an email address, or a URL's host (a
    webhook's URL may be its secret)."""
    if not recipient.posts:
        return recipient.target
    return f"{recipient.channel.value}:{urlsplit(recipient.target).hostname or '?'}"
