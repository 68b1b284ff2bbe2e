"""A request with several mistakes is refused with all of them at once, in field order."""

from __future__ import annotations

import pytest

from qexport.domain.failures import (
    InvalidRequestError,
    Problems,
    StatementRefusedError,
    TextPosition,
)


def test_every_failed_check_is_kept_in_the_order_checked() -> None:
    """Each check runs even when an earlier one failed; the refusal leads with the first."""
    problems = Problems()
    with problems.check():
        raise InvalidRequestError("name is empty", field="name")
    with problems.check():
        pass
    with problems.check():
        raise InvalidRequestError("unknown format 'cvs'", field="format")
    with pytest.raises(InvalidRequestError) as refused:
        problems.raise_any()
    assert refused.value.field == "name"
    assert str(refused.value) == "name is empty"
    assert [(p.field, p.detail) for p in refused.value.problems] == [
        ("name", "name is empty"),
        ("format", "unknown format 'cvs'"),
    ]


def test_no_problem_raises_nothing_and_one_is_raised_as_it_was() -> None:
    """With every check passed nothing is raised; a single problem keeps its own class."""
    Problems().raise_any()
    problems = Problems()
    with problems.check():
        raise StatementRefusedError("syntax error", position=TextPosition(2, 8))
    with pytest.raises(StatementRefusedError) as refused:
        problems.raise_any()
    assert refused.value.position == TextPosition(2, 8)
    assert refused.value.problems == (refused.value,)


def test_other_errors_are_not_collected() -> None:
    """An error that is not a refusal of the request (a source down) stops at once."""
    problems = Problems()
    with pytest.raises(RuntimeError), problems.check():
        raise RuntimeError("boom")
    assert not problems


def test_nested_refusals_are_flattened() -> None:
    """A refusal that already carries several problems adds each of them."""
    inner = InvalidRequestError.of(
        [InvalidRequestError("a", field="x"), InvalidRequestError("b", field="y")]
    )
    problems = Problems()
    problems.add(inner)
    problems.add(InvalidRequestError("c", field="z"))
    with pytest.raises(InvalidRequestError) as refused:
        problems.raise_any()
    assert [p.field for p in refused.value.problems] == ["x", "y", "z"]
