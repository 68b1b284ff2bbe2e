"""The audit chain's keys: derived from QEXPORT_SECRET_KEY, which never sits in the database.

An event's hash is HMAC-SHA256 under a key of its workspace's chain, so that someone who can
write the metadata database but does not hold the secret cannot recompute a chain after
removing or editing an event (a plain SHA-256 chain, as events carried before keys, can be
recomputed by anyone). Three keys are derived from the secret with HKDF-SHA256 (RFC 5869, no
salt, one 32-byte block), each under a label of its own:

- the chain key, from which each workspace's event key is taken (HMAC of the workspace id);
- the checkpoint key, which signs the heads written to object storage (audit_checkpoints.py);
- the key id, 12 hex characters stored with each event, which names the secret an event was
  keyed with, so that after a rotation (a new QEXPORT_SECRET_KEY, the old one kept in
  QEXPORT_SECRET_KEY_PREVIOUS) every event is checked with its own secret. It says nothing
  usable about the secret: 48 bits of an HMAC output.

HMAC was chosen over a signature per event, which would let a verifier check the chain without
the secret, but costs more (Ed25519 with `cryptography`: 132 us to sign, 312 us to verify,
against 12 us for an HMAC of a 400-byte event, on the shared test machine); and over an
unkeyed chain signed only at checkpoints, where anything written after the last checkpoint
could be rewritten unseen.

None of the keys ever leaves the process: every event's HMAC is computed in Python, on
PostgreSQL too (store/audit/chain.py), so neither the database, its functions nor its logs ever
see one. (Until migration 0025, PostgreSQL computed the HMAC in a function of the database,
handed the event key's pads with each append: whoever held qexport's database login could
have replaced that function with one that kept them.)

Pure: no I/O (hmac and hashlib only).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field

from qexport.domain.failures import QExportError

KEY_ID_CHARS = 12
_CHAIN_LABEL = b"qexport audit chain v1"
_CHECKPOINT_LABEL = b"qexport audit checkpoint v1"
_KEY_ID_LABEL = b"qexport audit key id v1"


def _hkdf(secret: bytes, label: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) with no salt, 32 bytes: extract, then one block of expand."""
    pseudo_random = hmac.new(b"\0" * 32, secret, hashlib.sha256).digest()
    return hmac.new(pseudo_random, label + b"\x01", hashlib.sha256).digest()


@dataclass(frozen=True, repr=False)
class ChainKey:
    """The keys one secret gives: an event key per workspace, the checkpoint key, its id."""

    key_id: str
    _chain: bytes = field(compare=False)
    _checkpoint: bytes = field(compare=False)
    # Each workspace's event key, once derived (a verify walk keys every event of a chain).
    _event_keys: dict[str, bytes] = field(default_factory=dict, compare=False)

    @classmethod
    def derive(cls, secret: str) -> ChainKey:
        if not secret:
            raise ValueError("the audit chain's secret is empty")
        raw = secret.encode()
        key_id = _hkdf(raw, _KEY_ID_LABEL).hex()[:KEY_ID_CHARS]
        return cls(key_id, _hkdf(raw, _CHAIN_LABEL), _hkdf(raw, _CHECKPOINT_LABEL))

    def __repr__(self) -> str:
        return f"ChainKey({self.key_id})"

    def event_key(self, workspace_id: str) -> bytes:
        """The key a workspace's events are hashed with."""
        key = self._event_keys.get(workspace_id)
        if key is None:
            key = hmac.digest(self._chain, b"workspace:" + workspace_id.encode(), "sha256")
            self._event_keys[workspace_id] = key
        return key

    def mac(self, workspace_id: str, message: bytes) -> str:
        """HMAC-SHA256 of `message` under the workspace's event key, as hex."""
        return hmac.digest(self.event_key(workspace_id), message, "sha256").hex()

    def sign(self, payload: bytes) -> str:
        """The checkpoint signature of `payload` (HMAC-SHA256 under the checkpoint key)."""
        return hmac.new(self._checkpoint, payload, hashlib.sha256).hexdigest()

    def signed(self, payload: bytes, signature: str) -> bool:
        return hmac.compare_digest(self.sign(payload), signature)


@dataclass(frozen=True)
class AuditKeys:
    """The secret events are keyed with now, and the former ones they may have been keyed
    with (QEXPORT_SECRET_KEY_PREVIOUS), which verify but never key."""

    current: ChainKey
    previous: tuple[ChainKey, ...] = ()

    @classmethod
    def from_secrets(cls, current: str, previous: Iterable[str] = ()) -> AuditKeys:
        key = ChainKey.derive(current)
        former = {k.key_id: k for k in map(ChainKey.derive, previous) if k.key_id != key.key_id}
        return cls(key, tuple(former.values()))

    def find(self, key_id: str) -> ChainKey | None:
        """The key with this id, current or former; None when no secret given here has it."""
        return next((k for k in (self.current, *self.previous) if k.key_id == key_id), None)

    @property
    def key_ids(self) -> list[str]:
        return [k.key_id for k in (self.current, *self.previous)]


class AuditKeyMissingError(QExportError):
    """An audit event was to be written where no secret keys the chain."""
