"""The fixed parts of an XLSX package (SpreadsheetML), as text.

Only what Excel needs: content types, relationships, the workbook with its sheet list, one
style sheet, and each worksheet's opening (frozen header pane, column widths) and closing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
REL_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
PKG_REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
_XML_DECL = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
_OFFICE_DOC = f"{REL_NS}/officeDocument"
_SHEET_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"
_BOOK_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"
_STYLES_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"

MAX_COLUMNS = 16_384
MAX_SHEET_NAME = 31
_FORBIDDEN_IN_SHEET_NAMES = re.compile(r"[\[\]:*?/\\\x00-\x1f]")
_RESERVED_SHEET_NAMES = {"history"}  # Excel refuses a sheet of this name
# Characters XML 1.0 cannot carry, even as character references: C0 controls other than TAB,
# LF and CR, and U+FFFE, U+FFFF. SpreadsheetML stores them as `_xHHHH_` (ECMA-376 ST_Xstring),
# which Excel and LibreOffice decode back to the character.
CONTROL_ESCAPES = {
    code: f"_x{code:04X}_"
    for code in [*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF]
}
_DROPPED_CONTROLS = dict.fromkeys(CONTROL_ESCAPES)
# An underscore that starts `_xHHHH` in the text itself is escaped as `_x005F_`, so that it can
# never be decoded as part of an escape: not `_x0041_` on its own, not one that meets a
# following escape (`_x0041` before ESC), not two that share an underscore (`_x0041_x0042_`).
_LITERAL_ESCAPE = re.compile(r"_(?=x[0-9A-Fa-f]{4})")


def column_letter(index: int) -> str:
    """Excel's column name for a 0-based column index: 0 -> A, 26 -> AA."""
    number = index + 1
    letters = ""
    while number:
        number, remainder = divmod(number - 1, 26)
        letters = chr(65 + remainder) + letters
    return letters


