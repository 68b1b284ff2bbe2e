"""What attempts staged for an export is removed once the export has settled.

A failed attempt aborts its own upload, but an attempt that dies (SIGKILL, a lost machine)
cannot, and S3 may hold an upload whose id never reached qexport (a CreateMultipartUpload
processed, its answer lost, retried). So whoever settles the export discards everything staged
at its storage key, which was fixed at request time and names all of it; and a worker starting
up does the same for exports that settled while nobody was there to clean up (a worker killed
before a cancel, say). Only settled exports are touched: a settled record never changes again,
so whatever still writes to its key is an attempt that has already lost its lease.

Clean-up never changes how an export settled: its errors are logged, and what is left is found
by the next start-up sweep or, last, by the one-day lifecycle rules of the store.
"""

from __future__ import annotations

import threading

import structlog

from qexport.ports import ExportQueue, ObjectStore

log = structlog.get_logger()

_KEY_SEGMENTS = 4  # exports/<workspace>/<export id>/<file name> (domain.exports.storage_key)


def discard_staging(objects: ObjectStore, key: str) -> None:
    """Discard everything staged for a settled export's key; log, never raise, on failure."""
    try:
        found = objects.discard_staging(key)
    except Exception:  # clean-up must not undo a settled outcome; the sweep comes back for it
        log.warning("staging_discard_failed", key=key, exc_info=True)
        return
    if found:
        log.info("staging_discarded", key=key, leftovers=found)


def export_id_of(key: str) -> str | None:
    """The export id in a storage key, or None for a key qexport did not make."""
    segments = key.split("/")
    if len(segments) != _KEY_SEGMENTS or segments[0] != "exports":
        return None
    return segments[2]


def sweep_settled_staging(
    store: ExportQueue, objects: ObjectStore, stop: threading.Event | None = None
) -> int:
    """Discard the staging of every export that has settled; returns how many keys were swept.

    Staging of an unsettled export (queued, running, or unknown here) is never touched.
    """
    try:
        keys = objects.staged_keys()
    except Exception:  # the store is unavailable: the next start (or the lifecycle) sweeps
        log.warning("staging_sweep_failed", exc_info=True)
        return 0
    swept = 0
    for key in keys:
        if stop is not None and stop.is_set():
            break
        export_id = export_id_of(key)
        if export_id is None:
            continue
        try:
            record = store.get_export(export_id)
        except Exception:  # the metadata database is unavailable: stop, nothing is judged
            log.warning("staging_sweep_failed", exc_info=True)
            break
        if record is None or record.storage_key != key or not record.settled:
            continue
        discard_staging(objects, key)
        swept += 1
    log.info("staging_swept", keys=len(keys), swept=swept)
    return swept
