"""HTML: one self-contained file (inline CSS, inline SVG charts), every value escaped.

Nothing in it makes a request: no scripts, stylesheets, images or fonts are referenced, so
the file reads the same offline and leaks nothing when opened.
"""

from __future__ import annotations

from html import escape

from qexport.domain.reports import Display
from qexport.ports import Sink
from qexport.reports.charts import svg_chart
from qexport.reports.model import DocumentInfo, SectionData, cell_text, is_numeric

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2rem;
color:#222}
header{border-bottom:2px solid #4e79a7;margin-bottom:1.5rem}
header p{color:#555;margin:.2rem 0}
h1{margin:0 0 .4rem}h2{margin-top:2rem}
table{border-collapse:collapse;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}
thead th{background:#eef2f7;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
svg{display:block;max-width:100%;height:auto;font-size:11px;margin-bottom:.5rem}
svg .grid{stroke:#ddd}svg .title{font-size:13px;font-weight:600}
.note{color:#777;font-size:.85rem}
"""


class HtmlDocument:
    """Writes the document into the sink as it goes: head and title block, then each section."""

    def __init__(self, info: DocumentInfo, sink: Sink) -> None:
        self._sink = sink
        title = escape(info.title)
        description = f"<p>{escape(info.description)}</p>" if info.description else ""
        self._write(
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title}</title><style>{_CSS}</style></head><body>\n"
            f"<header><h1>{title}</h1>{description}"
            f'<p class="meta">Requested by {escape(info.requester)}'
            f" · generated {escape(info.generated_label)}</p></header>\n"
        )

    def _write(self, text: str) -> None:
        self._sink.write(text.encode("utf-8"))

    def add(self, section: SectionData) -> None:
        self._write(f"<section><h2>{escape(section.heading)}</h2>\n")
        if section.display is Display.TABLE:
            self._table(section)
        else:
            self._write(svg_chart(section) + "\n")
        if section.truncated:
            self._write(f'<p class="note">Only the first {len(section.rows):,} rows are shown.</p>')
        self._write("</section>\n")

    def _table(self, section: SectionData) -> None:
        numeric = [is_numeric(t) for t in section.types]
        head = "".join(f'<th scope="col">{escape(name)}</th>' for name in section.columns)
        self._write(f"<table><thead><tr>{head}</tr></thead><tbody>\n")
        chunk: list[str] = []
        for row in section.rows:
            cells = "".join(
                f'<td class="num">{escape(cell_text(v))}</td>'
                if num
                else f"<td>{escape(cell_text(v))}</td>"
                for v, num in zip(row, numeric, strict=True)
            )
            chunk.append(f"<tr>{cells}</tr>\n")
            if len(chunk) >= 500:  # fewer, larger writes
                self._write("".join(chunk))
                chunk.clear()
        self._write("".join(chunk) + "</tbody></table>\n")
        if not section.rows:
            self._write('<p class="note">No rows.</p>\n')

    def finish(self) -> None:
        self._write("</body></html>\n")

    def close(self) -> None:
        """Nothing to release: every byte went straight into the sink."""
