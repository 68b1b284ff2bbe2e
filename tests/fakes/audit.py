"""The AuditLog contract on a list: the same chain (domain/audit.py), no database."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from datetime import UTC, datetime

from qexport.domain.audit import (
    Anchor,
    AuditEvent,
    AuditFilter,
    RecordedEvent,
    chained,
    prune_events,
)
from qexport.domain.audit_checkpoints import ChainHead
from qexport.domain.audit_keys import AuditKeys

# The secret the fakes key their chains with (a test value, never a real one).
TEST_AUDIT_KEYS = AuditKeys.from_secrets("qexport-tests-audit-secret")


class InMemoryAuditLog:
    """Events in a list, chained per workspace, guarded by one lock."""

    def __init__(self, keys: AuditKeys = TEST_AUDIT_KEYS) -> None:
        self._lock = threading.Lock()
        self._events: list[RecordedEvent] = []
        self._anchors: dict[str, Anchor] = {}
        self.failures = 0
        self.keys = keys
        self._last_id = 0  # ids are never used again, as the database's

    def append(self, event: AuditEvent | None) -> None:
        """What a fake store does with its `audit=` event: chain it now."""
        if event is not None:
            self.record(event)

    def record(self, event: AuditEvent) -> bool:
        with self._lock:
            self._append(event)
        return True

    def _append(self, event: AuditEvent) -> None:
        anchor = self._anchors.get(event.workspace_id, Anchor())
        prev, seq = next(
            (
                (e.hash, e.seq)
                for e in reversed(self._events)
                if e.workspace_id == event.workspace_id
            ),
            (anchor.hash, anchor.seq),
        )
        row = chained(event, prev, seq + 1, datetime.now(UTC), self.keys.current)
        self._last_id += 1
        self._events.append(RecordedEvent(id=self._last_id, **row))

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

    def anchor(self, workspace_id: str) -> Anchor:
        return self._anchors.get(workspace_id, Anchor())

    def chain(self, workspace_id: str) -> Iterator[RecordedEvent]:
        with self._lock:
            found = [e for e in self._events if e.workspace_id == workspace_id]
        return iter(found)

    def event_at(self, workspace_id: str, seq: int) -> RecordedEvent | None:
        return next((e for e in self.chain(workspace_id) if e.seq == seq), None)

    def unkeyed_chains(self) -> list[str]:
        with self._lock:
            return sorted({e.workspace_id for e in self._events if e.key_id is None})

    def heads(self, *, after_id: int = 0) -> list[ChainHead]:
        with self._lock:
            last = {e.workspace_id: e for e in self._events}
        found = []
        for workspace_id, e in sorted(last.items()):
            if e.id > after_id:
                anchor = self.anchor(workspace_id)
                found.append(
                    ChainHead(workspace_id, e.seq, e.id, e.hash, e.at, anchor.hash, anchor.seq)
                )
        return found

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
            anchors = {w: Anchor(cut.hash, cut.seq, before) for w, cut in last.items()}
            self._anchors.update(anchors)
            for done in prune_events(event, pruned, anchors) if pruned else [event]:
                self._append(done)
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
