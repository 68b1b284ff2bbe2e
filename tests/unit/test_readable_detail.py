"""`readable_detail`, the failure detail people read, on the shapes engines' messages take
(the real DuckDB and PostgreSQL errors are in tests/integration/test_readable_failures.py)."""

from __future__ import annotations

from qexport.domain.failures import READABLE_MAX_CHARS, bounded_detail, readable_detail


def test_caret_art_goes_even_when_a_stored_detail_was_cut_before_the_carets() -> None:
    """A detail cut at 500 characters may end inside the quoted line: that goes too."""
    cut = 'Parser Error: syntax error at or near "FROM" LINE 1: SELECT a, b, c FROM t WHE…'
    assert readable_detail(cut) == 'Parser Error: syntax error at or near "FROM"'


def test_the_position_in_words_is_kept_after_the_sentences_kept() -> None:
    """qexport's own "(line L, column C)" stays at the end, after an internal hint goes."""
    text = (
        "Catalog Error: Table with name x does not exist! Did you mean"
        ' "duckdb_tables"? (line 3, column 6)'
    )
    assert readable_detail(text) == (
        "Catalog Error: Table with name x does not exist! (line 3, column 6)"
    )


def test_a_headline_naming_a_catalogue_table_is_kept() -> None:
    """The author's own query may name pg_authid: the headline is the honest reason."""
    text = "permission denied for table pg_authid"
    assert readable_detail(text) == text


def test_at_most_two_sentences_and_a_bounded_length() -> None:
    """A third sentence, and anything past READABLE_MAX_CHARS, is left to the events."""
    text = "First part failed. Try this instead. And also this. And this."
    assert readable_detail(text) == "First part failed. Try this instead."
    long = readable_detail("x" * 600)
    assert len(long) == READABLE_MAX_CHARS
    assert long.endswith("…")


def test_empty_and_plain_details_read_as_they_are() -> None:
    """No detail reads as nothing; qexport's own one-line reasons are left alone."""
    assert readable_detail(None) == ""
    assert readable_detail("") == ""
    plain = bounded_detail("the result has more than 1,000 rows (the row limit)")
    assert readable_detail(plain) == plain
