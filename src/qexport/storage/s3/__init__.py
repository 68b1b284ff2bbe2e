"""The S3 object store: multipart uploads, create-if-absent completion, presigned GETs.

Metadata vs create-if-absent. `rows` and `sha256` must be the object's own user metadata (so
that an attempt losing the race adopts the winner from one HeadObject), but S3 fixes user
metadata when an upload is created, and they are known only at the end. Options weighed:
tags or a sidecar object are not atomic with the completion (a crash in between leaves an
object without metadata, forever); CopyObject to the final key caps objects at 5 GiB, and
moto ignores its `If-None-Match` (it overwrites). So the final write is always one request
that carries the metadata and `If-None-Match: *`, which S3 (since 2024-08) and moto honour:

- at most one part (the common small export): the part is held back in memory and the object
  is written by one PutObject at completion; nothing is staged;
- more parts: they go into a multipart upload at a staging key, `<prefix>.staging/<key>/<id>`,
  completed without metadata; then a multipart upload at the final key is created with the
  metadata, filled by server-side UploadPartCopy ranges of the staged object (no bytes go
  through the worker, no size limit), and completed with `If-None-Match: *`. The staged object
  is deleted after.

Leftovers. An attempt that dies (a kill, a lost machine) cannot abort its uploads, and S3 may
hold an upload whose id qexport never learnt: CreateMultipartUpload was processed, its answer
lost to a reset, and botocore's retry created a second one. Both are found from the key alone:
`discard_staging`, called once the export has settled, lists the multipart uploads at the final
key and under the key's staging prefix (ListMultipartUploads) and the staged objects there, and
removes them all. The bucket's one-day rules stay as the last backstop.

A 412 PreconditionFailed (the key is taken) or a 409 ConditionalRequestConflict (another
completion is in flight) aborts this upload and raises ObjectExistsError. Keys starting with a
dot are refused by `validate_key`, so staging keys never meet object keys.

Faults. Every request has a connect and a read timeout (a stalled connection fails that try
instead of holding the attempt) and is retried by botocore's standard retry mode: throttling
(503 SlowDown), 5xx, connection errors and timeouts, with jittered exponential backoff and
`retry_attempts` tries in all. What still fails is a StorageUnavailableError, retryable: the
attempt is released and the export redelivered later (`QEXPORT_MAX_ATTEMPTS` bounds that).
An upload that fails is aborted; an abort that S3 refuses because it is unavailable is handed
to `DeferredCleanup`, so that the attempt settles without waiting for S3 to come back.
"""
