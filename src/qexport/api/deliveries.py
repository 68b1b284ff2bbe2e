"""POST /api/v1/exports/{id}/deliveries/{delivery_id}/retry: send a failed delivery again.

The listing (GET /api/v1/exports/{id}/deliveries) lives with the schedules' API.
"""

from __future__ import annotations

from fastapi import APIRouter

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.deliveries import Delivery
from qexport.api.schemas.problems import problem_responses
from qexport.domain.commands import SendAgain
from qexport.http.one_hop import OneHopRoute
from qexport.services.resend import send_again
from qexport.services.views import delivery_view

router = APIRouter(route_class=OneHopRoute, tags=["exports"])


@router.post(
    "/exports/{export_id}/deliveries/{delivery_id}/retry",
    response_model=Delivery,
    responses=problem_responses(401, 403, 404, 409, 422, 503),
    summary="Send a failed delivery again (the export's owner or a workspace admin)",
)
def retry_delivery(
    export_id: str, delivery_id: str, principal: CurrentPrincipal, context: Context
) -> Delivery:
    """Back to `waiting`, due now, with a fresh attempt budget; the same id (its idempotency
    key) and the same link. 409 unless it failed, once the file expired, or when its link was
    revoked; 403 when the caller could not name that recipient today (a viewer: only their
    own address); 422 when the egress policy refuses it."""
    delivery = send_again(context, principal, SendAgain(export_id, delivery_id))
    return Delivery.model_validate(delivery_view(delivery))
