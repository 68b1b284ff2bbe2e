"""The one place the Spark Connect client's exceptions become qexport errors.

- the server cannot be reached (gRPC UNAVAILABLE, the connect deadline): source_unavailable,
  retried;
- analysis or parsing (an unknown table or column, a syntax error, an unbound parameter):
  query_invalid, at its position in the query as written;
- a data error (SQLSTATE class 22: a bad CAST, a division by zero under ANSI): query_invalid,
  its quoted values cut out;
- the statement ran past its timeout (qexport interrupted it): query_timeout;
- anything else from the server (a failed job, a lost session): source_unavailable.

Spark's messages carry the plan, the SQL with a caret line and, when the server is told to,
the JVM stack trace: only the sentence before `SQLSTATE:` is kept. gRPC's name the server
(`ipv4:10.0.0.5:15002: Failed to connect to remote host: Connection refused`): members read
what it means (`connection refused`), the operator's log the whole (withheld.py).
"""

from __future__ import annotations

import re

import grpc
from pyspark.errors import PySparkException
from pyspark.errors.exceptions import connect as spark_errors

from qexport.domain.failures import (
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
    TextPosition,
    bounded_detail,
)
from qexport.sources.spark.statements import WRAPPED_SUFFIX, SparkQuery
from qexport.sources.withheld import logged, network_reason, without_layout

_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_DATA_ERRORS = (
    spark_errors.ArithmeticException,
    spark_errors.NumberFormatException,
    spark_errors.DateTimeException,
    spark_errors.ArrayIndexOutOfBoundsException,
    spark_errors.SparkNoSuchElementException,
    spark_errors.IllegalArgumentException,
)
_JAVA_CLASS = re.compile(r"^\((?:[\w$]+\.)+[\w$]+\)\s*")
_PARSE_POSITION = re.compile(r"\(line (\d+), pos (\d+)\)")
# Quoted literals in a data error quote row values: they must not reach failure_detail.
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'")


def timeout_error(seconds: float) -> QueryTimeoutError:
    return QueryTimeoutError(f"statement timeout of {seconds:g} s reached")


def reason(exc: BaseException) -> str:
    """Spark's own sentence for the error: no plan, SQL, position or stack trace."""
    get_message = getattr(exc, "getMessage", None)
    text = str(get_message() if callable(get_message) else exc)
    for end in ("\nJVM stacktrace:", "\n== SQL ==", " SQLSTATE:", "\n'"):
        text = text.partition(end)[0]
    text = _JAVA_CLASS.sub("", text.strip())
    return bounded_detail(text) or type(exc).__name__


def unreachable(name: str, exc: BaseException) -> SourceUnavailableError:
    reason = _grpc_reason(exc)
    logged("source_connect_failed", source=name, kind="spark", reason=reason)
    why = network_reason(reason) or without_layout(reason)
    return SourceUnavailableError(
        bounded_detail(
            f"the data source {name!r} cannot be reached: {why}; if that lasts, ask the operator"
        )
    )


def _grpc_reason(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    if callable(details):  # a bare grpc.RpcError
        return bounded_detail(str(details()))
    text = reason(exc)
    found = re.search(r'details = "([^"]*)"', text)
    return bounded_detail(found.group(1)) if found else text


def _status(exc: BaseException) -> grpc.StatusCode | None:
    if isinstance(exc, spark_errors.SparkConnectGrpcException):
        return exc.getGrpcStatusCode()
    code = getattr(exc, "code", None)
    return code() if isinstance(exc, grpc.RpcError) and callable(code) else None


def _position(exc: BaseException, sent: str, query: SparkQuery, sql: str) -> TextPosition | None:
    """Where in `sql` (the query as written) Spark found the mistake, if it said so and the
    place is in the query rather than in what qexport put around it."""
    offset: int | None = None
    contexts = exc.getQueryContext() if isinstance(exc, PySparkException) else []
    if contexts:
        start = contexts[0].startIndex()
        offset = start if start >= 0 else None
    elif found := _PARSE_POSITION.search(str(getattr(exc, "getMessage", lambda: "")())):
        line, column = int(found.group(1)), int(found.group(2))
        lines = sent.split("\n")
        if line <= len(lines):
            offset = sum(len(text) + 1 for text in lines[: line - 1]) + column
    if offset is None:
        return None
    start_of_query = sent.rfind(query.text + WRAPPED_SUFFIX)
    original = offset - start_of_query
    if start_of_query < 0 or not 0 <= original <= len(query.text):
        return None
    return TextPosition.at(sql, original)


def query_error(
    name: str,
    exc: BaseException,
    *,
    sent: str = "",
    query: SparkQuery | None = None,
    sql: str = "",
) -> QExportError:
    """The qexport error for an exception raised while a statement was analysed, ran or was
    read (`sent`: the text the server was given, for the position of a mistake in `sql`)."""
    if isinstance(exc, QExportError):
        return exc
    status = _status(exc)
    if isinstance(exc, spark_errors.AnalysisException):
        position = _position(exc, sent, query, sql) if query is not None else None
        return QueryInvalidError(reason(exc), position=position)
    state = exc.getSqlState() if isinstance(exc, spark_errors.SparkConnectGrpcException) else None
    if isinstance(exc, _DATA_ERRORS) or (state or "").startswith("22"):
        return QueryInvalidError(_QUOTED.sub("'…'", reason(exc)))
    if status in _UNREACHABLE:
        return unreachable(name, exc)
    if isinstance(exc, spark_errors.SparkConnectException | grpc.RpcError):
        said = reason(exc)
        told = without_layout(said)
        if told != said:
            logged("source_failed", source=name, kind="spark", reason=said)
        return SourceUnavailableError(bounded_detail(f"the data source {name!r} failed: {told}"))
    return QExportError(f"the data source {name!r} failed unexpectedly: {type(exc).__name__}")
