"""Operations routes, all without a token: liveness, readiness, and `/metrics` (metrics.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import structlog
from fastapi import APIRouter
from pydantic import BaseModel, Field

from qexport.api import metrics
from qexport.api.auth import Context
from qexport.container import Container
from qexport.http.errors import PROBLEM, problem
from qexport.http.one_hop import OneHopRoute

log = structlog.get_logger()

router = APIRouter(route_class=OneHopRoute, tags=["operations"])
router.include_router(metrics.router)

OK = "ok"
FAILED = "failed"


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready"]
    checks: dict[str, Literal["ok"]] = Field(examples=[{"database": OK, "storage": OK}])


class NotReady(BaseModel):
    """A problem document naming the checks that failed; the reasons go to the log only."""

    type: str
    title: str
    status: int
    code: Literal["unavailable"]
    detail: str
    checks: dict[str, Literal["ok", "failed"]]


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": OK}


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: the metadata database answers and the object store is usable",
    responses={
        503: {
            "description": "A check failed; `checks` names it.",
            "content": {PROBLEM: {"schema": NotReady.model_json_schema()}},
        }
    },
)
def readyz(context: Context) -> Any:
    checks = {
        "database": _outcome("database", _check_database, context),
        "storage": _outcome("storage", _check_storage, context),
    }
    failed = [name for name, outcome in checks.items() if outcome != OK]
    if failed:
        return problem(503, "unavailable", f"not ready: {', '.join(failed)} failed", checks=checks)
    return {"status": "ready", "checks": checks}


def _outcome(name: str, check: Callable[[Container], None], context: Container) -> str:
    try:
        check(context)
    except Exception as exc:
        # The reason may name hosts or paths: it is logged, never returned.
        log.warning("readiness_check_failed", check=name, error=type(exc).__name__, reason=str(exc))
        return FAILED
    return OK


def _check_database(context: Container) -> None:
    context.check_database()


def _check_storage(context: Container) -> None:
    context.check_storage()
