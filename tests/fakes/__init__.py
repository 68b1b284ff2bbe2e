"""In-memory fakes at the ports, and a clock that tests move by hand.

They follow the same contract as the real adapters (the contract suites run on both),
so the fast unit layer exercises the services without a database, disk or network.
They are test code: nothing in `src/` imports them.
"""

from tests.fakes.accounts import InMemoryAccountStore
from tests.fakes.approvals import InMemoryApprovalStore
from tests.fakes.audit import InMemoryAuditLog
from tests.fakes.catalog import InMemoryCatalog
from tests.fakes.clock import FrozenClock
from tests.fakes.deliveries import InMemoryDeliveryStore
from tests.fakes.exports import InMemoryExportQueue, InMemoryMetadataStore
from tests.fakes.objects import InMemoryObjectStore
from tests.fakes.previews import InProcessPreviews
from tests.fakes.rates import InMemoryRateLimits
from tests.fakes.schedules import InMemoryScheduleStore
from tests.fakes.sources import FixedSources

__all__ = [
    "FixedSources",
    "FrozenClock",
    "InMemoryAccountStore",
    "InMemoryApprovalStore",
    "InMemoryAuditLog",
    "InMemoryCatalog",
    "InMemoryDeliveryStore",
    "InMemoryExportQueue",
    "InMemoryMetadataStore",
    "InMemoryObjectStore",
    "InMemoryRateLimits",
    "InMemoryScheduleStore",
    "InProcessPreviews",
]
