"""The bucket lifecycle rules that the filesystem sweeper mirrors, applied and checked on S3.

Rules (scoped to the store's prefix, identified by ids of their own so that other rules on a
shared bucket are left alone): objects under `exports/` expire `retention + 1 day` after they
were completed, rounded up to whole days; multipart uploads neither completed nor aborted are
aborted a day after they began; staged copies left by a crash (`.staging/`) expire after a day.
The two one-day rules are the backstop: workers discard what was staged for an export as soon
as it settles (`S3ObjectStore.discard_staging`), and sweep at their start.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from qexport.domain.failures import QExportError
from qexport.storage.s3.errors import error_code, s3_errors
from qexport.storage.s3.store import STAGING_DIR, S3ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import (
        BucketLifecycleConfigurationTypeDef,
        LifecycleRuleOutputTypeDef,
        LifecycleRuleTypeDef,
    )

EXPIRY_GRACE = timedelta(days=1)
INCOMPLETE_UPLOAD_DAYS = 1
STAGED_COPY_DAYS = 1


def expiry_days(retention: timedelta) -> int:
    """Whole days after completion at which an export object is deleted."""
    return math.ceil((retention + EXPIRY_GRACE) / timedelta(days=1))


def lifecycle_rules(retention: timedelta, prefix: str) -> BucketLifecycleConfigurationTypeDef:
    """The lifecycle configuration for a store whose keys start with `prefix`."""
    rules: list[LifecycleRuleTypeDef] = [
        {
            "ID": _rule_id(prefix, "expire-exports"),
            "Filter": {"Prefix": f"{prefix}exports/"},
            "Status": "Enabled",
            "Expiration": {"Days": expiry_days(retention)},
        },
        {
            "ID": _rule_id(prefix, "abort-incomplete-uploads"),
            "Filter": {"Prefix": prefix},
            "Status": "Enabled",
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": INCOMPLETE_UPLOAD_DAYS},
        },
        {
            "ID": _rule_id(prefix, "expire-staged-copies"),
            "Filter": {"Prefix": f"{prefix}{STAGING_DIR}"},
            "Status": "Enabled",
            "Expiration": {"Days": STAGED_COPY_DAYS},
        },
    ]
    return {"Rules": rules}


def apply_lifecycle(store: S3ObjectStore, retention: timedelta) -> None:
    """Install the rules on the bucket, keeping any rule that is not qexport's for this prefix."""
    wanted = lifecycle_rules(retention, store.prefix)["Rules"]
    ours = {rule["ID"] for rule in wanted}
    # Rules read back are re-sent as they are: the output and input shapes are the same JSON.
    kept: list[Any] = [rule for rule in _current_rules(store) if rule.get("ID") not in ours]
    with s3_errors("set the lifecycle rules of", store.bucket, store.bucket):
        store.client.put_bucket_lifecycle_configuration(
            Bucket=store.bucket, LifecycleConfiguration={"Rules": [*kept, *wanted]}
        )


def check_lifecycle(store: S3ObjectStore, retention: timedelta) -> list[str]:
    """What differs between the bucket's rules and the expected ones; empty when in sync."""
    current = {rule.get("ID"): _summary(rule) for rule in _current_rules(store)}
    drift: list[str] = []
    for rule in lifecycle_rules(retention, store.prefix)["Rules"]:
        rule_id, expected = rule["ID"], _summary(rule)
        found = current.get(rule_id)
        if found is None:
            drift.append(f"rule {rule_id!r} is missing")
        elif found != expected:
            drift.append(f"rule {rule_id!r} is {_describe(found)}, expected {_describe(expected)}")
    return drift


def _rule_id(prefix: str, name: str) -> str:
    return f"qexport:{prefix}:{name}" if prefix else f"qexport:{name}"


def _current_rules(store: S3ObjectStore) -> list[LifecycleRuleOutputTypeDef]:
    try:
        with s3_errors("read the lifecycle rules of", store.bucket, store.bucket):
            found = store.client.get_bucket_lifecycle_configuration(Bucket=store.bucket)
    except QExportError as exc:
        cause = exc.__cause__
        if isinstance(cause, ClientError) and error_code(cause) == "NoSuchLifecycleConfiguration":
            return []
        raise
    return list(found.get("Rules", []))


_Summary = tuple[str, str, int | None, int | None]


def _summary(rule: LifecycleRuleTypeDef | LifecycleRuleOutputTypeDef) -> _Summary:
    """The parts of a rule qexport cares about: status, prefix, expiry and abort days."""
    rule_filter = rule.get("Filter")
    prefix = rule_filter.get("Prefix", "") if rule_filter else rule.get("Prefix", "")
    expiration = rule.get("Expiration")
    expiry = expiration.get("Days") if expiration else None
    abort_rule = rule.get("AbortIncompleteMultipartUpload")
    abort = abort_rule.get("DaysAfterInitiation") if abort_rule else None
    return (rule.get("Status", ""), prefix, expiry, abort)


def _describe(summary: _Summary) -> str:
    status, prefix, expiry, abort = summary
    parts = [status.lower(), f"on prefix {prefix!r}"]
    if expiry is not None:
        parts.append(f"expiring objects after {expiry} days")
    if abort is not None:
        parts.append(f"aborting uploads after {abort} days")
    return " ".join(parts)


class S3Retention:
    """RetentionRules of an S3 store: the bucket's lifecycle rules."""

    swept = False

    def __init__(self, store: S3ObjectStore) -> None:
        self._store = store
        self.where = f"s3://{store.bucket}/{store.prefix}"

    def apply(self, now: datetime, retention: timedelta) -> str:
        apply_lifecycle(self._store, retention)
        return (
            f"{self.where}: rules written (exports expire after {expiry_days(retention)} days,"
            " incomplete uploads are aborted after 1 day)"
        )

    def drift(self, retention: timedelta) -> list[str]:
        return check_lifecycle(self._store, retention)
