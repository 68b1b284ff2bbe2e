"""Build the application container in tests: over SQL stores sharing one engine, or over
the in-memory fakes; one call where a test used to assemble the worker's few ports."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from qexport.bootstrap import object_capabilities
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.stats import ExportStats
from qexport.ports import (
    AccountStore,
    ApprovalStore,
    AuditLog,
    Clock,
    DeliveryStore,
    ObjectStore,
    RetentionRules,
    ScheduleStore,
    SourceCatalog,
)
from qexport.store.accounts import SqlAccountStore
from qexport.store.approvals import SqlApprovalStore
from qexport.store.audit.log import SqlAuditLog
from qexport.store.deliveries import SqlDeliveryStore
from qexport.store.engine import schema_mismatch, serve_on_this_loop
from qexport.store.rates import SqlRateLimits
from qexport.store.schedules import SqlScheduleStore
from qexport.store.stats import read_stats
from tests.fakes import (
    InMemoryAccountStore,
    InMemoryApprovalStore,
    InMemoryAuditLog,
    InMemoryDeliveryStore,
    InMemoryMetadataStore,
    InMemoryRateLimits,
    InMemoryScheduleStore,
    InProcessPreviews,
)
from tests.support.stores import MetadataStore


def container_of(
    store: MetadataStore,
    objects: ObjectStore,
    sources: SourceCatalog,
    clock: Clock,
    settings: Settings,
    *,
    accounts: AccountStore | None = None,
    schedules: ScheduleStore | None = None,
    deliveries: DeliveryStore | None = None,
) -> Container:
    """A container whose export queue and catalog are `store`: the other SQL stores over its
    engine when it has one, the in-memory fakes beside it otherwise (unless given)."""
    engine: sa.Engine | None = getattr(store, "engine", None)
    audit: AuditLog
    approvals: ApprovalStore
    if engine is not None:
        audit = SqlAuditLog(engine)
        approvals = SqlApprovalStore(engine, notify=settings.pg_notify)
        accounts = accounts or SqlAccountStore(engine)
        schedules = schedules or SqlScheduleStore(engine, notify=settings.pg_notify)
        deliveries = deliveries or SqlDeliveryStore(engine)
    else:
        assert isinstance(store, InMemoryMetadataStore)
        accounts = accounts or InMemoryAccountStore()
        schedules = schedules or InMemoryScheduleStore(store)
        deliveries = deliveries or InMemoryDeliveryStore(store)
        audit = InMemoryAuditLog()
        approvals = fake_approvals = InMemoryApprovalStore(store)
        fake_approvals.audit_log = audit
        for fake in (store, accounts, schedules, deliveries):  # their `audit=` events go here
            fake.audit_log = audit

    def stats(now: datetime) -> ExportStats:
        assert engine is not None, "metrics are read from the SQL metadata database"
        return read_stats(engine, now)

    def no_rules() -> RetentionRules | None:
        return None

    presigner, local_files = object_capabilities(objects)
    return Container(
        exports=store,
        catalog=store,
        accounts=accounts,
        approvals=approvals,
        schedules=schedules,
        deliveries=deliveries,
        audit=audit,
        objects=objects,
        presigner=presigner,
        local_files=local_files,
        sources=sources,
        previews=InProcessPreviews(sources),
        rates=SqlRateLimits(engine) if engine is not None else InMemoryRateLimits(),
        clock=clock,
        settings=settings,
        check_database=lambda: store.has_unsettled() and None,
        check_schema=lambda: None if engine is None else schema_mismatch(engine),
        serve_on_this_loop=serve_on_this_loop,
        check_storage=lambda: None,
        stats=stats,
        retention_rules=no_rules,
        close=engine.dispose if engine is not None else lambda: None,
    )
