"""The audit trail: keyed, chained events."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qexport.domain.audit import Anchor, AuditEvent, AuditFilter, RecordedEvent
    from qexport.domain.audit_checkpoints import ChainHead
    from qexport.domain.audit_keys import AuditKeys


class AuditLog(Protocol):
    """The audit trail (domain/audit.py): a keyed hash chain of events per workspace.

    A store method that changes something takes `audit=`: the event it appends in its own
    transaction when the change is made (none when its guard matched nothing), so that
    neither is kept without the other. `record` is for the rest (downloads, sign-ins).
    """

    # Events `record` could not record since this process started (/metrics reports it).
    failures: int

    @property
    def keys(self) -> AuditKeys:
        """The secrets the chains are keyed with (AuditKeyMissingError when there are none)."""
        ...

    def record(self, event: AuditEvent) -> bool:
        """Append `event` in a short transaction of its own; never raises (False, logged and
        counted, when it could not be recorded)."""
        ...

    def record_soon(self, event: AuditEvent) -> Future[bool]:
        """Have `event` appended shortly, with others, without waiting for it: the future
        settles with what `record` would have returned."""
        ...

    def list_events(
        self,
        *,
        workspace_id: str | None,
        narrow: AuditFilter,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[RecordedEvent]:
        """Newest first; `before_id` continues after that event; None: every workspace."""
        ...

    def chains(self) -> list[str]:
        """The workspaces that have a chain (events, or an anchor left by pruning)."""
        ...

    def anchor(self, workspace_id: str) -> Anchor:
        """Where the workspace's chain starts (64 zeros and sequence 0 until it is pruned)."""
        ...

    def chain(self, workspace_id: str) -> Iterator[RecordedEvent]:
        """The workspace's events, oldest first."""
        ...

    def event_at(self, workspace_id: str, seq: int) -> RecordedEvent | None:
        """The workspace's event at sequence `seq`, if the trail holds it."""
        ...

    def heads(self, *, after_id: int = 0) -> list[ChainHead]:
        """The head of each chain with an event whose id is above `after_id`."""
        ...

    def unkeyed_chains(self) -> list[str]:
        """The workspaces whose chain holds events from before keys."""
        ...

    def prune(self, *, before: datetime, event: AuditEvent) -> dict[str, int]:
        """Delete the events written before `before`, keeping each chain verifiable from its
        first kept event (an `audit.pruned` event in each chain names its anchor), and
        record `event` in the same transaction; how many, per chain."""
        ...
