"""The document writer for each report format."""

from __future__ import annotations

from collections.abc import Callable

from qexport.config import Settings
from qexport.domain.failures import InvalidRequestError
from qexport.ports import Sink
from qexport.reports.html import HtmlDocument
from qexport.reports.model import DocumentInfo, DocumentWriter
from qexport.reports.pdf import PdfDocument
from qexport.reports.xlsx import XlsxDocument

DocumentFactory = Callable[[DocumentInfo, Sink, Settings], DocumentWriter]

DOCUMENTS: dict[str, DocumentFactory] = {
    "pdf": lambda info, sink, settings: PdfDocument(
        info, sink, max_rows=settings.report_pdf_max_rows
    ),
    "xlsx": lambda info, sink, _settings: XlsxDocument(info, sink),
    "html": lambda info, sink, _settings: HtmlDocument(info, sink),
}


def start_document(fmt: str, info: DocumentInfo, sink: Sink, settings: Settings) -> DocumentWriter:
    """A new document of format `fmt` writing into `sink`."""
    factory = DOCUMENTS.get(fmt)
    if factory is None:
        raise InvalidRequestError(
            f"unknown report format {fmt!r} (one of: {', '.join(sorted(DOCUMENTS))})",
            field="format",
        )
    return factory(info, sink, settings)
