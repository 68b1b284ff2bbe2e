"""Clean-up requests that S3 refused while it was unavailable, retried in the background.

An attempt that fails aborts its multipart upload at once; when S3 is the reason it failed,
that abort (after botocore's own retries) usually fails too. The attempt does not wait for S3
to come back: it hands the clean-up over to this queue and settles. A daemon thread retries
what is queued, with a growing delay, until S3 answers; whatever is still queued when the
process ends is removed by the bucket's lifecycle rules (incomplete uploads and staged copies
go after a day).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from qexport.domain.failures import QExportError

log = structlog.get_logger()


@dataclass(frozen=True)
class Leftover:
    """A multipart upload to abort (`upload_id` set) or a staged object to delete."""

    key: str
    upload_id: str | None = None


class DeferredCleanup:
    """A bounded queue of leftovers, emptied by `remove` on a background thread.

    `remove` raises a QExportError whose code is retryable while S3 is unavailable (the
    leftover is kept); any other error drops the leftover (retrying would not help).
    """

    def __init__(
        self,
        remove: Callable[[Leftover], None],
        *,
        first_delay: float = 5.0,
        max_delay: float = 300.0,
        capacity: int = 10_000,
    ) -> None:
        self._remove = remove
        self._first_delay = first_delay
        self._max_delay = max(max_delay, first_delay)
        self._queue: deque[Leftover] = deque()
        self._capacity = capacity
        self._lock = threading.Lock()
        self._round = threading.Lock()  # one retry round at a time (thread or retry_now)
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> list[Leftover]:
        with self._lock:
            return list(self._queue)

    def defer(self, leftover: Leftover) -> None:
        """Queue `leftover` and make sure the retry thread runs."""
        with self._lock:
            if len(self._queue) >= self._capacity:
                dropped = self._queue.popleft()
                log.warning("cleanup_dropped", key=dropped.key, upload_id=dropped.upload_id)
            self._queue.append(leftover)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._retry_until_empty, name="s3-cleanup", daemon=True
                )
                self._thread.start()
        log.info("cleanup_deferred", key=leftover.key, upload_id=leftover.upload_id)

    def retry_now(self) -> int:
        """One pass over the queue; returns how many leftovers are still queued."""
        with self._round:
            for leftover in self.pending:
                if self._try(leftover):
                    # It may have been dropped meanwhile, to make room for a newer one.
                    with self._lock, contextlib.suppress(ValueError):
                        self._queue.remove(leftover)
        with self._lock:
            return len(self._queue)

    def _try(self, leftover: Leftover) -> bool:
        """True when the leftover is gone (removed now, or not worth retrying)."""
        try:
            self._remove(leftover)
        except QExportError as exc:
            if exc.code.retryable:
                return False
            log.warning(
                "cleanup_dropped", key=leftover.key, upload_id=leftover.upload_id, error=str(exc)
            )
            return True
        except Exception:  # never let the retry thread die: the lifecycle rules remain
            log.exception("cleanup_dropped", key=leftover.key, upload_id=leftover.upload_id)
            return True
        log.info("cleanup_done", key=leftover.key, upload_id=leftover.upload_id)
        return True

    def _retry_until_empty(self) -> None:
        delay = self._first_delay
        while True:
            time.sleep(delay)
            left = self.retry_now()
            with self._lock:
                if not self._queue:
                    self._thread = None
                    return
            log.info("cleanup_waiting", left=left, retry_in_s=delay)
            delay = min(delay * 2, self._max_delay)
