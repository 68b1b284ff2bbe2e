"""Many claimers at once: every queued export is claimed exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime

import pytest

from qexport.domain.exports import ExportRecord
from tests.support import queue_helpers
from tests.support.factories import new_export
from tests.support.stores import MetadataStore

EXPORTS = 500
CLAIMERS = 8


@pytest.mark.parametrize("how", ["claim_next", "peek_then_claim"])
def test_concurrent_claimers_take_each_export_exactly_once(
    sql_store: MetadataStore, how: str
) -> None:
    """8 threads claim from 500 queued exports until none is left: 500 claims, no export
    claimed twice, every one running on its first attempt."""
    now = datetime.now(UTC)
    for _ in range(EXPORTS):
        sql_store.insert_export(new_export(now))
    claimed: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def claim_one(name: str) -> tuple[bool, ExportRecord | None]:
        """(anything left?, what this claimer got)"""
        if how == "claim_next":
            result = sql_store.claim_next(
                worker_id=name, now=now, lease_seconds=600, admit=lambda _e, _q, _s: None
            )
            return result.claimed is not None, result.claimed
        candidate = queue_helpers.next_claimable(sql_store, now)
        if candidate is None:
            return False, None
        return True, queue_helpers.claim(
            sql_store, candidate.id, worker_id=name, now=now, lease_seconds=600
        )

    def claimer(name: str) -> None:
        try:
            while True:
                more, record = claim_one(name)
                if not more:
                    return
                if record is not None:
                    assert record.attempt == 1
                    with lock:
                        claimed.append(record.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    counts = Counter(claimed)
    assert len(counts) == EXPORTS
    assert set(counts.values()) == {1}
