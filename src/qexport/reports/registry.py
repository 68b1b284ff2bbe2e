"""The document writer for each report format."""

from __future__ import annotations

from collections.abc import Callable

from qexport.domain.failures import InvalidRequestError
from qexport.ports import Sink
from qexport.reports.html import HtmlDocument
from qexport.reports.model import DocumentInfo, DocumentWriter
from qexport.reports.pdf import PdfDocument
from qexport.reports.xlsx import XlsxDocument

DocumentFactory = Callable[[DocumentInfo, Sink], DocumentWriter]

DOCUMENTS: dict[str, DocumentFactory] = {
    "pdf": PdfDocument,
    "xlsx": XlsxDocument,
    "html": HtmlDocument,
}


def start_document(fmt: str, info: DocumentInfo, sink: Sink) -> DocumentWriter:
    """A new document of format `fmt` writing into `sink`."""
    factory = DOCUMENTS.get(fmt)
    if factory is None:
        raise InvalidRequestError(
            f"unknown report format {fmt!r} (one of: {', '.join(sorted(DOCUMENTS))})",
            field="format",
        )
    return factory(info, sink)
