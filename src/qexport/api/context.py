"""What the API's handlers need, built once by `bootstrap.api_context`."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from qexport.config import Settings
from qexport.ports import (
    AccountStore,
    Clock,
    DeliveryStore,
    MetadataStore,
    ObjectStore,
    ScheduleStore,
    SourceCatalog,
)


@dataclass(frozen=True)
class ApiContext:
    store: MetadataStore
    accounts: AccountStore
    objects: ObjectStore
    clock: Clock
    settings: Settings
    schedules: ScheduleStore
    deliveries: DeliveryStore
    sources: SourceCatalog


def get_context(request: Request) -> ApiContext:
    """FastAPI dependency: the context the app was created with."""
    context: ApiContext = request.app.state.context
    return context
