"""Judging a source's role (a login, for MySQL) at every session, for the engines that can say
what it may do beyond reading (postgres/role.py, mysql/role.py): the session is refused unless
the role may only read, or the operator registered the source with --allow-privileged-role;
then the findings are logged once, and again when they change. postgres/source.py says why
it is judged at every session and not once per process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

import structlog

from qexport.domain.failures import QExportError

log = structlog.get_logger()

DriverError = TypeVar("DriverError", bound=BaseException)
DriverError_contra = TypeVar("DriverError_contra", bound=BaseException, contravariant=True)
Connection = TypeVar("Connection", bound="_Closable")


class _Closable(Protocol):
    def close(self) -> None: ...


class ConnectError(Protocol[DriverError_contra]):
    """An engine's `connect_error`: its driver's failure to log in, as a qexport error."""

    def __call__(
        self, name: str, exc: DriverError_contra, secrets: Iterable[str], /
    ) -> QExportError: ...


class QueryError(Protocol[DriverError_contra]):
    """An engine's `query_error`: its driver's failure while a statement ran."""

    def __call__(
        self,
        name: str,
        exc: DriverError_contra,
        secrets: Iterable[str],
        /,
        *,
        interrupted: bool,
        timed_out: bool,
        timeout_seconds: float,
    ) -> QExportError: ...


# (source name, role, findings) -> the engine's SourceRefusedError, in its own words.
Refusal = Callable[[str, str, list[str]], QExportError]


class RoleJudge(Generic[DriverError]):
    """One source's judge of its sessions' role; its driver's errors become qexport errors
    through the engine's own `connect_error` and `query_error`."""

    def __init__(
        self,
        source: str,
        secrets: Iterable[str],
        *,
        allow_privileged: bool,
        refusal: Refusal,
        driver_error: type[DriverError],
        connect_error: ConnectError[DriverError],
        query_error: QueryError[DriverError],
    ) -> None:
        self._source = source
        self._secrets = tuple(secrets)
        self._allow_privileged = allow_privileged
        self._refusal = refusal
        self._driver_error = driver_error
        self._connect_error = connect_error
        self._query_error = query_error
        self._allowed_findings: list[str] = []  # the last ones logged as allowed

    def judge(self, role: str, findings_of: Callable[[], list[str]]) -> list[str]:
        """Refuse the session (the engine's refusal) unless `role` may only read, or the
        operator allowed it: then its findings, logged once, and again when they change."""
        try:
            findings = findings_of()
        except self._driver_error as exc:
            raise self._query_error(
                self._source,
                exc,
                self._secrets,
                interrupted=False,
                timed_out=False,
                timeout_seconds=0,
            ) from exc
        if findings and not self._allow_privileged:
            raise self._refusal(self._source, role, findings)
        if findings and findings != self._allowed_findings:  # once, and again when they change
            log.warning(
                "source_role_privileged",
                source=self._source,
                role=role,
                findings=findings,
                reason="allowed with --allow-privileged-role",
            )
        self._allowed_findings = findings
        return findings

    def check(
        self, connect: Callable[[], Connection], judge: Callable[[Connection], list[str]]
    ) -> list[str]:
        """Connect and judge the role as a worker will (`judge` on a connection of its own,
        closed after): the refusal for a privileged one (unless allowed); the findings, for a
        warning, when it is allowed."""
        try:
            conn = connect()
        except self._driver_error as exc:
            raise self._connect_error(self._source, exc, self._secrets) from None
        with contextlib.closing(conn):
            return judge(conn)
