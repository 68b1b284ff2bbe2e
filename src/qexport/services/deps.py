"""What the use cases are handed: the stores, the clock and the settings, as the application
container (qexport.container.Container) holds them. The services cannot import the container
(it imports them), so they name what they take from it here, once; each handler's docstring
says what it reads and writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qexport.config import Settings
    from qexport.ports import (
        AccountStore,
        AuditLog,
        Catalog,
        Clock,
        DeliveryStore,
        ExportQueue,
        PreviewRunner,
        ScheduleStore,
        SourceCatalog,
    )
    from qexport.services.approvals import ApprovalDesk
    from qexport.services.describe import Ration
    from qexport.services.slots import SourceSlots


class Deps(Protocol):
    @property
    def exports(self) -> ExportQueue: ...
    @property
    def catalog(self) -> Catalog: ...
    @property
    def accounts(self) -> AccountStore: ...
    @property
    def schedules(self) -> ScheduleStore: ...
    @property
    def deliveries(self) -> DeliveryStore: ...
    @property
    def audit(self) -> AuditLog: ...
    @property
    def sources(self) -> SourceCatalog: ...
    @property
    def previews(self) -> PreviewRunner: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def source_slots(self) -> SourceSlots: ...
    def save_ration(self) -> Ration:
        """What checking a statement as it is saved is rationed and recorded with."""
        ...

    def approval_desk(self) -> ApprovalDesk:
        """Where export requests of sensitive subjects wait for an admin."""
        ...
