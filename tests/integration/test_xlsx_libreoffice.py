"""An exported xlsx opened by LibreOffice Calc, a reader independent of qexport and openpyxl.

One small workbook, converted to csv with `soffice --headless` (slow to start, so only once)
and read back with Python's csv module. LibreOffice is required when CI is set.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from qexport.ports import WriterOptions
from qexport.writers.xlsx import XlsxFileWriter

# Every C0 control (NUL included) between markers, text that looks like an `_xHHHH_` escape,
# and a control after a formula start.
TEXTS = [
    "a\x1b[31mred",
    *(f"<{chr(code)}>" for code in range(32)),
    "_x0041_",
    "_x0041_x0042_",
    "_x0041\x1b",
    "_x005F_",
    "\t\x07=1",
]
FLOATS = [float("nan"), float("inf"), float("-inf"), 1.25]
# Field separator 44 (,), text delimiter 34 ("), character set 76 (UTF-8).
_CSV_FILTER = "csv:Text - txt - csv (StarCalc):44,34,76"


class _FileSink:
    def __init__(self, path: Path) -> None:
        self._file = path.open("wb")

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        return self._file.write(data)

    def close(self) -> None:
        self._file.close()


def soffice() -> str:
    path = shutil.which("soffice")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("LibreOffice (Debian's libreoffice-calc-nogui) is required in CI")
        pytest.skip("LibreOffice (soffice) is not installed")
    return path


def test_libreoffice_reads_every_string_and_non_finite_label_exactly(tmp_path: Path) -> None:
    """LibreOffice Calc decodes the workbook to the exact strings: every C0 control, text
    that looks like an `_xHHHH_` escape, the header, and NaN and infinities as the text
    "NaN", "Infinity" and "-Infinity" next to a number that stays 1.25."""
    program = soffice()
    count = len(TEXTS)
    floats = [FLOATS[i] if i < len(FLOATS) else None for i in range(count)]
    batch = pa.record_batch(
        [pa.array(TEXTS, pa.string()), pa.array(floats, pa.float64())],
        names=["text\x07_x0041_", "value"],
    )
    workbook = tmp_path / "export.xlsx"
    sink = _FileSink(workbook)
    XlsxFileWriter().write(batch.schema, iter([batch]), sink, WriterOptions())
    sink.close()
    subprocess.run(
        [
            program,
            f"-env:UserInstallation={(tmp_path / 'profile').as_uri()}",
            "--headless",
            "--convert-to",
            _CSV_FILTER,
            "--outdir",
            str(tmp_path),
            str(workbook),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    with (tmp_path / "export.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["text\x07_x0041_", "value"]
    assert [row[0] for row in rows[1:]] == TEXTS
    assert [row[1] for row in rows[1 : len(FLOATS) + 1]] == ["NaN", "Infinity", "-Infinity", "1.25"]
    assert len(rows) == 1 + count
