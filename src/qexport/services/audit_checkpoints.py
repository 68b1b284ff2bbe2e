"""Writing and reading the audit chains' checkpoints (domain/audit_checkpoints.py).

Who writes them: every worker process, on a thread of its own (worker/loop.py), and `qexport
audit prune` for the chains it prunes, and `qexport audit checkpoint` on demand. Workers, not
the servers nor the scheduler: every installation that makes files runs at least one, they
are the processes that write to the object store by design (a server or a scheduler may be
given read-only storage credentials), and nothing a request waits for pays for it. Not the
writer of each event either: most events are written inside a store's transaction, where no
object store call belongs.

A pass finds the chains with events newer than the last it saw (one statement; the first
pass of a process reads every chain's head), and for each whose newest checkpoint in storage
is older than QEXPORT_AUDIT_CHECKPOINT_EVERY writes a new one. Several workers may find the
same chain due at once; the newest checkpoint is read again just before writing, so that
they seldom both write, and one of the same head is written once (create-if-absent).

A checkpoint is never written over a chain that no longer holds the newest one's event: that
would let a tail deleted just after a checkpoint be hidden by the next one. Such a chain is
logged (`audit_chain_tampered`) and left for `audit verify` to report.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from qexport.domain.audit_checkpoints import (
    PREFIX,
    UNKEYED_CHAINS,
    ChainHead,
    Checkpoint,
    UnkeyedChains,
    chain_of_folder,
    checkpoint_of,
    folder,
    object_key,
    unkeyed_chains_of,
)
from qexport.domain.failures import NotFoundError, QExportError
from qexport.ports import AuditLog, Clock, ObjectStore

log = structlog.get_logger()


@dataclass(frozen=True)
class Stored:
    """A checkpoint as read from storage, and where; or why it could not be believed."""

    key: str
    checkpoint: Checkpoint | None
    unreadable: str | None = None


def newest(objects: ObjectStore, workspace_id: str) -> Stored | None:
    """The newest checkpoint of a chain in storage (None: it has none)."""
    names = objects.names_under(folder(workspace_id), limit=1)
    if not names:
        return None
    key = folder(workspace_id) + names[0]
    with objects.open(key) as handle:
        data = handle.read()
    try:
        return Stored(key, Checkpoint.read(data))
    except ValueError as exc:
        return Stored(key, None, str(exc))


def unkeyed_chains(objects: ObjectStore) -> UnkeyedChains | str | None:
    """The signed list of the chains that held unkeyed events when keys began; why it cannot
    be read; or None when none was written yet."""
    try:
        with objects.open(UNKEYED_CHAINS) as handle:
            data = handle.read()
    except NotFoundError:
        return None
    try:
        return UnkeyedChains.read(data)
    except ValueError as exc:
        return str(exc)


def chains_in_storage(objects: ObjectStore) -> list[str]:
    """The chains that have checkpoints in storage."""
    return [chain_of_folder(name) for name in objects.names_under(PREFIX) if name.endswith("/")]


@dataclass(frozen=True)
class CheckpointPass:
    """What a pass wrote, and the chains it could not write (why, by workspace)."""

    written: list[Checkpoint]
    failed: dict[str, str]


class Checkpointer:
    """Writes the checkpoints that are due; one per process (it remembers what it saw)."""

    def __init__(
        self, audit: AuditLog, objects: ObjectStore, clock: Clock, every: timedelta
    ) -> None:
        self._audit, self._objects, self._clock, self._every = audit, objects, clock, every
        self._seen_id = 0  # events up to this id were looked at
        self._waiting: dict[str, ChainHead] = {}  # moved, but checkpointed too recently
        # When each waiting chain's newest checkpoint is `every` old: storage is not asked
        # again before.
        self._not_before: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._listed = False  # the unkeyed chains are listed in storage

    def run_once(
        self,
        *,
        force: bool = False,
        only: set[str] | None = None,
        cut_short: threading.Event | None = None,
    ) -> CheckpointPass:
        """One pass: a checkpoint of every chain that moved (all of `only`, or every chain,
        when `force`), at most one per chain per `every` unless `force`. Never raises for
        one chain: a storage failure is logged and that chain is tried at the next pass.
        Once `cut_short` is set (a worker's shutdown past its grace) no further chain is
        begun: those left wait for the next pass, this process's or another's."""
        with self._lock:
            if not self._listed:
                self._list_unkeyed_chains()
            heads = self._audit.heads(after_id=0 if force else self._seen_id)
            if not force:
                self._seen_id = max([self._seen_id, *(h.event_id for h in heads)])
            for head in heads:
                self._waiting[head.workspace_id] = head
            now = self._clock.now()
            due = [
                head
                for workspace_id, head in sorted(self._waiting.items())
                if (only is None or workspace_id in only)
                and (force or self._not_before.get(workspace_id, now) <= now)
            ]
            written, failed = [], {}
            for head in due:
                if cut_short is not None and cut_short.is_set():
                    break
                try:
                    done = self._write(head, force=force)
                except (QExportError, ValueError) as exc:  # ValueError: a key storage refuses
                    log.warning(
                        "audit_checkpoint_not_written", workspace=head.workspace_id, error=str(exc)
                    )
                    failed[head.workspace_id] = str(exc)
                    continue
                if done is not False:
                    del self._waiting[head.workspace_id]
                    self._not_before.pop(head.workspace_id, None)
                if isinstance(done, Checkpoint):
                    written.append(done)
            return CheckpointPass(written, failed)

    def _list_unkeyed_chains(self) -> None:
        """Once per installation: the chains that hold events from before keys, signed, so
        that verify can tell a chain of unkeyed events made up later."""
        if unkeyed_chains(self._objects) is None:
            listed = unkeyed_chains_of(
                self._audit.unkeyed_chains(), self._clock.now(), self._audit.keys.current
            )
            if self._objects.put_new(UNKEYED_CHAINS, listed.document()):
                log.info("audit_unkeyed_chains_listed", workspaces=list(listed.workspaces))
        self._listed = True

    def _write(self, head: ChainHead, *, force: bool) -> Checkpoint | bool:
        """The checkpoint written for `head`; True when none is needed (the newest already
        names it, or the chain no longer holds it); False when it is not due yet."""
        now = self._clock.now()
        found = newest(self._objects, head.workspace_id)
        previous = found.checkpoint if found is not None else None
        if previous is not None:
            if previous.seq == head.seq and previous.hash == head.hash:
                return True
            if not force and previous.written_at > now - self._every:
                self._not_before[head.workspace_id] = previous.written_at + self._every
                return False
            refusal = self._refusal(head, previous)
            if refusal is not None:
                assert found is not None
                log.error(
                    "audit_chain_tampered",
                    workspace=head.workspace_id,
                    checkpoint=found.key,
                    reason=refusal,
                )
                return True
        checkpoint = checkpoint_of(head, now, self._audit.keys.current)
        key = object_key(head.workspace_id, head.seq)
        if not self._objects.put_new(key, checkpoint.document()):
            return True  # another writer stored this head's checkpoint first
        log.info(
            "audit_checkpoint_written",
            workspace=head.workspace_id,
            seq=head.seq,
            event_id=head.event_id,
            hash=head.hash,
            anchor_seq=head.anchor_seq,
            anchor_hash=head.anchor_hash,
            written_at=now.isoformat(),
            key_id=checkpoint.key_id,
            signature=checkpoint.signature,
            object=key,
        )
        return checkpoint

    def _refusal(self, head: ChainHead, previous: Checkpoint) -> str | None:
        """Why the chain as it is must not be checkpointed over `previous`: it ends before
        it, or holds another event at its sequence (None: it extends it, or was pruned
        past it, which verify judges by its anchor)."""
        if head.seq < previous.seq:
            return f"the chain ends at sequence {head.seq}, before the checkpoint's {previous.seq}"
        if previous.seq <= head.anchor_seq:
            return None
        event = self._audit.event_at(head.workspace_id, previous.seq)
        if event is None or event.hash != previous.hash:
            return f"the chain holds another event at the checkpoint's sequence {previous.seq}"
        return None
