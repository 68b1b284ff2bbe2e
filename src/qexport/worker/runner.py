"""One attempt at one claimed export: produce the file, store it, settle the record."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import structlog

from qexport.container import Container
from qexport.domain.approvals import (
    APPROVAL_OPTION,
    APPROVED_READS_OPTION,
    ApprovalStatus,
    reads_fingerprint,
)
from qexport.domain.exports import ExportRecord, Result, Status
from qexport.domain.failures import (
    AccessLostError,
    FailureCode,
    InvalidRequestError,
    LeaseLostError,
    LimitExceededError,
    MemoryRefusedError,
    MetadataUnavailableError,
    ObjectExistsError,
    QExportError,
    QueryInvalidError,
    WorkerMemoryError,
    memory_refused_detail,
)
from qexport.domain.lifecycle import Outcome, Release, backoff, give_up, settle_decision
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import Query, bind_parameters, can_read
from qexport.domain.reports import SUBJECT_REPORT, Report, ReportSubject, section_parameters
from qexport.domain.sensitivity import Relation
from qexport.ports import (
    StoredObject,
    WriterOptions,
)
from qexport.services.describe import describe_timeout
from qexport.services.sensitivity import planned_runs
from qexport.worker.lease import Lease, ShutdownRequestedError
from qexport.worker.sink import PartSink
from qexport.worker.staging import discard_staging
from qexport.writers.registry import get_writer

if TYPE_CHECKING:
    import pyarrow as pa

    from qexport.worker.memory import MemoryWatch

log = structlog.get_logger()


def _counted(
    batches: Iterator[pa.RecordBatch], lease: Lease, max_rows: int
) -> Iterator[pa.RecordBatch]:
    """Pass batches through, recording progress and enforcing the row limit."""
    rows = 0
    for batch in batches:
        lease.check()
        rows += batch.num_rows
        if rows > max_rows:
            raise LimitExceededError(f"the result has more than {max_rows:,} rows (the row limit)")
        lease.progress_rows = rows
        yield batch


def _run_values(bind: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """The values a run binds (`bind(*args)`); a value the query no longer takes fails
    query_invalid, as the run itself would."""
    try:
        return bind(*args)
    except InvalidRequestError as exc:
        raise QueryInvalidError(str(exc)) from exc


class Attempt:
    """Runs one claimed record to a settled (or released) state. Never raises."""

    def __init__(
        self,
        deps: Container,
        record: ExportRecord,
        shutdown: threading.Event,
        subject: Query | ReportSubject | None = None,
        memory: MemoryWatch | None = None,
    ) -> None:
        self.deps = deps
        self.record = record
        self.subject = subject  # as the claim read it; None: read it here
        self.shutdown = shutdown
        self.memory = memory
        self.rows = 0
        self.size = 0
        self.code: FailureCode | None = None
        self.staged = False  # this attempt's upload may have left something staged
        self._policy: WorkspacePolicy | None = None
        # What the run read, by source, as planned before it (None: not planned, as for a
        # file adopted from an earlier attempt): recorded with the file.
        self.reads: dict[str, frozenset[Relation] | None] | None = None

    def run(self) -> Outcome:
        outcome = self._run()
        if self._settled_by(outcome):
            discard_staging(self.deps.objects, self.record.storage_key)
        return outcome

    def _settled_by(self, outcome: Outcome) -> bool:
        """Whether the export has settled and something may be staged for it.

        A first attempt whose upload staged nothing (a one-part file on S3) leaves nothing:
        no other attempt ever wrote to the key, so no storage request is spent on looking.
        """
        if outcome not in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.LOST):
            return False  # released, handed back or interrupted: another attempt follows
        if self.record.attempt <= 1 and not self.staged:
            return False
        if outcome is not Outcome.LOST:
            return True
        # Cancelled (settled) or redelivered to another worker (still being written: keep).
        try:
            current = self.deps.exports.get_export(self.record.id)
        except Exception:  # run() never raises; the start-up sweep judges it later
            log.warning("staging_discard_skipped", exc_info=True)
            return False
        return current is not None and current.settled

    def _run(self) -> Outcome:  # noqa: PLR0911 - one return per way an attempt can end
        record, settings = self.record, self.deps.settings
        token = record.lease_token
        assert token is not None  # a claimed record always carries its lease token
        lease = Lease(
            self.deps.exports,
            self.deps.clock,
            record.id,
            token,
            lease_seconds=settings.lease_seconds,
            shutdown=self.shutdown,
        )
        try:
            with lease, self._watching(lease):
                # A file completed by an attempt that died before settling is adopted, even
                # by an attempt past the cap: the work is done.
                stored = self.deps.objects.head(record.storage_key)
                if stored is not None:
                    log.info("object_adopted", reason="completed by an earlier attempt")
                elif (exhausted := give_up(record, settings.max_attempts)) is not None:
                    reason = record.last_error_detail or "workers stopped before finishing"
                    detail = f"gave up after {settings.max_attempts} attempts: {reason}"
                    return self._fail(token, exhausted.code, detail)
                else:
                    stored = self._produce(lease)
                return self._succeed(token, stored)
        except LeaseLostError:
            return self._stopped()
        except ShutdownRequestedError:
            return self._hand_back(token)
        except MetadataUnavailableError:
            # Nothing is settled on a guess: the lease runs out and the export is redelivered
            # (adopting the stored file if there is one).
            log.warning("metadata_unavailable", exc_info=True)
            return Outcome.INTERRUPTED
        except (QExportError, MemoryError) as exc:  # MemoryError: Python or Arrow was refused
            return self._ended_by(token, lease, exc)
        except Exception:
            log.exception("attempt_crashed")
            return self._fail(
                token, FailureCode.INTERNAL, "an unexpected error occurred (see the worker logs)"
            )

    def _ended_by(self, token: str, lease: Lease, exc: QExportError | MemoryError) -> Outcome:
        """How an attempt that production ended with `exc` settles. An interrupted statement
        surfaces as the source's error: say why it was stopped."""
        if lease.lost:
            return self._stopped()
        if (memory := self._memory_failure(exc, lease)) is not None:
            return self._settle_memory(token, memory)
        if self.shutdown.is_set():
            return self._hand_back(token)
        assert isinstance(exc, QExportError)  # a MemoryError is a memory failure above
        return self._settle_error(token, exc)

    def _watching(self, lease: Lease) -> AbstractContextManager[None]:
        """The worker's memory watch over this attempt's production, if it has one."""
        if self.memory is None:
            return nullcontext()
        # Only the watch hands an export back with limit_exceeded: stopped beside others.
        alone = self.record.last_error_code is FailureCode.LIMIT_EXCEEDED

        def abandon(verdict: WorkerMemoryError | None) -> None:
            self._abandon(lease.token, verdict)

        return self.memory.watching(lease, alone=alone, abandon=abandon)

    def _abandon(self, token: str, verdict: WorkerMemoryError | None) -> None:
        """Settle now, from the memory watch's thread: the process is renewed under this
        attempt. Stopped for memory: by the verdict; otherwise handed back at once."""
        if verdict is not None:
            self._settle_memory(token, verdict)
            return
        self._release(
            token,
            0.0,
            FailureCode.ATTEMPTS_EXHAUSTED,
            "the worker's process was renewed mid-export, to get back memory another export took",
        )

    def _memory_failure(self, exc: BaseException, lease: Lease) -> LimitExceededError | None:
        """The memory error this attempt ends with, if it ended for memory: an allocation
        refused in its own thread (the backstop), else the watch's verdict, if any."""
        stopped = lease.stopped_by
        if isinstance(stopped, WorkerMemoryError) and not stopped.again:
            return stopped
        if isinstance(exc, (MemoryRefusedError, MemoryError)):
            limit = self.memory.limit if self.memory is not None else 0
            return MemoryRefusedError(memory_refused_detail(limit))
        return stopped if isinstance(stopped, WorkerMemoryError) else None

    def _settle_memory(self, token: str, exc: LimitExceededError) -> Outcome:
        """Fail limit_exceeded, or hand back an attempt stopped beside others (the watch's
        verdict) while attempts remain."""
        settings = self.deps.settings
        attempt = self.record.attempt
        if isinstance(exc, WorkerMemoryError) and exc.again and attempt < settings.max_attempts:
            delay = backoff(attempt, settings.retry_base_seconds, settings.retry_max_seconds)
            self._release(token, delay, FailureCode.LIMIT_EXCEEDED, exc.detail)
            return Outcome.RELEASED
        detail = exc.final_detail if isinstance(exc, WorkerMemoryError) else exc.detail
        return self._fail(token, FailureCode.LIMIT_EXCEEDED, detail)

    def _stopped(self) -> Outcome:
        log.info("attempt_stopped", reason="lease lost or export cancelled")
        return Outcome.LOST

    def _hand_back(self, token: str) -> Outcome:
        # Handed back, not failed: if workers keep stopping, it ends attempts_exhausted.
        self._release(token, 0.0, FailureCode.ATTEMPTS_EXHAUSTED, "the worker shut down mid-export")
        return Outcome.HANDED_BACK

    @property
    def policy(self) -> WorkspacePolicy:
        """The workspace's policy, read once an attempt (a change applies from the next)."""
        if self._policy is None:
            self._policy = self.deps.accounts.workspace_policy(self.record.workspace_id)
        return self._policy

    def _produce(self, lease: Lease) -> StoredObject:
        deps, record = self.deps, self.record
        # Requested before the policy changed, or by a schedule: the policy holds at run time.
        refusal = self.policy.format_refusal(record.format)
        if refusal is not None:
            raise AccessLostError(refusal)
        self._plan()
        if record.subject_type == SUBJECT_REPORT:
            return self._produce_report(lease)
        limit = self.policy.row_limit(deps.settings.max_rows)
        try:
            return self._produce_query(lease, limit)
        except LimitExceededError as exc:
            if limit < deps.settings.max_rows and f"more than {limit:,} rows" in str(exc):
                raise LimitExceededError(
                    f"the result has more than {limit:,} rows, the most the workspace's policy"
                    " allows an export"
                ) from exc
            raise

    def _plan(self) -> None:
        """Ask the sources' planners what this run reads, with the values it binds
        (services/sensitivity.py), to record with the file (`self.reads`) and to judge it
        by the workspace's policy (`_check_not_sensitive`)."""
        record = self.record
        read, runs, report = self._runs()
        planned = planned_runs(
            self.policy,
            self.deps.sources,
            self.deps.catalog,
            record.requester,
            runs,
            timeout_seconds=describe_timeout(self.deps.settings.statement_timeout_seconds),
        )
        self.reads = planned.reads
        if self.policy.sensitive_queries or self.policy.sensitive_tables:
            self._check_not_sensitive(planned.queries, read, report)

    def _runs(
        self,
    ) -> tuple[list[Query | None], list[tuple[Query, dict[str, Any]]], Report | None]:
        """The export's queries as its approval's fingerprint counts them (each once, None
        for a missing one), each run with the values it binds (the queries the requester may
        read), and its report (None for a query's export)."""
        record, catalog = self.record, self.deps.catalog
        runs: list[tuple[Query, dict[str, Any]]] = []
        if record.subject_type != SUBJECT_REPORT:
            found = self.subject if isinstance(self.subject, Query) else None
            query = found or catalog.get_query(record.subject_id)
            # What runs is what was planned: the query as read here, not read again (an
            # edit in between would run SQL no planner saw).
            self.subject = query
            if query is not None and can_read(record.requester, query):
                runs.append((query, _run_values(bind_parameters, query, record.parameters)))
            return [query], runs, None
        subject = self.subject if isinstance(self.subject, ReportSubject) else None
        if subject is None:
            from qexport.reports.run import load_subject

            subject = load_subject(catalog, record.subject_id)
        self.subject = subject  # rendered as planned (above)
        report = subject.report
        sections = report.sections if report is not None else ()
        # Each query once, as the request's fingerprint counts them (report_queries).
        read: list[Query | None] = [
            subject.queries.get(i) for i in dict.fromkeys(s.query_id for s in sections)
        ]
        for section in sections:
            query = subject.queries.get(section.query_id)
            if query is not None and can_read(record.requester, query):
                values = _run_values(section_parameters, section, query, record.parameters)
                runs.append((query, values))
        return read, runs, report

    def _check_not_sensitive(
        self, judged: list[Query], read: list[Query | None], report: Report | None
    ) -> None:
        """An export may read sensitive data only as an admin approved it: with its approval
        (approved, naming this export) and reading exactly what was approved. `judged`: its
        runs' queries with what their planners say they read now. One queued before its
        query (or a table it reads) was marked sensitive, a schedule's run, or one whose
        query or report changed since its approval fails access_lost, saying which table."""
        record = self.record
        why = self.policy.sensitivity(judged)
        if why is None:
            return
        approval_id = record.options.get(APPROVAL_OPTION)
        if approval_id is None:
            raise AccessLostError(
                f"{why}: its exports need an admin's approval (request it again; a schedule"
                " cannot export it)"
            )
        approval = self.deps.approvals.get_approval(str(approval_id))
        now_reads = reads_fingerprint(read, report)
        if (
            approval is None
            or approval.status is not ApprovalStatus.APPROVED
            or approval.export_id != record.id
            or record.options.get(APPROVED_READS_OPTION) != now_reads
        ):
            raise AccessLostError(
                f"the {record.subject_type} changed since its export was approved (its SQL,"
                " source, parameters or sections): request it again for an admin's approval"
            )

    def _produce_query(self, lease: Lease, max_rows: int) -> StoredObject:
        deps, record = self.deps, self.record
        query = (
            self.subject if self.subject is not None else deps.catalog.get_query(record.subject_id)
        )
        if isinstance(query, ReportSubject):
            raise TypeError("a query export was claimed with a report")
        if not can_read(record.requester, query):
            raise AccessLostError("the requester may no longer read this query, or it was deleted")
        assert query is not None  # can_read refused a missing query above
        # The workspace may have lost the source since the query was saved: access_lost.
        source = deps.sources.source_for(query.source, record.requester.workspace_id)
        try:
            values = bind_parameters(query, record.parameters)
        except InvalidRequestError as exc:
            raise QueryInvalidError(str(exc)) from exc
        writer = get_writer(record.format)
        options = WriterOptions(
            neutralize_formulas=bool(record.options.get("neutralize_formulas", True))
        )
        timeout = deps.settings.statement_timeout_seconds
        copier = source.native_copy
        if copier is not None and record.format in copier.native_formats:

            def native(sink: PartSink) -> int:
                def progress(rows: int) -> None:
                    lease.progress_rows = rows

                return copier.copy(
                    query.sql,
                    values,
                    record.requester,
                    fmt=record.format,
                    neutralize_formulas=options.neutralize_formulas,
                    sink=sink,
                    timeout_seconds=timeout,
                    max_rows=max_rows,
                    on_progress=progress,
                    on_interrupt=lease.on_stop,
                )

            return self._store(lease, native)
        stream = source.execute(
            query.sql,
            values,
            record.requester,
            timeout_seconds=timeout,
            on_interrupt=lease.on_stop,
        )

        def encode(sink: PartSink) -> int:
            batches = _counted(iter(stream), lease, max_rows)
            return writer.write(stream.schema, batches, sink, options)

        try:
            return self._store(lease, encode)
        finally:
            stream.close()

    def _produce_report(self, lease: Lease) -> StoredObject:
        """A report export: the pre-render check again, then every section rendered into one
        document in the upload."""
        from qexport.reports.run import load_subject, produce_report

        deps, record = self.deps, self.record
        subject = self.subject if isinstance(self.subject, ReportSubject) else None
        if subject is None:
            subject = load_subject(deps.catalog, record.subject_id)
        refusal = subject.refusal(record.requester)
        if refusal is not None:
            raise AccessLostError(refusal)
        for query in subject.queries.values():
            if query is not None:  # every section's source, before anything is rendered
                deps.sources.source_for(query.source, record.requester.workspace_id)
        return self._store(lease, lambda sink: produce_report(deps, record, subject, lease, sink))

    def _store(self, lease: Lease, produce: Callable[[PartSink], int]) -> StoredObject:
        """Stream what `produce` writes into a new upload at the key; complete or abort it."""
        deps, record = self.deps, self.record
        self.staged = True  # until the upload says otherwise: beginning it may fail half way
        upload = deps.objects.begin_upload(record.storage_key)
        try:
            sink = PartSink(
                upload, lease, part_size=deps.settings.part_size, max_bytes=deps.settings.max_bytes
            )
            try:
                self.rows = produce(sink)
                sha256 = sink.finish()
            finally:
                sink.close()
            self.size = sink.size
            lease.check()
            try:
                return upload.complete(rows=self.rows, sha256=sha256)
            except ObjectExistsError:
                adopted = deps.objects.head(record.storage_key)
                if adopted is None:
                    raise
                log.info("object_adopted", reason="another attempt completed first")
                return adopted
        except BaseException:
            upload.abort()
            raise
        finally:
            self.staged = upload.staged

    def _succeed(self, token: str, stored: StoredObject) -> Outcome:
        deps, record = self.deps, self.record
        now = deps.clock.now()
        result = Result(
            size_bytes=stored.size_bytes,
            row_count=stored.rows,
            sha256=stored.sha256,
            reads=self.reads,
        )
        self.rows, self.size = stored.rows, stored.size_bytes
        try:
            succeeded = deps.exports.succeed(
                record.id,
                token,
                now=now,
                result=result,
                expires_at=now + self.policy.retention(deps.settings.retention),
                quota_bytes=deps.settings.workspace_quota,
            )
        except LimitExceededError:
            # Over the workspace's quota: nothing stays stored; the export fails with it.
            deps.objects.delete(record.storage_key)
            raise
        if succeeded:
            return Outcome.SUCCEEDED
        current = deps.exports.get_export(record.id)
        if current is not None and current.status is Status.FAILED:
            # Cancelled while completing: nobody will ever serve or adopt this object.
            deps.objects.delete(record.storage_key)
        log.info("settle_refused", reason="lease lost before the record could settle")
        return Outcome.LOST

    def _settle_error(self, token: str, exc: QExportError) -> Outcome:
        settings = self.deps.settings
        decision = settle_decision(
            exc.code,
            self.record.attempt,
            settings.max_attempts,
            base=settings.retry_base_seconds,
            cap=settings.retry_max_seconds,
        )
        if isinstance(decision, Release):
            self._release(token, decision.delay, exc.code, exc.detail)
            return Outcome.RELEASED
        return self._fail(token, decision.code, exc.detail)

    def _release(self, token: str, delay: float, code: FailureCode, detail: str) -> None:
        deps = self.deps
        self.code = code
        try:
            deps.exports.release_with_backoff(
                self.record.id,
                token,
                now=deps.clock.now(),
                delay_seconds=delay,
                code=code,
                detail=detail,
            )
        except MetadataUnavailableError:  # the lease runs out instead: the same redelivery
            log.warning("release_failed", exc_info=True)

    def _fail(self, token: str, code: FailureCode, detail: str) -> Outcome:
        self.code = code
        try:
            ok = self.deps.exports.fail(
                self.record.id, token, now=self.deps.clock.now(), code=code, detail=detail
            )
        except MetadataUnavailableError:  # not settled: redelivered when the lease runs out
            log.warning("settle_failed", exc_info=True)
            return Outcome.INTERRUPTED
        return Outcome.FAILED if ok else Outcome.LOST


def run_attempt(
    deps: Container,
    record: ExportRecord,
    shutdown: threading.Event,
    worker_id: str,
    *,
    subject: Query | ReportSubject | None = None,
    memory: MemoryWatch | None = None,
) -> Outcome:
    """Run one attempt with its log context bound; emit the one canonical line for it.

    `subject`: the export's query or report as the claim read it, if it did; `memory`: the
    worker's memory watch, if it has one."""
    started = time.monotonic()
    with structlog.contextvars.bound_contextvars(
        export_id=record.id, attempt=record.attempt, worker=worker_id
    ):
        attempt = Attempt(deps, record, shutdown, subject, memory)
        outcome = attempt.run()
        log.info(
            "attempt_finished",
            outcome=outcome,
            code=attempt.code.value if attempt.code else None,
            format=record.format,
            rows=attempt.rows,
            bytes=attempt.size,
            duration_s=round(time.monotonic() - started, 3),
        )
    return outcome
