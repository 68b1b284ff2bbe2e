"""Operations routes, all without a token: liveness, readiness, and `/metrics` (metrics.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import structlog
from fastapi import APIRouter
from pydantic import BaseModel, Field

from qexport.api import metrics
from qexport.api.auth import Context
from qexport.api.context import ApiContext
from qexport.api.errors import PROBLEM, problem
from qexport.domain.failures import MetadataUnavailableError, StorageUnavailableError
from qexport.ports import ObjectStore
from qexport.store.sqlite_watch import sqlite_path

log = structlog.get_logger()

router = APIRouter(tags=["operations"])
router.include_router(metrics.router)

# Read, never written: a stat of a key nobody uses tells whether the store answers.
PROBE_KEY = "exports/readyz/probe"
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


def _outcome(name: str, check: Callable[[ApiContext], None], context: ApiContext) -> str:
    try:
        check(context)
    except Exception as exc:
        # The reason may name hosts or paths: it is logged, never returned.
        log.warning("readiness_check_failed", check=name, error=type(exc).__name__, reason=str(exc))
        return FAILED
    return OK


def _check_database(context: ApiContext) -> None:
    path = sqlite_path(context.settings.database_url)
    # A pooled connection keeps reading a SQLite file that was deleted or replaced.
    if path is not None and not path.is_file():
        raise MetadataUnavailableError(f"the SQLite database {path} is gone")
    context.store.has_unsettled()


def _check_storage(context: ApiContext) -> None:
    objects: ObjectStore = context.objects
    check_bucket = getattr(objects, "check_bucket", None)
    if callable(check_bucket):
        check_bucket()
        return
    root = getattr(objects, "root", None)
    if isinstance(root, Path) and not _usable_folder(root):
        raise StorageUnavailableError(f"the storage folder {root} is not a writable directory")
    objects.head(PROBE_KEY)


def _usable_folder(root: Path) -> bool:
    """The folder, or the nearest existing folder it would be created in, is writable (the
    store creates it with its first upload)."""
    probe = root.absolute()
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)
