"""The export formats by name: the one place a format string becomes a writer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qexport.domain.formats import query_format
from qexport.writers.csv import CSV_WRITER, TSV_WRITER
from qexport.writers.jsonl import JsonLinesWriter
from qexport.writers.parquet import ParquetFileWriter
from qexport.writers.xlsx import XlsxFileWriter

if TYPE_CHECKING:
    from collections.abc import Mapping

    from qexport.ports import Writer

_WRITERS: Mapping[str, Writer] = {
    "csv": CSV_WRITER,
    "tsv": TSV_WRITER,
    "jsonl": JsonLinesWriter(),
    "parquet": ParquetFileWriter(),
    "xlsx": XlsxFileWriter(),
}


def get_writer(fmt: str) -> Writer:
    """The writer for a format name; unknown names are refused with the list of valid ones."""
    return _WRITERS[query_format(fmt).name]