def escape_text(text: str) -> str:
    """Text for an element's content or an attribute, stored exactly: the same rules as the
    vectorised cell encoder (xlsx_cells), plus `"` for attributes."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    # A raw CR would be normalised to LF by every XML parser; the reference keeps it.
    text = text.replace("\r", "&#13;").replace('"', "&quot;")
    return ooxml_escape(text)


def without_controls(text: str) -> str:
    """Text where no escape is decoded (a document property), without the characters XML
    cannot carry."""
    return text.translate(_DROPPED_CONTROLS)


def ooxml_escape(text: str) -> str:
    """The SpreadsheetML part of the escaping: controls as `_xHHHH_`, and an underscore that
    starts `_xHHHH` as `_x005F_`; markup is left to the XML layer."""
    return _LITERAL_ESCAPE.sub("_x005F_", text).translate(CONTROL_ESCAPES)


@dataclass
class Styles:
    """The cell formats a workbook uses; `xf(...)` hands out their indexes in `cellXfs`."""

    _formats: list[str] = field(default_factory=list)
    _xfs: list[tuple[int, bool, bool]] = field(default_factory=lambda: [(0, False, False)])

    def xf(
        self, number_format: str | None = None, *, bold: bool = False, quote: bool = False
    ) -> int:
        """The index of a cell format: a number format code, bold, and/or quote-prefixed."""
        format_id = self._format_id(number_format) if number_format else 0
        key = (format_id, bold, quote)
        if key not in self._xfs:
            self._xfs.append(key)
        return self._xfs.index(key)

    def _format_id(self, code: str) -> int:
        if code not in self._formats:
            self._formats.append(code)
        return 164 + self._formats.index(code)  # ids below 164 are Excel's built-in formats

    def xml(self) -> str:
        formats = "".join(
            f'<numFmt numFmtId="{164 + i}" formatCode="{escape_text(code)}"/>'
            for i, code in enumerate(self._formats)
        )
        xfs = "".join(_xf(format_id, bold, quote) for format_id, bold, quote in self._xfs)
        font = '<sz val="11"/><name val="Calibri"/><family val="2"/>'
        return (
            f'{_XML_DECL}<styleSheet xmlns="{MAIN_NS}">'
            + (f'<numFmts count="{len(self._formats)}">{formats}</numFmts>' if formats else "")
            + f'<fonts count="2"><font>{font}</font><font><b/>{font}</font></fonts>'
            '<fills count="2"><fill><patternFill patternType="none"/></fill>'
            '<fill><patternFill patternType="gray125"/></fill></fills>'
            '<borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border>'
            "</borders>"
            '<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/>'
            "</cellStyleXfs>"
            f'<cellXfs count="{len(self._xfs)}">{xfs}</cellXfs>'
            '<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles>'
            "</styleSheet>"
        )


def _xf(format_id: int, bold: bool, quote: bool) -> str:
    attributes = (
        f'numFmtId="{format_id}" fontId="{1 if bold else 0}" fillId="0" borderId="0" xfId="0"'
    )
    if format_id:
        attributes += ' applyNumberFormat="1"'
    if bold:
        attributes += ' applyFont="1"'
    if quote:
        attributes += ' quotePrefix="1"'
    return f"<xf {attributes}/>"


def sheet_start(widths: dict[int, float], *, selected: bool) -> str:
    """A worksheet up to its first row: the header row is frozen, typed columns widened."""
    cols = "".join(
        f'<col min="{i + 1}" max="{i + 1}" width="{width}" customWidth="1"/>'
        for i, width in sorted(widths.items())
    )
    tab = ' tabSelected="1"' if selected else ""
    return (
        f'{_XML_DECL}<worksheet xmlns="{MAIN_NS}" xmlns:r="{REL_NS}">'
        f'<sheetViews><sheetView{tab} workbookViewId="0">'
        '<pane ySplit="1" topLeftCell="A2" activePane="bottomLeft" state="frozen"/>'
        '<selection pane="bottomLeft" activeCell="A2" sqref="A2"/>'
        "</sheetView></sheetViews>"
        '<sheetFormatPr defaultRowHeight="15"/>'
        + (f"<cols>{cols}</cols>" if cols else "")
        + "<sheetData>"
    )


SHEET_END = "</sheetData></worksheet>"


def sheet_name(number: int) -> str:
    return f"Sheet{number}"


def valid_sheet_name(heading: str, taken: set[str]) -> str:
    """A valid, unique (case-insensitively) sheet name of at most 31 characters."""
    base = _FORBIDDEN_IN_SHEET_NAMES.sub("-", heading).strip().strip("'").strip() or "Section"
    base = base[:MAX_SHEET_NAME]
    name, n = base, 1
    while name.lower() in taken or name.lower() in _RESERVED_SHEET_NAMES:
        n += 1
        suffix = f" ({n})"
        name = base[: MAX_SHEET_NAME - len(suffix)] + suffix
    taken.add(name.lower())
    return name


def sheet_path(number: int) -> str:
    return f"xl/worksheets/sheet{number}.xml"


def root_rels() -> str:
    return (
        f'{_XML_DECL}<Relationships xmlns="{PKG_REL_NS}">'
        f'<Relationship Id="rId1" Type="{_OFFICE_DOC}" Target="xl/workbook.xml"/>'
        "</Relationships>"
    )


def workbook(sheet_count: int) -> str:
    sheets = "".join(
        f'<sheet name="{sheet_name(n)}" sheetId="{n}" r:id="rId{n}"/>'
        for n in range(1, sheet_count + 1)
    )
    return (
        f'{_XML_DECL}<workbook xmlns="{MAIN_NS}" xmlns:r="{REL_NS}">'
        f'<bookViews><workbookView activeTab="0"/></bookViews><sheets>{sheets}</sheets></workbook>'
    )


def workbook_rels(sheet_count: int) -> str:
    sheets = "".join(
        f'<Relationship Id="rId{n}" Type="{REL_NS}/worksheet" Target="worksheets/sheet{n}.xml"/>'
        for n in range(1, sheet_count + 1)
    )
    styles = f'<Relationship Id="rId{sheet_count + 1}" Type="{REL_NS}/styles" Target="styles.xml"/>'
    return f'{_XML_DECL}<Relationships xmlns="{PKG_REL_NS}">{sheets}{styles}</Relationships>'


def content_types(sheet_count: int) -> str:
    sheets = "".join(
        f'<Override PartName="/{sheet_path(n)}" ContentType="{_SHEET_TYPE}"/>'
        for n in range(1, sheet_count + 1)
    )
    return (
        f'{_XML_DECL}<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" '
        'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        f'<Override PartName="/xl/workbook.xml" ContentType="{_BOOK_TYPE}"/>'
        f'<Override PartName="/xl/styles.xml" ContentType="{_STYLES_TYPE}"/>'
        f"{sheets}</Types>"
    )
