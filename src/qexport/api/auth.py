"""The bearer-token dependency: every /api/v1 route takes the caller as a Principal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import UnauthorizedError
from qexport.http.context import get_context
from qexport.http.one_hop import Deferred, off_the_loop
from qexport.services.audit import note_principal
from qexport.services.auth import authenticate

_bearer = HTTPBearer(auto_error=False, description="An API token: `qexport tokens create EMAIL`")


@dataclass(frozen=True, eq=False)
class Caller(Deferred):
    """A bearer token yet to be checked: the route (an OneHopRoute) checks it on the thread
    that runs the endpoint, and the endpoint receives the Principal."""

    request: Request
    context: Container
    token: str

    def resolve(self) -> Principal:
        if (principal := getattr(self.request.state, "principal", None)) is not None:
            return principal  # type: ignore[no-any-return]
        return self._noted(authenticate(self.context.accounts, self.context.clock, self.token))

    def _noted(self, principal: Principal) -> Principal:
        self.request.state.principal = principal
        note_principal(principal)
        return principal


async def current_principal(
    request: Request,
    context: Annotated[Container, Depends(get_context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The caller, to be authenticated by the route (async: this part does no I/O)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise UnauthorizedError("invalid token")  # the same answer for every refusal
    return Caller(request, context, credentials.credentials)


async def authenticated_first(request: Request) -> None:
    """UnauthorizedError unless the request's bearer token works: for a request found invalid
    before its route's dependencies ran (its JSON did not parse) or before the Caller was
    resolved, so that a bad token gets its 401, never a 422 about the request it came with."""
    caller = await current_principal(request, await get_context(request), await _bearer(request))
    await off_the_loop(caller.resolve)


# A route's parameter: the authenticated caller. Only on an OneHopRoute (every /api/v1
# router's route class), which resolves the Caller into the Principal.
CurrentPrincipal = Annotated[Principal, Depends(current_principal)]
Context = Annotated[Container, Depends(get_context)]
