"""The steps every source's describe and preview share (sources/describe_preview.py), over an
engine made of a table: the caps on rows, bytes and long values, the error translation, the
session's life."""

from __future__ import annotations

from collections.abc import Generator

import pyarrow as pa
import pytest

from qexport.domain.exports import Requester
from qexport.domain.failures import QExportError, QueryInvalidError
from qexport.domain.queries import ResultColumn
from qexport.ports import PreviewRows
from qexport.sources.describe_preview import (
    Asked,
    DescribeAndPreview,
    Piece,
    PreviewCaps,
    PreviewRead,
)

ALICE = Requester("u-alice", "w1")


class _Session:
    def __init__(self) -> None:
        self.closed = 0

    def error_for(self, exc: BaseException) -> QExportError:
        return QueryInvalidError(f"the engine said: {exc}")

    def close(self) -> None:
        self.closed += 1


class _Engine(DescribeAndPreview[_Session]):
    """Rows of `table`, two a batch, cut at the preview's LIMIT as a server would."""

    translated = (ValueError,)

    def __init__(self, table: pa.Table, *, fail: Exception | None = None, **read: bool) -> None:
        self.table = table
        self.fail = fail
        self.read = read
        self.sessions: list[_Session] = []
        self.caps: list[PreviewCaps | None] = []
        self.batches_read = 0

    def _open_statement(self, asked: Asked, caps: PreviewCaps | None) -> _Session:
        self.caps.append(caps)
        self.sessions.append(_Session())
        return self.sessions[-1]

    def _describe_in(self, session: _Session, asked: Asked) -> list[ResultColumn]:
        if self.fail is not None:
            raise self.fail
        return [ResultColumn(field.name, str(field.type)) for field in self.table.schema]

    def _preview_in(self, session: _Session, asked: Asked, caps: PreviewCaps) -> PreviewRead:
        limited = self.table.slice(0, caps.limit)

        def pieces() -> Generator[Piece, None, None]:
            for batch in limited.to_batches(max_chunksize=2):
                self.batches_read += 1
                if self.fail is not None:
                    raise self.fail
                yield (batch,), batch.num_rows, batch.nbytes

        columns = tuple(self._describe_in(session, asked)) if self.fail is None else ()
        return PreviewRead(columns, limited.schema, pieces(), **self.read)


def _preview(engine: _Engine, *, max_rows: int = 3, max_bytes: int = 1 << 20) -> PreviewRows:
    return engine.preview(
        "SELECT 1", {}, ALICE, timeout_seconds=1, max_rows=max_rows, max_cell_chars=4,
        max_bytes=max_bytes,
    )  # fmt: skip


def test_a_preview_shows_the_rows_asked_and_reads_no_batch_past_the_one_more() -> None:
    """Three rows are shown of ten; the fourth, read to tell there are more, ends reading."""
    engine = _Engine(pa.table({"n": list(range(10))}))
    rows = _preview(engine)
    assert rows.table.column("n").to_pylist() == [0, 1, 2]
    assert rows.more
    assert engine.batches_read == 2  # rows 0-1, 2-3: the LIMIT of 4 holds no more
    assert engine.caps == [PreviewCaps(3, 4, 1 << 20)]
    assert [s.closed for s in engine.sessions] == [1]


def test_a_result_that_fits_says_there_is_no_more() -> None:
    """A result of as many rows as shown reads to its end and is not `more`."""
    rows = _preview(_Engine(pa.table({"n": [1, 2, 3]})))
    assert rows.table.num_rows == 3
    assert not rows.more


def test_reading_stops_at_the_byte_bound_and_says_so() -> None:
    """Past `max_bytes` with fewer rows than shown, reading stops: the preview says there is
    more even though fewer rows came."""
    engine = _Engine(pa.table({"n": list(range(10))}))
    rows = _preview(engine, max_rows=8, max_bytes=1)
    assert rows.table.num_rows == 2
    assert rows.more
    assert engine.batches_read == 1


def test_long_values_are_cut_here_only_for_an_engine_that_sends_them_whole() -> None:
    """`cut_here`: texts come cut to one character more than shown; otherwise untouched."""
    table = pa.table({"s": ["abcdefgh"]})
    assert _preview(_Engine(table, cut_here=True)).table.column("s").to_pylist() == ["abcde"]
    assert _preview(_Engine(table)).table.column("s").to_pylist() == ["abcdefgh"]


def test_an_engine_read_to_its_end_is_not_stopped_at_the_row_cap() -> None:
    """`read_to_end` (PostgreSQL's COPY): every piece of the capped statement is read."""
    engine = _Engine(pa.table({"n": list(range(10))}), read_to_end=True)
    rows = _preview(engine, max_rows=2)
    assert rows.table.column("n").to_pylist() == [0, 1]
    assert rows.more
    assert engine.batches_read == 2  # rows 0-1, then 2 (the LIMIT's one more)


@pytest.mark.parametrize("where", ["describe", "preview"])
def test_an_engine_error_is_translated_by_its_session_which_is_closed(where: str) -> None:
    """An exception the engine translates becomes the session's error (the cause kept); the
    session is closed once either way."""
    engine = _Engine(pa.table({"n": [1]}), fail=ValueError("no such table"))
    run = {
        "describe": lambda: engine.describe("SELECT 1", {}, ALICE, timeout_seconds=1),
        "preview": lambda: _preview(engine),
    }[where]
    with pytest.raises(QueryInvalidError, match="the engine said: no such table") as raised:
        run()
    assert isinstance(raised.value.__cause__, ValueError)
    assert [s.closed for s in engine.sessions] == [1]


def test_an_error_the_engine_does_not_translate_goes_through_as_it_is() -> None:
    """Only the engine's `translated` exceptions are the session's to word."""
    engine = _Engine(pa.table({"n": [1]}), fail=KeyError("bug"))
    with pytest.raises(KeyError):
        engine.describe("SELECT 1", {}, ALICE, timeout_seconds=1)
    assert [s.closed for s in engine.sessions] == [1]


def test_describe_asks_for_no_preview_caps() -> None:
    """A describe opens its session without caps: the engine opens it to read no row."""
    engine = _Engine(pa.table({"n": [1], "s": ["x"]}))
    columns = engine.describe("SELECT 1", {}, ALICE, timeout_seconds=1)
    assert [c.name for c in columns] == ["n", "s"]
    assert engine.caps == [None]
