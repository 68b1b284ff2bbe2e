"""Produce a report export: run each section's query, render the document into the sink."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from qexport.domain.failures import QExportError, RenderFailedError
from qexport.domain.reports import ReportSubject
from qexport.reports.budget import CellBudget
from qexport.reports.context import requester_label, workspace_zone
from qexport.reports.model import DocumentInfo
from qexport.reports.registry import DOCUMENTS, start_document
from qexport.reports.sections import read_section

if TYPE_CHECKING:
    from qexport.container import Container
    from qexport.domain.exports import ExportRecord
    from qexport.ports import AttemptLease, Catalog, Sink

log = structlog.get_logger()
T = TypeVar("T")


def load_subject(store: Catalog, report_id: str) -> ReportSubject:
    """The report and its sections' queries, read now (when the claim did not read them)."""
    report = store.get_report(report_id)
    if report is None:
        return ReportSubject(None)
    ids = {s.query_id for s in report.sections}
    return ReportSubject(report, {query_id: store.get_query(query_id) for query_id in ids})


def produce_report(
    deps: Container,
    record: ExportRecord,
    subject: ReportSubject,
    lease: AttemptLease,
    sink: Sink,
) -> int:
    """Render `subject` as `record.format` into `sink`; return the total row count.

    A section's query error keeps its own code (query_timeout, query_invalid...); anything
    else going wrong in the renderer settles the export render_failed."""
    report = subject.report
    if report is None:  # the pre-render check refuses this before we get here
        raise RenderFailedError("the report is missing")
    if record.format not in DOCUMENTS:
        raise RenderFailedError(f"reports cannot be rendered as {record.format!r}")
    info = DocumentInfo(
        title=report.title,
        description=report.description,
        requester=requester_label(deps.accounts, record.requested_by),
        generated_at=deps.clock.now().astimezone(
            workspace_zone(deps.accounts, record.workspace_id)
        ),
    )
    document = _rendering(
        "the title block",
        record.format,
        lambda: start_document(record.format, info, sink, deps.settings),
    )
    budget = CellBudget(deps.settings.report_max_bytes)
    try:
        total = 0
        for section in report.sections:
            lease.check()
            query = subject.queries.get(section.query_id)
            if query is None:  # the pre-render check refuses this before we get here
                raise RenderFailedError(f"the query of section {section.heading!r} is missing")
            data = read_section(deps, record, section, query, lease, total, budget)
            total += len(data.rows)
            lease.progress_rows = total
            _rendering(f"section {section.heading!r}", record.format, document.add, data)
        _rendering("the end of the document", record.format, document.finish)
    finally:
        document.close()
    return total


def _rendering(what: str, fmt: str, step: Callable[..., T], *args: Any) -> T:
    """Run a renderer step; its own errors pass, anything else becomes render_failed.

    The detail names the failure's type, not its message, which may quote row data."""
    try:
        return step(*args)
    except QExportError:
        raise
    except Exception as exc:
        log.warning("report_render_failed", part=what, error=type(exc).__name__)
        raise RenderFailedError(
            f"the {fmt.upper()} renderer could not render {what} ({type(exc).__name__})"
        ) from exc
