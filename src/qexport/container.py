"""The application container: every port an entry point needs, built once by `bootstrap`.

The CLI, the HTTP API and its pages, the worker, the scheduler and the delivery dispatcher
all receive this one object; none of them picks or inspects an adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from qexport.config import Settings
from qexport.deliveries.approval_mail import approval_desk
from qexport.domain.stats import ExportStats
from qexport.ports import (
    AccountStore,
    ApprovalStore,
    AuditLog,
    Catalog,
    Clock,
    DeliveryStore,
    ExportQueue,
    LocalFiles,
    ObjectStore,
    Presigner,
    PreviewRunner,
    RateLimits,
    RetentionRules,
    ScheduleStore,
    SourceCatalog,
)
from qexport.services.approvals import ApprovalDesk
from qexport.services.describe import Ration
from qexport.services.preview import PreviewDesk
from qexport.services.slots import SourceSlots


@dataclass(frozen=True)
class Container:
    exports: ExportQueue
    catalog: Catalog
    accounts: AccountStore
    approvals: ApprovalStore
    schedules: ScheduleStore
    deliveries: DeliveryStore
    audit: AuditLog
    objects: ObjectStore
    # What the object store can do besides storing: sign download URLs (S3), or give the path
    # of a file on this machine (a folder); each None when it cannot.
    presigner: Presigner | None
    local_files: LocalFiles | None
    sources: SourceCatalog
    # Where previews run: processes of their own, of bounded memory (previews/processes.py).
    previews: PreviewRunner
    # How often a member may do what is rationed (previews), over every process.
    rates: RateLimits
    clock: Clock
    settings: Settings
    # Raises when the metadata database does not answer (readiness, start-up checks).
    check_database: Callable[[], None]
    # Why the metadata database's schema is not the one this code needs (None: it is).
    check_schema: Callable[[], str | None]
    # Marks the running event loop as one that serves requests: the metadata database then
    # refuses to be used on it (a server calls it as it starts; store/engine.py).
    serve_on_this_loop: Callable[[], None]
    # Raises when the object store is not usable (a missing bucket, an unwritable folder).
    check_storage: Callable[[], None]
    # The figures /metrics reports, for the whole installation, at `now`.
    stats: Callable[[datetime], ExportStats]
    # The object store's retention rules (None: the store keeps none).
    retention_rules: Callable[[], RetentionRules | None]
    # Close the database connections and stop the preview processes (before forking, and at
    # exit); reopened on next use.
    close: Callable[[], None]
    # How many describes and previews may hold a source connection at once (this process).
    source_slots: SourceSlots = field(default_factory=SourceSlots)

    def approval_desk(self) -> ApprovalDesk:
        """Where export requests of sensitive queries go (telling people by email when
        QEXPORT_SMTP_URL is set)."""
        return approval_desk(self.approvals, self.accounts, self.settings)

    def save_ration(self) -> Ration:
        """What checking a query as it is saved is rationed and recorded with
        (services/describe.py): the member's previews of the minute, and the audit trail."""
        return Ration(self.preview_desk().looks(), self.audit)

    def preview_desk(self) -> PreviewDesk:
        """What a preview needs (services/preview.py), whichever door asks for one."""
        return PreviewDesk(
            catalog=self.catalog,
            accounts=self.accounts,
            sources=self.sources,
            runner=self.previews,
            slots=self.source_slots,
            audit=self.audit,
            rates=self.rates,
            clock=self.clock,
            per_minute=self.settings.preview_per_minute,
            statement_timeout_seconds=self.settings.statement_timeout_seconds,
        )
