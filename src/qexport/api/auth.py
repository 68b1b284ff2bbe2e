"""The bearer-token dependency: every /api/v1 route takes the caller as a Principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import UnauthorizedError
from qexport.http.context import get_context
from qexport.services.audit import note_principal
from qexport.services.auth import authenticate

_bearer = HTTPBearer(auto_error=False, description="An API token: `qexport tokens create EMAIL`")


def current_principal(
    request: Request,
    context: Annotated[Container, Depends(get_context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise UnauthorizedError("invalid token")  # the same answer for every refusal
    principal = authenticate(context.accounts, context.clock, credentials.credentials)
    request.state.principal = principal
    note_principal(principal)
    return principal


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]
Context = Annotated[Container, Depends(get_context)]
