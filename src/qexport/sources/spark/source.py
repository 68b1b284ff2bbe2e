"""Spark Connect as a source: `sc://host:15002`, Spark Connect's own URL form, with its
parameters after `/;` (`sc://host:443/;token=...;use_ssl=true;user_id=reader`). The token is
a secret: registry.masked_url hides it wherever a URL is shown.

Each export gets a Spark session of its own on the server (its own client: a session id of its
own), set to UTC and to the export's batch size, released when the export ends, so nothing of
one export (a setting, a cached relation) is seen by another. Creating it and releasing it
cost 50-150 ms against a local server.

- The query, checked as one query (spark/statements.py), goes to the server only as a
  subquery, `SELECT * FROM (<query>) AS qexport_result`, where Spark's grammar takes nothing
  but a query. Spark has no read-only transaction: this, and the refusal of anything but one
  query statement before anything is sent, is what keeps an export from writing.
- `$name` placeholders and the requester context (`$user_id`, `$workspace_id`) are bound as
  Spark's named parameters (`:name`, `args=`), never written into the text.
- Its columns are typed from the server's analysis before it runs (spark/types.py): exact,
  nested ones as JSON text written by the server, the rest refused naming the column.
- The result streams as the Arrow batches the server sends (ExecutePlan's stream, read one
  batch at a time), never collected: `DataFrame.toArrow()` would hold the whole result.
- Every operation of an export carries a tag of its own; at the timeout, or when the worker
  stops the export, that tag is interrupted on the server (InterruptRequest), and the session
  released.
- Failing fast: the client's retries are off (qexport retries an export that found its source
  unavailable, with backoff) and connecting is bounded by CONNECT_SECONDS.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from qexport.domain.failures import QExportError
from qexport.domain.queries import ResultColumn
from qexport.domain.sensitivity import CANNOT_SAY, Relation
from qexport.sources.deadline import Deadline
from qexport.sources.describe_preview import (
    Asked,
    DescribeAndPreview,
    PreviewCaps,
    PreviewRead,
    weighed,
)
from qexport.sources.duckdb.statements import bound_values
from qexport.sources.spark.statements import SparkQuery, parse_spark_query

if TYPE_CHECKING:
    from pyspark.sql.connect.client import SparkConnectClient

    from qexport.config import Settings
    from qexport.domain.exports import Requester
    from qexport.domain.rule_check import Catalogue
    from qexport.sources.spark.types import ExportColumn

SCHEME = "sc://"
INSTALL = "pip install 'qexport[spark]'"
# How long reaching the server may take (the first call of an export): a host that drops
# packets fails the export source_unavailable after this, not after gRPC's retries.
CONNECT_SECONDS = 10.0
# Calls that end an operation or a session: the server answers them at once when it is there.
CLEANUP_SECONDS = 5.0
# Rows an Arrow batch (the session's spark.sql.execution.arrow.maxRecordsPerBatch) unless the
# reader asks for fewer: Spark's own default.
BATCH_ROWS = 10_000
PREVIEW_BATCH_ROWS = 50
# The server's error logs the pyspark client writes (they quote the query): not qexport's.
_SPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def from_url(
    name: str,
    url: str,
    settings: Settings,
    *,
    allow_privileged_role: bool = False,  # Spark Connect has no role a client can inspect
) -> SparkSource:
    """The source over an `sc://` URL (the `qexport.sources` entry point); ValueError, never
    echoing the URL, for an unusable one or when pyspark's connect client is missing."""
    if not url.startswith(SCHEME):
        raise ValueError("a Spark Connect source URL starts with sc://: sc://host:15002")
    try:
        from pyspark.errors import PySparkException
        from pyspark.sql.connect.client import DefaultChannelBuilder
    except ImportError:
        raise ValueError(f"the Spark Connect client is not installed: {INSTALL}") from None
    try:
        builder = DefaultChannelBuilder(url)
    except (PySparkException, ValueError):
        raise ValueError(
            "the Spark Connect URL is not usable: sc://host:port, with parameters after"
            " `/;` (sc://host:15002/;token=...;use_ssl=true)"
        ) from None
    if builder.session_id is not None:
        raise ValueError("a Spark Connect source URL names no session_id: each export has its own")
    return SparkSource(name, url)


