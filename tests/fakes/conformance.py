"""Each fake is its port: strict mypy (which checks tests/fakes) fails on any drift of a
method's signature from the Protocol in qexport/ports.py. Nothing calls these functions."""

from __future__ import annotations

from qexport.ports import (
    AccountStore,
    ApprovalStore,
    Catalog,
    Clock,
    DeliveryStore,
    ExportQueue,
    ObjectStore,
    ScheduleStore,
    Source,
    SourceCatalog,
)
from tests.fakes.accounts import InMemoryAccountStore
from tests.fakes.approvals import InMemoryApprovalStore
from tests.fakes.clock import FrozenClock
from tests.fakes.deliveries import InMemoryDeliveryStore
from tests.fakes.exports import InMemoryMetadataStore
from tests.fakes.objects import InMemoryObjectStore
from tests.fakes.schedules import InMemoryScheduleStore
from tests.fakes.sources import FixedSources
from tests.unit.fakes import FakeSource


def export_queue(fake: InMemoryMetadataStore) -> ExportQueue:
    return fake


def catalog(fake: InMemoryMetadataStore) -> Catalog:
    return fake


def schedules(fake: InMemoryScheduleStore) -> ScheduleStore:
    return fake


def deliveries(fake: InMemoryDeliveryStore) -> DeliveryStore:
    return fake


def accounts(fake: InMemoryAccountStore) -> AccountStore:
    return fake


def approvals(fake: InMemoryApprovalStore) -> ApprovalStore:
    return fake


def objects(fake: InMemoryObjectStore) -> ObjectStore:
    return fake


def sources(fake: FixedSources) -> SourceCatalog:
    return fake


def clock(fake: FrozenClock) -> Clock:
    return fake


def source(fake: FakeSource) -> Source:
    return fake
