"""The one place psycopg's exceptions become qexport errors, for the PostgreSQL source.

Codes, by what retrying would do:
- the server cannot be reached, is starting or shutting down, runs out of connections or
  resources, drops the connection, or picks this query as a deadlock or serialisation
  victim: source_unavailable (retryable, the worker backs off and tries again);
- the server refuses qexport's login (wrong password, unknown role or database, no pg_hba
  entry, TLS required but refused): `SourceLoginError`, code access_lost (permanent). Another
  attempt would be refused the same way: qexport has lost its access to the data until
  whoever runs it fixes the source URL, and the detail says so (without the password or the
  URL). Not `internal`, which says "a bug, see the logs", nor the retryable
  `source_unavailable`;
- the query itself is refused (syntax, unknown column, permission denied on a table, a write
  in the read-only transaction, division by zero...): query_invalid;
- the statement timeout: query_timeout.

Only the error's primary message is kept: its DETAIL and CONTEXT can quote row values, and
messages about values (SQLSTATE class 22) have their quoted parts removed. Where the server is
(libpq names its host, address, port or socket before every reason) is for the operator's log
only (withheld.py): members read `cannot be reached: connection refused`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import psycopg
import structlog

from qexport.domain.failures import (
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceLoginError,
    SourceUnavailableError,
    bounded_detail,
)
from qexport.sources.withheld import logged, network_reason, without_layout

log = structlog.get_logger()


# SQLSTATE classes worth another attempt: connection exception, insufficient resources,
# operator intervention (admin shutdown...), system error, transaction rollback (deadlock,
# serialisation), object not in prerequisite state (lock not available).
_TRANSIENT_CLASSES = frozenset({"08", "53", "57", "58", "40", "55"})
# Invalid authorization, invalid catalog name (no such database).
_LOGIN_CLASSES = frozenset({"28", "3D"})
_VALUE_CLASSES = frozenset({"22", "23"})
_QUERY_CANCELED = "57014"

# libpq reports a refused login as text only (no SQLSTATE before the session exists).
_LOGIN_REFUSALS = re.compile(
    r'authentication failed|role ".*" does not exist|database ".*" does not exist'
    r"|no pg_hba\.conf entry|pg_hba\.conf rejects|password is required|no password supplied"
    r"|is not permitted to log in|permission denied for database"
    r"|does not support SSL|certificate verify failed",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"\"(?:[^\"]|\"\")*\"|'(?:[^']|'')*'")


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` without any of `secrets` (the password, the URL) in it."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


# libpq names the server before its reason: 'connection to server at "db" (10.0.0.5), port
# 5432 failed: Connection refused', 'connection to server on socket "/run/.s.PGSQL.5432"
# failed: No such file or directory'; psycopg puts 'connection failed: ' before it all.
_LIBPQ_PLACE = re.compile(
    r'^(?:[a-z ]+: )?connection to server (?:at "[^"]*"(?: \([^)]*\))?, port \d+'
    r'|on socket "[^"]*") failed: '
)


def _reason(exc: psycopg.Error) -> str:
    """The server's primary message, or libpq's reason (its first line, after the place)."""
    primary = exc.diag.message_primary
    if primary:
        return primary
    text = str(exc).strip().split("\n", 1)[0]
    text = _LIBPQ_PLACE.sub("", text).removeprefix("connection failed: ")
    return text.replace("FATAL:  ", "")


def connect_error(name: str, exc: psycopg.Error, secrets: Iterable[str]) -> QExportError:
    """The qexport error for a failure to open a session on the source: the reason without
    the server's place for members, libpq's whole text for the log."""
    logged("source_connect_failed", source=name, kind="postgresql", reason=scrub(str(exc), secrets))
    reason = scrub(_reason(exc), secrets)
    state = exc.sqlstate or ""
    if state[:2] in _LOGIN_CLASSES or _LOGIN_REFUSALS.search(reason):
        return SourceLoginError(
            bounded_detail(
                f"PostgreSQL source {name!r} refused qexport's login (authentication failed:"
                f" {without_layout(reason)}); check the user, password and database in the"
                " source URL"
            )
        )
    why = network_reason(reason) or without_layout(reason)
    return SourceUnavailableError(
        bounded_detail(
            f"PostgreSQL source {name!r} cannot be reached: {why}; if that lasts, ask the operator"
        )
    )


def _told(name: str, exc: psycopg.Error, reason: str, secrets: Iterable[str]) -> str:
    """`reason` as members read it (no place); libpq's whole text to the log when that took
    something out."""
    told = without_layout(reason)
    if told != reason:
        logged("source_failed", source=name, kind="postgresql", reason=scrub(str(exc), secrets))
    return told


def timeout_error(seconds: float) -> QueryTimeoutError:
    return QueryTimeoutError(f"statement timeout of {seconds:g} s reached")


def query_error(
    name: str,
    exc: psycopg.Error,
    secrets: Iterable[str],
    *,
    interrupted: bool,
    timed_out: bool,
    timeout_seconds: float,
) -> QExportError:
    """The qexport error for a failure while running or reading a statement.

    `interrupted`: qexport itself cancelled the statement (the export's lease stopped it).
    `timed_out`: the statement ran for at least the statement timeout.
    """
    state = exc.sqlstate or ""
    reason = scrub(_reason(exc), secrets)
    if state == _QUERY_CANCELED:
        return _cancel_error(name, reason, interrupted, timed_out, timeout_seconds)
    if state[:2] in _LOGIN_CLASSES:
        return connect_error(name, exc, secrets)
    if state[:2] in _VALUE_CLASSES or (not state and isinstance(exc, psycopg.DataError)):
        # Values the query met (or a parameter's) are data: they stay out of failure_detail.
        return QueryInvalidError(bounded_detail(_QUOTED.sub("…", reason)))
    lost = not state and isinstance(exc, psycopg.OperationalError)
    if lost or state[:2] in _TRANSIENT_CLASSES:
        told = _told(name, exc, reason, secrets)
        return SourceUnavailableError(bounded_detail(f"PostgreSQL source {name!r} failed: {told}"))
    if not state or state[:2] == "XX":
        log.warning(
            "postgres_source_failed", error=type(exc).__name__, sqlstate=state, reason=reason
        )
        return QExportError(
            f"the PostgreSQL source failed unexpectedly ({state or type(exc).__name__})"
        )
    return QueryInvalidError(bounded_detail(reason))


def _cancel_error(
    name: str, reason: str, interrupted: bool, timed_out: bool, timeout_seconds: float
) -> QExportError:
    if interrupted:
        return QExportError("the statement was interrupted")
    # The message is the server's, maybe translated: how long it ran is the sure sign.
    if timed_out or "statement timeout" in reason:
        return timeout_error(timeout_seconds)
    return SourceUnavailableError(
        bounded_detail(f"PostgreSQL source {name!r} cancelled the statement: {reason}")
    )