class _Session:
    """One export's Spark Connect session: its own client, its operations tagged, stoppable
    from any thread; released once with `close()`."""

    def __init__(
        self,
        source: SparkSource,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None,
        batch_rows: int,
    ) -> None:
        from pyspark.sql.connect.client import SparkConnectClient
        from pyspark.sql.connect.client.core import RpcDeadlines
        from pyspark.sql.connect.proto import base_pb2 as pb2

        Deadline.validate(timeout_seconds)
        self._source = source
        self.timeout_seconds = timeout_seconds
        self.tag = f"qexport-{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._interrupted = False
        self._connected = False
        self._closed = False
        self.deadline = Deadline(0, lambda: None)
        bounded = timeout_seconds if 0 < timeout_seconds < math.inf else None
        self.client: SparkConnectClient = SparkConnectClient(
            source.url,
            use_reattachable_execute=False,  # one stream; a broken one fails the attempt
            rpc_deadlines=RpcDeadlines(
                config=CONNECT_SECONDS,
                analyze_plan=bounded,
                interrupt=CLEANUP_SECONDS,
                release_session=CLEANUP_SECONDS,
                fetch_error_details=CONNECT_SECONDS,
            ),
        )
        self.client.set_retry_policies([])
        settings = {
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(batch_rows),
            "spark.sql.connect.serverStacktrace.enabled": "false",
            "spark.sql.pyspark.jvmStacktrace.enabled": "false",
        }
        pairs = [pb2.KeyValue(key=key, value=value) for key, value in settings.items()]
        try:
            self.client.config(pb2.ConfigRequest.Operation(set=pb2.ConfigRequest.Set(pairs=pairs)))
            self._connected = True
            self.deadline = Deadline(timeout_seconds, self.interrupt)
            if on_interrupt is not None:
                on_interrupt(self.interrupt)
        except BaseException as exc:
            error = self.error_for(exc)
            self.close()
            raise error from exc

    def interrupt(self) -> None:
        """Stop the export's running operation on the server; the stream's next read ends."""
        with self._lock:
            if self._interrupted or self._closed:
                return
            self._interrupted = True
        try:
            self.client.interrupt_tag(self.tag)
        except Exception:
            # The server did not answer: close the channel, which ends the stream's read.
            with contextlib.suppress(Exception):
                self.client.close()

    def check(self) -> None:
        """Between batches: stop reading once interrupted or past the deadline."""
        with self._lock:
            interrupted = self._interrupted
        if interrupted:
            raise self.error_for(QExportError("the statement was interrupted"))

    def schema(self, query: SparkQuery, sent: str, values: Mapping[str, Any]) -> Any:
        """The columns Spark's analysis gives `sent`: nothing runs."""
        return self.client.schema(self.plan(sent, values))

    def plan(self, sent: str, values: Mapping[str, Any]) -> Any:
        from pyspark.sql.connect import functions
        from pyspark.sql.connect.plan import SQL

        named = {name: functions.lit(value) for name, value in values.items()}
        return SQL(sent, [], named).to_proto(self.client)

    def run(self, sent: str, values: Mapping[str, Any]) -> Iterator[Any]:
        """The server's responses to running `sent`, tagged with this export's tag."""
        request = self.client._execute_plan_request_with_metadata()
        request.plan.CopyFrom(self.plan(sent, values))
        request.tags.append(self.tag)
        # The client's only way to read a result one Arrow batch at a time: its public
        # methods collect it (toArrow, toPandas) or turn it into Python rows (toLocalIterator).
        return self.client._execute_and_fetch_as_iterator(request, {})

    def error_for(self, exc: BaseException, **where: Any) -> QExportError:
        import grpc

        from qexport.sources.spark.errors import query_error, timeout_error

        with self._lock:
            interrupted = self._interrupted
        if self.deadline.expired:
            return timeout_error(self.timeout_seconds)
        if interrupted:
            return QExportError("the statement was interrupted")
        code = getattr(exc, "getGrpcStatusCode", None)
        if self._connected and callable(code) and code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return timeout_error(self.timeout_seconds)  # the analysis ran past its deadline
        return query_error(self._source.name, exc, **where)

    def close(self) -> None:
        """Stop the clock, end the session on the server (ending what still runs in it) and
        close the channel; safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.deadline.cancel()
        if self._connected:
            with contextlib.suppress(Exception):
                self.client.release_session()
        with contextlib.suppress(Exception):
            self.client.close()
        # Each client registers a handler to run at exit, which would keep it for good.
        atexit.unregister(self.client._on_exit)


class _Run:
    """A checked query, its values and the session it runs in; `sent`, the text the server
    was given last, places a mistake the server reports in the query as written (`sql`)."""

    def __init__(
        self, session: _Session, query: SparkQuery, values: dict[str, Any], sql: str
    ) -> None:
        self.session = session
        self.query = query
        self.values = values
        self.sql = sql
        self.sent = query.wrapped()

    def columns(self) -> list[ExportColumn]:
        """The result's columns from Spark's analysis of the query: nothing runs."""
        from qexport.sources.spark.types import export_columns

        return export_columns(self.session.schema(self.query, self.query.wrapped(), self.values))

    def error_for(self, exc: BaseException) -> QExportError:
        return self.session.error_for(exc, sent=self.sent, query=self.query, sql=self.sql)

    def close(self) -> None:
        self.session.close()


class SparkResultStream:
    """The Arrow batches of one running statement; read once, then closed."""

    def __init__(
        self,
        run: _Run,
        responses: Iterator[Any],
        schema: pa.Schema,
        first: pa.RecordBatch | None,
    ) -> None:
        self.schema = schema
        self._run = run
        self._responses = responses
        self._first = first
        self._closed = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._closed:
            raise QExportError("the result stream was already closed")
        try:
            if self._first is not None:
                first, self._first = self._first, None
                yield first
            for batch in _batches(self._responses, self.schema):
                yield batch
                self._run.session.check()
        except Exception as exc:
            error = self._run.error_for(exc)
            self.close()
            raise error from exc
        self.close()

    def close(self) -> None:
        """End the statement if it still runs and release the session; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            close = getattr(self._responses, "close", None)
            if callable(close):
                close()
        self._run.close()


