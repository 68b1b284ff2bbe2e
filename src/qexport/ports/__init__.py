"""The ports: what the services need from the outside world, as Protocols.

Concrete adapters live in `store/`, `storage/`, `sources/` and `writers/`; in-memory
fakes for the fast unit layer live in `tests/fakes/`. Only `bootstrap.py` picks adapters.

One module per port; every name is also importable from `qexport.ports` itself.
"""

from __future__ import annotations

from qexport.ports.accounts import (
    AccountStore,
    LinkStore,
    SourceRecordStore,
    TokenStore,
    UserStore,
    WorkspaceStore,
)
from qexport.ports.approvals import ApprovalStore
from qexport.ports.audit import AuditLog
from qexport.ports.catalog import Catalog
from qexport.ports.clock import Clock
from qexport.ports.deliveries import ClaimedDelivery, DeliveryStore
from qexport.ports.exports import Admission, AttemptLease, ClaimResult, ExportQueue, NewExport
from qexport.ports.objects import (
    LocalFiles,
    ObjectStore,
    Presigner,
    RetentionRules,
    StoredObject,
    Upload,
)
from qexport.ports.previews import (
    CatalogueJob,
    Cell,
    DescribeJob,
    PlanJob,
    PreviewCells,
    PreviewJob,
    PreviewRunner,
)
from qexport.ports.rates import RateLimits
from qexport.ports.schedules import ScheduleRun, ScheduleStore
from qexport.ports.sources import (
    NativeCopy,
    PreviewRows,
    ResultStream,
    Source,
    SourceCatalog,
)
from qexport.ports.writers import Sink, Writer, WriterOptions

__all__ = [
    "AccountStore",
    "Admission",
    "ApprovalStore",
    "AttemptLease",
    "AuditLog",
    "Catalog",
    "CatalogueJob",
    "Cell",
    "ClaimResult",
    "ClaimedDelivery",
    "Clock",
    "DeliveryStore",
    "DescribeJob",
    "ExportQueue",
    "LinkStore",
    "LocalFiles",
    "NativeCopy",
    "NewExport",
    "ObjectStore",
    "PlanJob",
    "Presigner",
    "PreviewCells",
    "PreviewJob",
    "PreviewRows",
    "PreviewRunner",
    "RateLimits",
    "ResultStream",
    "RetentionRules",
    "ScheduleRun",
    "ScheduleStore",
    "Sink",
    "Source",
    "SourceCatalog",
    "SourceRecordStore",
    "StoredObject",
    "TokenStore",
    "Upload",
    "UserStore",
    "WorkspaceStore",
    "Writer",
    "WriterOptions",
]
