"""Checkpoints: a chain's head, signed, kept outside the database.

A keyed chain (domain/audit.py) cannot be rewritten without the secret, but its newest events
can still be deleted, or the whole chain replaced by an older copy of itself, and what is
left verifies. So the head of each chain (its sequence, its event's id and hash, and where
the chain starts) is written, signed with the checkpoint key (domain/audit_keys.py), to the
object store under `audit/checkpoints/<workspace>/`, outside the `exports/` prefix that the
storage lifecycle expires, and to the log. `audit verify` compares the database's chain
with the newest checkpoint: a head behind it (a truncated tail), another event at its
sequence (a replaced history) or another start (a removed beginning) is reported.

What a checkpoint cannot see: events written after it (at most QEXPORT_AUDIT_CHECKPOINT_EVERY
of them, in time) can be deleted from the tail unseen until the next one.

Names sort newest first (the sequence subtracted from 10^19 - 1, zero-padded), so that the
newest is the first name a listing returns: one request, whatever the number of checkpoints.
A chain's folder is its workspace id with every character but letters, digits, `-` and `_`
percent-encoded (the installation's `*` is `%2A`): a workspace id written into the database by
hand (`..`, `a/b`) still names one folder of its own.

Events from before keys (plain SHA-256) could be made up by anyone, so the chains that held
such events when keys began are listed once, signed, at `audit/unkeyed-chains.json` (the first
checkpoint pass writes it): a chain of unkeyed events that is not on the list was written
since, by someone without the secret.

Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from qexport.domain.audit import Anchor, ChainCheck, span
from qexport.domain.audit_keys import AuditKeys, ChainKey

PREFIX = "audit/checkpoints/"
UNKEYED_CHAINS = "audit/unkeyed-chains.json"
_LAST_NAME = 10**19 - 1
_NAME_DIGITS = 19
_VERSION = 1


@dataclass(frozen=True)
class ChainHead:
    """A chain's newest event and where the chain starts, as the database holds them."""

    workspace_id: str
    seq: int
    event_id: int
    hash: str
    at: datetime  # the newest event's time
    anchor_hash: str
    anchor_seq: int


@dataclass(frozen=True)
class Checkpoint:
    """A head as written at `written_at`, signed with the checkpoint key `key_id` names."""

    workspace_id: str
    seq: int
    event_id: int
    hash: str
    anchor_hash: str
    anchor_seq: int
    written_at: datetime
    key_id: str
    signature: str = ""

    def payload(self) -> bytes:
        """What the signature covers: every field but itself, as sorted-key compact JSON."""
        values = {**asdict(self), "written_at": self.written_at.isoformat(), "version": _VERSION}
        del values["signature"]
        return json.dumps(values, sort_keys=True, separators=(",", ":")).encode()

    def document(self) -> bytes:
        """The object stored (and the log line's fields): the payload and its signature."""
        return json.dumps(
            {**json.loads(self.payload()), "signature": self.signature}, sort_keys=True
        ).encode()

    @classmethod
    def read(cls, data: bytes) -> Checkpoint:
        """A stored checkpoint; ValueError when it is not one this module wrote."""
        try:
            raw: dict[str, Any] = json.loads(data)
            if raw.get("version") != _VERSION:
                raise ValueError(f"not a checkpoint: version {raw.get('version')!r}")
            values = {f.name: raw[f.name] for f in fields(cls)}
            values["written_at"] = datetime.fromisoformat(values["written_at"])
            found = cls(**values)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a checkpoint: {exc}") from None
        numbers = ("seq", "event_id", "anchor_seq")
        wrong = [name for name in numbers if not isinstance(getattr(found, name), int)]
        if wrong:
            raise ValueError(f"not a checkpoint: {', '.join(wrong)} not a number")
        return found

    def describe(self, where: str) -> str:
        """`the checkpoint of <time> (sequence N, at <where>)`."""
        return (
            f"the checkpoint of {self.written_at.isoformat(timespec='seconds')}"
            f" (sequence {self.seq}, at {where})"
        )


def checkpoint_of(head: ChainHead, written_at: datetime, key: ChainKey) -> Checkpoint:
    """`head`, signed with `key`'s checkpoint key at `written_at`."""
    unsigned = Checkpoint(
        head.workspace_id,
        head.seq,
        head.event_id,
        head.hash,
        head.anchor_hash,
        head.anchor_seq,
        written_at,
        key.key_id,
    )
    return replace(unsigned, signature=key.sign(unsigned.payload()))


def signature_problem(checkpoint: Checkpoint, keys: AuditKeys) -> str | None:
    """Why `checkpoint` is not to be believed (None: signed with a key given here)."""
    key = keys.find(checkpoint.key_id)
    if key is None:
        return (
            f"it is signed with key {checkpoint.key_id}, which is neither QEXPORT_SECRET_KEY's"
            " nor one of QEXPORT_SECRET_KEY_PREVIOUS's"
        )
    if not key.signed(checkpoint.payload(), checkpoint.signature):
        return "its signature does not match: it was not written by qexport with this secret"
    return None


