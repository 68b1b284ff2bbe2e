"""Sending a failed delivery again: the export's owner or a workspace admin puts it back to
waiting, and the dispatcher claims it like any other (DeliveryStore.send_again).

What "again" means: the same delivery, under the same id (the idempotency key its receiver
sees) and with the same public link; a fresh attempt budget (`Delivery.tries` counts from
0 while `attempt` keeps counting every attempt); when and by whom recorded on it. Nothing
else changes: the dispatcher's lease still allows one send per claim, and every write after
the claim is fenced by it.

It is refused (nothing written) when the delivery is not failed, when the file expired (ask
for the export again instead), when its public link was revoked (the message would carry a
dead link), and when the person could not name that recipient today (a viewer only their
own address; webhooks pass the workspace's hosts and the egress policy), so that nobody sends
through someone else's earlier rights.
"""

from __future__ import annotations

from qexport.domain.accounts import Principal, Role, at_least, hash_secret
from qexport.domain.commands import SendAgain
from qexport.domain.exports import EXPIRED, ExportRecord, effective_status
from qexport.domain.failures import ConflictError, ForbiddenError, NotFoundError
from qexport.domain.schedules import Delivery, DeliveryStatus, Recipient
from qexport.ports import DeliveryStore, ExportQueue
from qexport.services.deps import Deps
from qexport.services.exports import get_visible_export
from qexport.services.recipients import admit_recipients, rules_for
from qexport.services.signing import link_token, master_secret

MAX_DELIVERY_ID_CHARS = 64  # delivery ids are UUIDs

NO_SUCH_DELIVERY = "no delivery with this id on this export"


def may_send_again(principal: Principal, record: ExportRecord) -> bool:
    """The export's owner (whose rights it ran with) or a workspace admin."""
    return record.requested_by == principal.user_id or principal.sees_workspace


def may_name(principal: Principal, recipient: Recipient) -> bool:
    """Whether the caller's role lets them name the recipient (pages offer "Send again" on
    this; `send_again` checks everything, the egress policy included)."""
    if at_least(principal.role, Role.EDITOR):
        return True
    return not recipient.posts and recipient.target.lower() == principal.email.lower()


def visible_delivery(
    exports: ExportQueue,
    deliveries: DeliveryStore,
    principal: Principal,
    export_id: str,
    delivery_id: str,
) -> tuple[ExportRecord, Delivery]:
    """A delivery of an export the caller may see; NotFoundError otherwise."""
    record = get_visible_export(
        exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    found = (
        next((d for d in deliveries.list_deliveries(record.id) if d.id == delivery_id), None)
        if len(delivery_id) <= MAX_DELIVERY_ID_CHARS
        else None
    )
    if found is None:
        raise NotFoundError(NO_SUCH_DELIVERY)
    return record, found


def send_again(deps: Deps, principal: Principal, command: SendAgain) -> Delivery:
    """Put a failed delivery back to waiting, due now; the delivery as it is then."""
    exports, deliveries, clock = deps.exports, deps.deliveries, deps.clock
    export_id, delivery_id = command.export_id, command.delivery_id
    record, delivery = visible_delivery(exports, deliveries, principal, export_id, delivery_id)
    if not may_send_again(principal, record):
        raise ForbiddenError("only the export's owner or a workspace admin may send it again")
    if delivery.status is not DeliveryStatus.FAILED:
        raise ConflictError(
            f"this delivery is {delivery.status.value}; only a failed delivery can be sent again"
        )
    now = clock.now()
    if effective_status(record, now) == EXPIRED:
        raise ConflictError("the file has expired; request the export again to send a new one")
    master = master_secret(deps.settings, deps.schedules, clock)
    link = deps.accounts.find_link(hash_secret(link_token(master, delivery.id)))
    if link is not None and link.revoked_at is not None:
        raise ConflictError(
            "its public link was revoked, so it would send a link that no longer works;"
            " request the export again to send a new one"
        )
    egress = deps.settings.egress_policy()
    rules = rules_for(
        deps.accounts, principal.workspace_id, principal.user_id, principal.role, egress
    )
    admit_recipients([delivery.recipient.to_json()], rules, "recipient")
    if not deliveries.send_again(record.id, delivery.id, now=now, by=principal.user_id):
        raise ConflictError("this delivery changed meanwhile; reload to see where it is")
    _, updated = visible_delivery(exports, deliveries, principal, export_id, delivery_id)
    return updated
