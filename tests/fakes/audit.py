"""The AuditLog contract on a list: the same chain (domain/audit.py), no database."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace
from datetime import UTC, datetime

from qexport.domain.audit import (
    GENESIS,
    AuditEvent,
    AuditFilter,
    RecordedEvent,
    chained,
)


class InMemoryAuditLog:
    """Events in a list, chained per workspace, guarded by one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[RecordedEvent] = []
        self._anchors: dict[str, str] = {}
        self.failures = 0

    def append(self, event: AuditEvent | None) -> None:
        """What a fake store does with its `audit=` event: chain it now."""
        if event is not None:
            self.record(event)

    def record(self, event: AuditEvent) -> bool:
        with self._lock:
            prev = next(
                (e.hash for e in reversed(self._events) if e.workspace_id == event.workspace_id),
                self._anchors.get(event.workspace_id, GENESIS),
            )
            row = chained(event, prev, datetime.now(UTC))
            self._events.append(RecordedEvent(id=len(self._events) + 1, **row))
        return True

    def record_soon(self, event: AuditEvent) -> Future[bool]:
        written: Future[bool] = Future()
        written.set_result(self.record(event))
        return written

    def list_events(
        self,
        *,
        workspace_id: str | None,
        narrow: AuditFilter,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[RecordedEvent]:
        with self._lock:
            found = [
                e
                for e in reversed(self._events)
                if (workspace_id is None or e.workspace_id == workspace_id)
                and (before_id is None or e.id < before_id)
                and _matches(e, narrow)
            ]
        return found[:limit]

    def chains(self) -> list[str]:
        with self._lock:
            return sorted({e.workspace_id for e in self._events} | set(self._anchors))

    def anchor(self, workspace_id: str) -> str:
        return self._anchors.get(workspace_id, GENESIS)

    def chain(self, workspace_id: str) -> Iterator[RecordedEvent]:
        with self._lock:
            found = [e for e in self._events if e.workspace_id == workspace_id]
        return iter(found)

    def prune(self, *, before: datetime, event: AuditEvent) -> dict[str, int]:
        with self._lock:
            last: dict[str, RecordedEvent] = {}
            for e in self._events:
                if e.at < before:
                    last[e.workspace_id] = e
            pruned = {
                w: sum(1 for e in self._events if e.workspace_id == w and e.id <= cut.id)
                for w, cut in last.items()
            }
            self._events = [
                e
                for e in self._events
                if e.workspace_id not in last or e.id > last[e.workspace_id].id
            ]
            self._anchors.update({w: cut.hash for w, cut in last.items()})
        if pruned:
            details = {**event.details, "deleted": sum(pruned.values()), "chains": len(pruned)}
            event = replace(event, details=details)
        self.record(event)
        return pruned


def _matches(event: RecordedEvent, narrow: AuditFilter) -> bool:
    action = narrow.action
    return (
        (narrow.actor is None or event.actor_id == narrow.actor)
        and (
            action is None
            or (event.action.startswith(action) if action.endswith(".") else event.action == action)
        )
        and (narrow.target is None or event.target_id == narrow.target)
        and (narrow.since is None or event.at >= narrow.since)
        and (narrow.until is None or event.at < narrow.until)
    )