def _batches(responses: Iterator[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The record batches among the server's responses, in `schema` (Spark marks columns
    NOT NULL where they cannot be; an instant's zone may be spelled otherwise)."""
    same: bool | None = None
    for item in responses:
        if not isinstance(item, pa.RecordBatch):
            continue  # the schema, metrics
        if same is None:
            same = item.schema.equals(schema)
            types = [field.type for field in item.schema] == list(schema.types)
        if same:
            yield item
        elif types:
            yield pa.RecordBatch.from_arrays(item.columns, schema=schema)
        else:
            yield item.cast(schema)


def _quiet_spark_logs() -> None:
    """Silence the client's error logs: they quote the query and the plan, and the error they
    log reaches qexport's own log line as a bounded failure detail anyway."""
    from pyspark.logger import PySparkLogger

    for name in _SPARK_LOGGERS:
        # PySparkLogger's own getLogger: its loggers take keywords a plain Logger refuses.
        PySparkLogger.getLogger(name).disabled = True


class SparkSource(DescribeAndPreview[_Run]):
    """A Source over a Spark Connect server: one Spark session per statement."""

    translated = (BaseException,)
    native_copy = None  # every format through qexport's writers

    # Spark Connect gives no plan qexport reads tables from (catalogues, temporary views and
    # data sources by path): a policy's sensitive table of it covers every query on it.
    reads_reporting = CANNOT_SAY

    def __init__(self, name: str, url: str, *, batch_rows: int = BATCH_ROWS) -> None:
        self.name = name
        self.url = url
        self.batch_rows = batch_rows
        _quiet_spark_logs()

    def __repr__(self) -> str:
        from qexport.sources.registry import masked_url

        return f"SparkSource({self.name!r}, {masked_url(self.url)!r})"

    def execute(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
        batch_rows: int | None = None,
    ) -> SparkResultStream:
        """Start `sql` with bound parameters; the batches arrive as the stream is read."""
        from qexport.sources.spark.types import arrow_schema, projection

        query, values = self._statement(sql, parameters, requester)
        size = min(batch_rows or self.batch_rows, self.batch_rows)
        run = _Run(_Session(self, timeout_seconds, on_interrupt, size), query, values, sql)
        try:
            columns = run.columns()
            run.sent = sent = projection(columns, query.wrapped())
            schema = arrow_schema(columns)
            responses = run.session.run(sent, values)
            first = next(_batches(responses, schema), None)
        except BaseException as exc:
            error = run.error_for(exc)
            run.close()
            raise error from exc
        return SparkResultStream(run, responses, schema, first)

    def _open_statement(self, asked: Asked, caps: PreviewCaps | None) -> _Run:
        query, values = self._statement(asked.sql, asked.parameters, asked.requester)
        session = _Session(self, asked.timeout_seconds, None, PREVIEW_BATCH_ROWS)
        return _Run(session, query, values, asked.sql)

    def _describe_in(self, run: _Run, asked: Asked) -> list[ResultColumn]:
        """The columns, from Spark's analysis of the query: nothing runs. A column no export
        could hold (an interval) is refused here already, naming it."""
        return [ResultColumn(c.name, c.spark_type) for c in run.columns()]

    def relations(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation] | None:
        """None: this source cannot say what a statement reads."""
        return None

    def check_role(self) -> list[str]:
        """Not judged: Spark SQL's rights are its catalogue's, outside this source."""
        return []

    def catalogue(
        self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float
    ) -> Catalogue | None:
        """None: this source cannot say what its catalogue holds, nor what data it reaches."""
        return None

    def _preview_in(self, run: _Run, asked: Asked, caps: PreviewCaps) -> PreviewRead:
        """The query under a LIMIT of one row more, its texts and binaries cut on the server,
        read a few rows a batch."""
        from qexport.sources.spark.types import arrow_schema, projection

        columns = run.columns()
        cut = projection(columns, run.query.wrapped(), keep=caps.keep)
        run.sent = sent = f"{cut}\nLIMIT {caps.limit}"
        schema = arrow_schema(columns)
        described = tuple(ResultColumn(c.name, c.spark_type) for c in columns)
        batches = weighed(_batches(run.session.run(sent, run.values), schema))
        return PreviewRead(described, schema, batches)

    def _statement(
        self, sql: str, parameters: Mapping[str, Any], requester: Requester
    ) -> tuple[SparkQuery, dict[str, Any]]:
        """The checked query and the values of the `:name` markers it uses; refused here,
        before anything reaches the server, unless it is one query."""
        query = parse_spark_query(sql)
        values = bound_values(set(query.names), parameters, requester)
        return query, values
