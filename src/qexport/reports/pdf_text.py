"""Text as the PDF's built-in font can draw it.

The PDF uses Helvetica, one of the 14 standard fonts every reader has, in WinAnsiEncoding:
it covers Latin-1 and the few extra characters of Windows-1252 (€, curly quotes, dashes).
A character outside it (CJK, emoji, most of Cyrillic...) is replaced with '?', so that the
document renders instead of failing; the XLSX and HTML formats keep every character.
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SPACE = re.compile(r"[\t\r\n]+")


def pdf_text(text: str) -> str:
    """`text` with what Helvetica cannot draw replaced by '?' and line breaks as spaces."""
    text = _SPACE.sub(" ", _CONTROL.sub("?", text))
    return text.encode("cp1252", "replace").decode("cp1252")


def pdf_markup(text: str) -> str:
    """`pdf_text` escaped for a Paragraph (which reads a small XML-like markup)."""
    return escape(pdf_text(text))
