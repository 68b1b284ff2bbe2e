"""The command line's client of the local database: what a server would answer, from the same
services, as the same views, refused the same way.

A client command is written once, against `qexport.cli.client.Client`: `client_of(ctx)` hands
it this client, or the server's (`QExportClient`) when QEXPORT_URL and QEXPORT_TOKEN are set.
This one acts as `qexport.services.accounts.local_principal` says (the member `--user` names,
with their role; the operator's own CLI in a workspace without accounts), answers with the
views the API writes (`qexport.services.views`), and refuses with the status and code the API
would give (`ApiError`, from `qexport.http.statuses`), so that the output, the message and the
exit status of a command are the same code, whichever it talks to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from qexport.cli.client import ApiError
from qexport.domain.approvals import Decision
from qexport.domain.commands import CreateLink, Decide, RevokeLink
from qexport.domain.failures import InvalidRequestError, QExportError
from qexport.http.statuses import status_of
from qexport.services import views

if TYPE_CHECKING:
    from qexport.container import Container
    from qexport.domain.accounts import Principal


def refused_as_a_server_would(exc: QExportError) -> ApiError:
    """`exc` as the API's problem document reaches the remote client: its status, code and
    detail, and every mistake of a refused request as `field: message`."""
    status, code = status_of(exc) or (500, "internal")
    problems: tuple[str, ...] = ()
    if isinstance(exc, InvalidRequestError):
        problems = tuple(
            f"{found.field or 'body'}: {' '.join(found.detail.split())}" for found in exc.problems
        )
    field = exc.field if isinstance(exc, InvalidRequestError) else None
    return ApiError(status, code, " ".join(exc.detail.split()), field=field, problems=problems)


@contextlib.contextmanager
def _as_a_server() -> Iterator[None]:
    try:
        yield
    except QExportError as exc:
        raise refused_as_a_server_would(exc) from exc


class LocalClient:
    """The local database, acting as `principal`: `QExportClient`'s methods and answers."""

    def __init__(self, deps: Container, principal: Principal) -> None:
        self._deps = deps
        self._principal = principal

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        """(The local database is closed with the command's state, not here.)"""

    # ------------------------------------------------------------ approvals

    def list_approvals(self, *, pending: bool) -> dict[str, Any]:
        from qexport.services.approvals import listed

        deps, acting = self._deps, self._principal
        now = deps.clock.now()
        with _as_a_server():
            found = listed(
                deps.approvals,
                acting.user_id,
                acting.workspace_id,
                acting.role,
                pending_at=now if pending else None,
            )
        return {"items": [views.approval_view(request, now) for request in found]}

    def decide(self, approval_id: str, decision: str, reason: str | None) -> dict[str, Any]:
        from qexport.services.deciding import decide_request

        command = Decide(approval_id, Decision(decision), reason)
        with _as_a_server():
            decided = decide_request(self._deps, self._principal, command)
        return views.approval_view(decided, self._deps.clock.now())

    # ------------------------------------------------------------ links

    def create_link(self, export_id: str, days: int | None) -> dict[str, Any]:
        from qexport.services.links import create_link

        with _as_a_server():
            if not self._deps.settings.public_base_url:
                # A server makes its links for its own address; the command line knows none,
                # and a link without one is no URL anyone can open: made nowhere, refused.
                raise InvalidRequestError(
                    "set QEXPORT_PUBLIC_BASE_URL (or --public-base-url) to the address people"
                    " reach `qexport serve` at; a public link's URL starts with it"
                )
            created = create_link(self._deps, self._principal, CreateLink(export_id, days))
        return {
            "id": created.link.id,
            "url": created.url,
            "expires_at": views.iso_time(created.expires_at),
        }

    def list_links(self, export_id: str) -> dict[str, Any]:
        from qexport.services.links import list_live_links

        deps = self._deps
        with _as_a_server():
            record, found = list_live_links(
                deps.exports, deps.accounts, deps.clock, self._principal, export_id
            )
        return {"items": [views.link_view(link, record) for link in found]}

    def revoke_link(self, link_id: str) -> None:
        from qexport.services.links import revoke_link

        with _as_a_server():
            revoke_link(self._deps, self._principal, RevokeLink(link_id))
