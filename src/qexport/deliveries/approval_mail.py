"""Telling people about approval requests by email (when QEXPORT_SMTP_URL is set).

A new request goes to the workspace's admins other than the requester; a decision goes to
the requester. The mail is sent on a thread of its own after the request or decision is
recorded: a slow or unreachable mail server never holds up, or fails, what it reports (the
pages show every request and decision whatever the mail does). A message that could not be
sent is logged, never retried: the pages are the record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from email.message import EmailMessage

import structlog

from qexport.config import Settings
from qexport.deliveries.email import SmtpSender
from qexport.deliveries.errors import DeliveryError
from qexport.domain.accounts import Role
from qexport.domain.approvals import ApprovalRequest, ApprovalStatus
from qexport.ports import AccountStore, ApprovalStore, UserStore
from qexport.services.approvals import ApprovalDesk

log = structlog.get_logger()

PAGE = "/approvals"


def approval_desk(store: ApprovalStore, accounts: AccountStore, settings: Settings) -> ApprovalDesk:
    """The desk sensitive requests go to, telling people by email when mail is configured."""
    cap = settings.max_unsettled_per_user
    if not settings.smtp_url:
        return ApprovalDesk(store, settings.approval_ttl, max_pending=cap)
    sender = SmtpSender(settings.smtp_url, timeout=settings.delivery_timeout_seconds)
    tell = _mailer(sender, accounts, settings.public_base_url)
    return ApprovalDesk(store, settings.approval_ttl, tell=tell, max_pending=cap)


def _mailer(
    sender: SmtpSender, accounts: AccountStore, base_url: str
) -> Callable[[ApprovalRequest], None]:
    def tell(request: ApprovalRequest) -> None:
        try:
            threading.Thread(
                target=_tell, args=(sender, accounts, base_url, request), name="approval-mail"
            ).start()
        except RuntimeError:  # no thread to be had: the pages still show it
            log.warning("approval_mail_failed", approval_id=request.id, error="no thread")

    return tell


def _tell(sender: SmtpSender, accounts: UserStore, base_url: str, request: ApprovalRequest) -> None:
    """Build and send the messages, on the mail's own thread: nothing here reaches the
    request or decision it reports."""
    try:
        messages = _messages(request, accounts, base_url)
    except Exception:
        log.exception("approval_mail_failed", approval_id=request.id)
        return
    for address, message in messages:
        try:
            sender.send(message, address)
        except DeliveryError as exc:
            log.warning(
                "approval_mail_failed", approval_id=request.id, error=exc.internal or str(exc)
            )


def _messages(
    request: ApprovalRequest, accounts: UserStore, base_url: str
) -> list[tuple[str, EmailMessage]]:
    """Who hears of `request` as it now stands, and what they read."""
    where = f"{base_url.rstrip('/')}{PAGE}" if base_url else "the Approvals page of qexport"
    requester = accounts.get_user(request.requested_by)
    asker = requester.email if requester is not None else request.requested_by
    what = f'{request.subject_type} "{request.subject_name}" as {request.format}'
    if request.status is ApprovalStatus.PENDING:
        admins = [
            m.user_id
            for m in accounts.members(request.workspace_id)
            if m.role is Role.ADMIN and m.user_id != request.requested_by
        ]
        subject = f"Approval asked: {request.subject_name} ({request.format})"
        body = (
            f"{asker} asks to export the sensitive {what} in workspace"
            f" {request.workspace_id}.\n\nApprove or deny it before"
            f" {request.expires_at:%Y-%m-%d %H:%M UTC} at {where}; unanswered, it lapses.\n"
        )
        return [(a, _message(a, subject, body)) for a in _emails(accounts, admins)]
    if requester is None or request.decided_by == request.requested_by:
        return []  # gone, or withdrawn by the requester themself
    decided = "approved" if request.status is ApprovalStatus.APPROVED else "denied"
    subject = f"Export {decided}: {request.subject_name} ({request.format})"
    body = f"Your request to export the {what} was {decided}."
    if request.reason:
        body += f"\n\nThe admin's reason: {request.reason}"
    if request.status is ApprovalStatus.APPROVED:
        body += "\n\nIt is queued now; the file appears on your exports page when it is ready."
    return [(requester.email, _message(requester.email, subject, body + "\n"))]


def _emails(accounts: UserStore, user_ids: list[str]) -> list[str]:
    found = []
    for user_id in user_ids:
        user = accounts.get_user(user_id)
        if user is not None and not user.disabled:
            found.append(user.email)
    return found


def _message(to: str, subject: str, body: str) -> EmailMessage:
    message = EmailMessage()
    message["To"] = to
    # A name may hold line breaks or other control characters: one line, no header of its own.
    message["Subject"] = "".join(c if c.isprintable() else " " for c in subject)
    message.set_content(body)
    return message
