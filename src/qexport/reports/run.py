"""Produce a report export: run each section's query, render the document into the sink."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qexport.domain.failures import RenderFailedError
from qexport.domain.reports import ReportSubject

if TYPE_CHECKING:
    from qexport.domain.exports import ExportRecord
    from qexport.ports import MetadataStore, Sink
    from qexport.worker.lease import Lease
    from qexport.worker.runner import Deps


def load_subject(store: MetadataStore, report_id: str) -> ReportSubject:
    """The report and its sections' queries, read now (when the claim did not read them)."""
    report = store.get_report(report_id)
    if report is None:
        return ReportSubject(None)
    ids = {s.query_id for s in report.sections}
    return ReportSubject(report, {query_id: store.get_query(query_id) for query_id in ids})


def produce_report(
    deps: Deps, record: ExportRecord, subject: ReportSubject, lease: Lease, sink: Sink
) -> int:
    """Render `subject` as `record.format` into `sink`; return the total row count."""
    raise RenderFailedError("reports cannot be rendered yet")
