"""The dispatcher: claims deliveries of settled exports and sends each one on its own.

Each delivery is leased, sent, then marked with a write fenced by its lease. A sender that
dies after sending leaves the lease to expire and the delivery is sent again with the same
idempotency key (at least once underneath, once as seen by a receiver that drops repeats).
One recipient's failure never touches another's delivery.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog

from qexport.config import Settings
from qexport.deliveries.chat import send_chat
from qexport.deliveries.content import (
    Notice,
    email_message,
    outcome_of,
    webhook_body,
)
from qexport.deliveries.email import SmtpSender
from qexport.deliveries.errors import DeliveryError
from qexport.deliveries.webhook import WebhookSender
from qexport.domain.accounts import hash_secret
from qexport.domain.approvals import APPROVAL_OPTION
from qexport.domain.audit import SCHEDULER, Action
from qexport.domain.exports import ExportRecord
from qexport.domain.failures import FailureCode
from qexport.domain.lifecycle import backoff
from qexport.domain.schedules import CHAT_CHANNELS, Channel, Delivery, Outcome
from qexport.ports import (
    AccountStore,
    Catalog,
    ClaimedDelivery,
    Clock,
    DeliveryStore,
    ExportQueue,
    ObjectStore,
    ScheduleStore,
)
from qexport.services.audit import event, recipient_on_record
from qexport.services.links import public_url, unapproved_sensitive
from qexport.services.signing import link_token, master_secret, signature_header, workspace_key
from qexport.services.subscribers import subscriber_refusal

log = structlog.get_logger()


class DeliveryDispatcher:
    def __init__(  # noqa: PLR0913 - its stores, senders and settings, each named
        self,
        exports: ExportQueue,
        deliveries: DeliveryStore,
        schedules: ScheduleStore,
        accounts: AccountStore,
        objects: ObjectStore,
        clock: Clock,
        settings: Settings,
        *,
        email: SmtpSender | None = None,
        webhook: WebhookSender | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self._exports = exports
        self._deliveries = deliveries
        self._schedules = schedules
        self._accounts = accounts
        self._objects = objects
        self._clock = clock
        self._settings = settings
        # Subscribers are checked against it when sent; without it their deliveries fail.
        self._catalog = catalog
        if email is None and settings.smtp_url:
            email = SmtpSender(settings.smtp_url, timeout=settings.delivery_timeout_seconds)
        self._email = email
        self._webhook = webhook or WebhookSender(
            timeout=settings.delivery_timeout_seconds, policy=settings.egress_policy()
        )
        self._master: str | None = None

    def close(self) -> None:
        self._webhook.close()

    def run_once(self, limit: int = 100) -> int:
        """Handle claimable deliveries until none is left or `limit` were handled."""
        handled = 0
        while handled < limit:
            claimed = self._deliveries.claim_delivery(
                now=self._clock.now(), lease_seconds=self._settings.lease_seconds
            )
            if claimed is None:
                break
            self.handle(claimed)
            handled += 1
        return handled

    def handle(self, claimed: ClaimedDelivery) -> None:
        """One attempt at one delivery; no sending error escapes (a store error does)."""
        delivery, export = claimed.delivery, claimed.export
        limit = self._settings.delivery_max_attempts
        # `tries`, not `attempt`: a delivery sent again by a person starts a fresh budget.
        if delivery.tries > limit:  # earlier senders died holding it
            reason = _gave_up(limit)
            if delivery.last_error:
                reason += f": {delivery.last_error}"
            self._fail(delivery, reason)
            return
        refusal = self._subscriber_refusal(delivery, export)
        if refusal is not None:  # never sent: the export ran with its owner's rights
            self._fail(delivery, f"not sent: {refusal}", code=FailureCode.ACCESS_LOST)
            return
        try:
            outcome = self._send(delivery, export)
        except DeliveryError as exc:
            # The member reads str(exc); the operator's log also gets the connection detail.
            log.info(
                "delivery_attempt_failed",
                **_fields(delivery),
                reason=str(exc),
                detail=exc.internal or None,
                code=exc.code.value if exc.code is FailureCode.DESTINATION_REFUSED else None,
            )
            if exc.code is FailureCode.DESTINATION_REFUSED:
                self._fail(delivery, str(exc), code=exc.code)
            else:
                self._failed_attempt(delivery, str(exc), permanent=exc.permanent)
        except Exception as exc:
            log.exception("delivery_crashed", **_fields(delivery), error=type(exc).__name__)
            self._failed_attempt(delivery, "internal error", permanent=False)
        else:
            sent = event(
                self._clock,
                SCHEDULER,
                Action.DELIVERY_SENT,
                workspace_id=export.workspace_id,
                target=("delivery", delivery.id),
                details={
                    "export_id": export.id,
                    "channel": delivery.recipient.channel.value,
                    "recipient": recipient_on_record(delivery.recipient),
                    "outcome": outcome.value,
                },
            )
            if self._deliveries.mark_sent(
                delivery.id, _token(delivery), now=self._clock.now(), outcome=outcome, audit=sent
            ):
                log.info("delivery_sent", **_fields(delivery), outcome=outcome.value)
            else:  # the lease expired meanwhile and another sender took it over
                log.warning("delivery_lease_lost", **_fields(delivery))

    def _subscriber_refusal(self, delivery: Delivery, export: ExportRecord) -> str | None:
        """Why a subscriber's delivery may not go out now (services/subscribers.py), or None;
        None for the recipients the owner named."""
        if delivery.subscriber is None:
            return None
        if self._catalog is None:
            return "the subscriber could not be checked"
        refusal = subscriber_refusal(
            self._catalog,
            self._accounts,
            workspace_id=export.workspace_id,
            user_id=delivery.subscriber,
            subject_type=export.subject_type,
            subject_id=export.subject_id,
        )
        return None if refusal is None else refusal.reason

    def _send(self, delivery: Delivery, export: ExportRecord) -> Outcome:
        now = self._clock.now()
        outcome = outcome_of(export, now)
        withheld = outcome is Outcome.FILE and self._withheld(export)
        link, link_expires_at = (None, None) if withheld else self._link(delivery, export, outcome)
        notice = Notice(delivery, export, outcome, link, link_expires_at, withheld=withheld)
        if delivery.recipient.channel is Channel.EMAIL:
            policy = self._accounts.workspace_policy(export.workspace_id)
            refusal = policy.address_refusal(delivery.recipient.target)
            if refusal is not None:  # saved before the workspace restricted its domains
                raise DeliveryError(
                    "the workspace's policy does not allow email to this address's domain",
                    permanent=True,
                    internal=refusal,
                    code=FailureCode.DESTINATION_REFUSED,
                )
            if self._email is None:
                raise DeliveryError(
                    "email is not configured (set QEXPORT_SMTP_URL)", permanent=True
                )
            attachment = None if withheld else self._attachment(export, outcome)
            message = email_message(notice, attachment=attachment)
            self._email.send(message, delivery.recipient.target)
        elif delivery.recipient.channel in CHAT_CHANNELS:
            hosts = self._accounts.workspace_webhook_hosts(export.workspace_id)
            send_chat(self._webhook, notice, hosts=hosts)
        else:
            body = webhook_body(notice)
            key = workspace_key(self._master_secret(), export.workspace_id)
            self._webhook.send(
                delivery.recipient.target,
                body,
                delivery_id=delivery.id,
                signature=signature_header(key, int(now.timestamp()), body),
                hosts=self._accounts.workspace_webhook_hosts(export.workspace_id),
            )
        return outcome

    def _withheld(self, export: ExportRecord) -> bool:
        """Whether the file may go out neither linked nor attached: made without an approval
        from what the workspace's policy marks sensitive now, judged by what its run read
        (without the catalog to tell a query's id, whenever the policy marks queries)."""
        policy = self._accounts.workspace_policy(export.workspace_id)
        if self._catalog is None:
            approved = export.options.get(APPROVAL_OPTION) is not None
            unsure = bool(policy.sensitive_queries) or policy.file_sensitivity(export.reads)
            return not approved and bool(unsure)
        return unapproved_sensitive(self._catalog, policy, export) is not None

    def _master_secret(self) -> str:
        if self._master is None:  # read once: it never changes while the process runs
            self._master = master_secret(self._settings, self._schedules, self._clock)
        return self._master

    def _link(
        self, delivery: Delivery, export: ExportRecord, outcome: Outcome
    ) -> tuple[str | None, datetime | None]:
        """The delivery's public link and when it stops working (sooner than the file where
        the workspace's policy says so), made on its first attempt and reused by the others;
        none where the policy allows no public links."""
        if outcome is not Outcome.FILE or export.expires_at is None:
            return None, None
        policy = self._accounts.workspace_policy(export.workspace_id)
        if not policy.public_links:  # the recipient signs in to download it
            return None, None
        token = link_token(self._master_secret(), delivery.id)
        token_hash = hash_secret(token)
        link = self._accounts.find_link(token_hash)
        if link is None:
            now = self._clock.now()
            expires_at = policy.link_expiry(now, export.expires_at)
            created = event(
                self._clock,
                SCHEDULER,
                Action.LINK_CREATED,
                workspace_id=export.workspace_id,
                target=("link", None),  # the store names the new link
                details={"export_id": export.id, "delivery_id": delivery.id},
            )
            link = self._accounts.add_link(
                export_id=export.id,
                created_by=export.requested_by,
                token_hash=token_hash,
                now=now,
                expires_at=None if expires_at == export.expires_at else expires_at,
                audit=created,
            )
        url = public_url(self._settings.public_base_url, token)
        return url, link.expires_at or export.expires_at

    def _attachment(self, export: ExportRecord, outcome: Outcome) -> bytes | None:
        size = export.size_bytes or 0
        if outcome is not Outcome.FILE or not 0 < size <= self._settings.email_attachment_max_bytes:
            return None
        with self._objects.open(export.storage_key) as stream:
            return stream.read()

    def _failed_attempt(self, delivery: Delivery, error: str, *, permanent: bool) -> None:
        limit = self._settings.delivery_max_attempts
        if permanent:
            self._fail(delivery, error)
        elif delivery.tries < limit:
            settings = self._settings
            base, cap = settings.delivery_retry_base_seconds, settings.delivery_retry_max_seconds
            delay = backoff(delivery.tries, base, cap)
            retry_at = self._clock.now() + timedelta(seconds=delay)
            self._deliveries.release_delivery(
                delivery.id, _token(delivery), retry_at=retry_at, error=error
            )
            log.info("delivery_retrying", **_fields(delivery), delay_seconds=round(delay, 1))
        else:
            self._fail(delivery, f"{_gave_up(limit)}: {error}")

    def _fail(self, delivery: Delivery, error: str, *, code: FailureCode | None = None) -> None:
        self._deliveries.mark_failed(
            delivery.id, _token(delivery), now=self._clock.now(), error=error, code=code
        )
        log.warning("delivery_failed", **_fields(delivery), error=error)


def _gave_up(attempts: int) -> str:
    return f"gave up after {attempts} attempt{'' if attempts == 1 else 's'}"


def _token(delivery: Delivery) -> str:
    assert delivery.lease_token is not None  # a claimed delivery is leased
    return delivery.lease_token


def _fields(delivery: Delivery) -> dict[str, object]:
    # The address or URL stays out of logs: it may be personal data or hold a secret.
    return {
        "delivery_id": delivery.id,
        "export_id": delivery.export_id,
        "channel": delivery.recipient.channel.value,
        "attempt": delivery.attempt,
    }