def folder(workspace_id: str) -> str:
    """Where a chain's checkpoints are kept (the installation's chain, `*`, as %2A)."""
    encoded = "".join(
        chr(byte)
        if chr(byte).isascii() and (chr(byte).isalnum() or chr(byte) in "-_")
        else f"%{byte:02X}"
        for byte in workspace_id.encode()
    )
    return f"{PREFIX}{encoded or '%'}/"


def chain_of_folder(name: str) -> str:
    """The workspace a folder name under PREFIX (`acme/`) is the checkpoints of."""
    encoded = name.removesuffix("/")
    return "" if encoded == "%" else unquote(encoded)


def object_key(workspace_id: str, seq: int) -> str:
    """The checkpoint's key: newest first in name order, its sequence readable at the end."""
    return f"{folder(workspace_id)}{_LAST_NAME - seq:0{_NAME_DIGITS}d}-seq{seq}.json"


def compared(check: ChainCheck, anchor: Anchor, checkpoint: Checkpoint, where: str) -> str | None:
    """What the database's chain (walked in `check`, watching the checkpoint's sequence)
    lacks against `checkpoint`, stored at `where`; None when it holds everything it signed.

    A chain pruned since the checkpoint starts later: that is a prune's doing when the
    walk found its anchor named by a signed audit.pruned event (check.problem is None)."""
    said = checkpoint.describe(where)
    head_seq = check.head.seq if check.head is not None else anchor.seq
    if checkpoint.seq > head_seq:
        return (
            f"{span(head_seq + 1, checkpoint.seq)} missing: {said} names"
            f" sequence {checkpoint.seq} (event {checkpoint.event_id}, hash"
            f" {checkpoint.hash[:12]}...), the database's chain ends at sequence {head_seq}"
        )
    watched = check.watched
    if watched is not None and watched.hash != checkpoint.hash:
        return (
            f"the event at sequence {checkpoint.seq} (id {watched.id}) is not the one {said}"
            " signed: the history up to it was replaced"
        )
    if anchor.seq < checkpoint.anchor_seq or (
        anchor.seq == checkpoint.anchor_seq and anchor.hash != checkpoint.anchor_hash
    ):
        return (
            f"the chain starts after sequence {anchor.seq} (anchor {anchor.hash[:12]}...), but"
            f" {said} has it start after sequence {checkpoint.anchor_seq} (anchor"
            f" {checkpoint.anchor_hash[:12]}...): its beginning was replaced"
        )
    return None


@dataclass(frozen=True)
class UnkeyedChains:
    """The chains that held events from before keys when keys began, signed."""

    workspaces: tuple[str, ...]
    written_at: datetime
    key_id: str
    signature: str = ""

    def payload(self) -> bytes:
        values = {
            "workspaces": sorted(self.workspaces),
            "written_at": self.written_at.isoformat(),
            "key_id": self.key_id,
            "version": _VERSION,
        }
        return json.dumps(values, sort_keys=True, separators=(",", ":")).encode()

    def document(self) -> bytes:
        return json.dumps(
            {**json.loads(self.payload()), "signature": self.signature}, sort_keys=True
        ).encode()

    @classmethod
    def read(cls, data: bytes) -> UnkeyedChains:
        """The stored list; ValueError when it is not one this module wrote."""
        try:
            raw: dict[str, Any] = json.loads(data)
            found = cls(
                tuple(str(name) for name in raw["workspaces"]),
                datetime.fromisoformat(raw["written_at"]),
                str(raw["key_id"]),
                str(raw["signature"]),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a list of unkeyed chains: {exc}") from None
        if raw.get("version") != _VERSION:
            raise ValueError(f"not a list of unkeyed chains: version {raw.get('version')!r}")
        return found

    def signed_by(self, keys: AuditKeys) -> bool:
        key = keys.find(self.key_id)
        return key is not None and key.signed(self.payload(), self.signature)


def unkeyed_chains_of(workspaces: list[str], written_at: datetime, key: ChainKey) -> UnkeyedChains:
    unsigned = UnkeyedChains(tuple(sorted(workspaces)), written_at, key.key_id)
    return replace(unsigned, signature=key.sign(unsigned.payload()))


def unkeyed_problem(check: ChainCheck, listed: UnkeyedChains | None, keys: AuditKeys) -> str | None:
    """Why the chain's unkeyed events cannot be from before keys (None: it has none, or they
    may be; or no list was written yet)."""
    unkeyed = [stretch for stretch in check.stretches if stretch.key_id is None]
    if not unkeyed or listed is None:
        return None
    where = f"{UNKEYED_CHAINS} of {listed.written_at.isoformat(timespec='seconds')}"
    if not listed.signed_by(keys):
        return f"it holds events without a key, and {where} is not signed with a secret given"
    if check.workspace_id in listed.workspaces:
        return None
    first = unkeyed[0]
    return (
        f"its events at sequences {first.first_seq}-{first.last_seq} are hashed without a key,"
        f" but it held no such events when keys began ({where}): they were made up since"
    )
