"""The file formats by name: what each is called, its file extension and its Content-Type.

A query's export is written in one of QUERY_FORMATS (writers/ encodes them), a report's in one
of REPORT_FORMATS (reports/ renders them); xlsx is both. Knowing a format needs none of the
libraries that write it."""

from __future__ import annotations

from dataclasses import dataclass

from qexport.domain.failures import InvalidRequestError


@dataclass(frozen=True)
class FileFormat:
    name: str
    extension: str
    media_type: str


_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

FILE_FORMATS: dict[str, FileFormat] = {
    f.name: f
    for f in (
        FileFormat("csv", "csv", "text/csv; charset=utf-8"),
        FileFormat("tsv", "tsv", "text/tab-separated-values; charset=utf-8"),
        FileFormat("jsonl", "jsonl", "application/x-ndjson"),
        FileFormat("parquet", "parquet", "application/vnd.apache.parquet"),
        FileFormat("xlsx", "xlsx", _XLSX),
        FileFormat("pdf", "pdf", "application/pdf"),
        FileFormat("html", "html", "text/html; charset=utf-8"),
    )
}

# The formats of a query's export, in the order they are offered.
QUERY_FORMATS: tuple[str, ...] = ("csv", "tsv", "jsonl", "parquet", "xlsx")
# The formats of a report's document.
REPORT_FORMATS = frozenset({"pdf", "xlsx", "html"})


def query_format(name: str) -> FileFormat:
    """The format of a query's export called `name`; another name is refused with the list of
    valid ones."""
    if name not in QUERY_FORMATS:
        raise InvalidRequestError(
            f"unknown format {name!r}; valid formats: {', '.join(QUERY_FORMATS)}", field="format"
        )
    return FILE_FORMATS[name]


def media_type(name: str) -> str:
    """The Content-Type of a file of format `name`, a query's or a report's."""
    return FILE_FORMATS[name].media_type
