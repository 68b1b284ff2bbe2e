"""Asking before doing what cannot be undone (cancel, revoke, delete).

Each destructive form carries a hidden `confirmed` field. With JavaScript, app.js asks in a
dialog and sends `confirmed=yes`; without it, or on a GET of the form's URL, the handler
answers with a page that asks the same question and posts the same form again, confirmed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Form, Request
from fastapi.responses import HTMLResponse

from qexport.web.render import page
from qexport.web.session import Session

CONFIRMED = "yes"
ConfirmedField = Annotated[str, Form(max_length=8)]


@dataclass(frozen=True)
class Confirmation:
    """The question, what follows from saying yes, and where each answer goes."""

    title: str  # "Cancel this export?"
    consequence: str  # what happens, and what does not
    action: str  # the form's URL (POST)
    yes: str  # the destructive button's words: "Cancel the export"
    back: str  # where "Keep it" goes
    no: str = "Keep it"
    fields: Mapping[str, str] = field(default_factory=dict)  # hidden fields carried along


def is_confirmed(confirmed: str | None) -> bool:
    return confirmed == CONFIRMED


def confirm_page(request: Request, session: Session, confirmation: Confirmation) -> HTMLResponse:
    """The page that asks before a destructive action, posting it again when answered yes."""
    return page(request, "confirm.html", session=session, confirmation=confirmation)
