"""The pure rules behind the forms: problems in field order, parameters bound all at once,
the cron in words and its next runs, and report rows moved as the form's buttons say."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from qexport.domain.failures import (
    InvalidRequestError,
    Problems,
    in_field_order,
    top_field,
)
from qexport.domain.queries import Parameter, ParamType, Query, bind_parameters
from qexport.domain.schedules import check_cron, describe_cron, next_runs
from qexport.services.reports import report_order
from qexport.web.report_forms import ReportForm, SectionRow, apply_action, read_form, row_field


def _refusal(*fields: str) -> InvalidRequestError:
    return InvalidRequestError.of([InvalidRequestError(f, field=f) for f in fields])


def test_problems_are_told_in_the_order_of_their_fields_not_of_the_checks() -> None:
    """A check run late (the SQL, described after the parameters were read) is still told in
    its field's place; problems of one field keep the order they were found in."""
    problems = Problems()
    problems.add(_refusal("parameters.1.name", "name"))
    problems.add(InvalidRequestError("sql", field="sql"))
    problems.add(InvalidRequestError("later", field="parameters.0.default"))
    with pytest.raises(InvalidRequestError) as refused:
        problems.raise_any(in_field_order(("name", "sql", "parameters")))
    assert [p.field for p in refused.value.problems] == [
        "name",
        "sql",
        "parameters.1.name",
        "parameters.0.default",
    ]
    assert refused.value.field == "name"


def test_passes_found_and_fields_say_what_was_refused() -> None:
    """`passes` runs one check and says whether it passed; `found` and `fields` list what was
    refused so far (the top-level fields of nested ones)."""
    problems = Problems([InvalidRequestError("x", field="recipients[2].email")])
    assert problems.passes(lambda: None)

    def refuse() -> None:
        raise InvalidRequestError("bad", field="sections.3.heading")

    assert not problems.passes(refuse)
    assert [p.field for p in problems.found()] == ["recipients[2].email", "sections.3.heading"]
    assert problems.fields() == {"recipients", "sections"}
    assert top_field(None) == ""


def test_within_puts_every_problem_under_a_prefix() -> None:
    """`since` becomes `parameters.since`, a field already under it stays, none becomes it."""
    refusal = InvalidRequestError.of(
        [
            InvalidRequestError("a", field="since"),
            InvalidRequestError("b", field="parameters.top"),
            InvalidRequestError("c"),
        ]
    )
    assert [p.field for p in refusal.within("parameters").problems] == [
        "parameters.since",
        "parameters.top",
        "parameters",
    ]


def test_every_bad_parameter_is_refused_at_once() -> None:
    """An unknown name, a value of the wrong type and a missing required one, together, in
    declaration order after the unknown names."""
    query = Query(
        "q",
        "w",
        "orders",
        "SELECT 1",
        "s",
        parameters=(
            Parameter("since", ParamType.DATE),
            Parameter("top", ParamType.INTEGER),
            Parameter("flag", ParamType.BOOLEAN, required=False, default="true"),
        ),
    )
    with pytest.raises(InvalidRequestError) as refused:
        bind_parameters(query, {"since": "soon", "extra": 1})
    assert [p.field for p in refused.value.problems] == ["extra", "since", "top"]
    assert bind_parameters(query, {"since": "2024-01-02", "top": "3"})["flag"] is True


def test_report_problems_go_section_by_section_in_the_rows_order() -> None:
    """Sections in order; in one, heading, query, display, values, series, rows, fixed."""
    fields = [
        "visibility",
        "sections.1.heading",
        "sections.0.parameters.since",
        "sections.0.display",
        "title",
        "sections",
        "sections.0.heading",
    ]
    ordered = sorted((InvalidRequestError(f, field=f) for f in fields), key=report_order)
    assert [p.field for p in ordered] == [
        "title",
        "sections",
        "sections.0.heading",
        "sections.0.display",
        "sections.0.parameters.since",
        "sections.1.heading",
        "visibility",
    ]


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("0 8 * * 1", "At 08:00, only on Monday"),
        ("30 7 * * 1-5", "At 07:30, Monday through Friday"),
        ("*/15 * * * *", "Every 15 minutes"),
        ("0 22 * * 7", "At 22:00, only on Sunday"),
        ("0 8 1,15 * 1", "At 08:00, on day 1 and 15 of the month, or on Monday"),
        ("0 6 L * *", "At 06:00, on the last day of the month"),
        ("0 9 * * 1#2", "At 09:00, on the second Monday of the month"),
    ],
)
def test_a_cron_is_said_in_words(cron: str, words: str) -> None:
    """The subset qexport accepts, read as cron does (7 is Sunday; a day of the month and a
    day of the week both restricted fire on either: "or on Monday")."""
    assert describe_cron(check_cron(cron)) == words


def test_the_next_runs_are_on_the_zones_wall_clock_across_a_clock_change() -> None:
    """Three due times after now in the zone, at 08:00 local before and after the end of
    summer time (06:00 then 07:00 UTC)."""
    runs = next_runs("0 8 * * *", "Europe/Berlin", datetime(2026, 10, 24, 12, 0, tzinfo=UTC))
    assert [f"{r:%Y-%m-%d %H:%M %Z}" for r in runs] == [
        "2026-10-25 08:00 CET",
        "2026-10-26 08:00 CET",
        "2026-10-27 08:00 CET",
    ]
    before = next_runs("0 8 * * *", "Europe/Berlin", datetime(2026, 10, 23, 12, 0, tzinfo=UTC), 1)
    assert [r.astimezone(UTC).hour for r in (*before, runs[0])] == [6, 7]


def test_row_buttons_add_move_and_remove_rows_as_typed() -> None:
    """Add appends a blank row; up and down swap neighbours (not past the ends); remove drops
    one; save is not a row action."""
    form = ReportForm(sections=(SectionRow(heading="a"), SectionRow(heading="b")))

    def headings(after: ReportForm | None) -> list[str]:
        assert after is not None
        return [row.heading for row in after.sections]

    assert headings(apply_action(form, "add")) == ["a", "b", ""]
    assert headings(apply_action(form, "up-2")) == ["b", "a"]
    assert headings(apply_action(form, "down-1")) == ["b", "a"]
    assert headings(apply_action(form, "up-1")) == ["a", "b"]
    assert headings(apply_action(form, "down-2")) == ["a", "b"]
    assert headings(apply_action(form, "remove-1")) == ["b"]
    assert headings(apply_action(form, "remove-9")) == ["a", "b"]
    assert apply_action(form, "save") is None


def test_rows_are_read_in_their_numbers_order_and_refusals_land_on_their_field() -> None:
    """`section-N-PART` fields make the rows (by N); `sections.1.row_cap` is shown on
    `section-2-rows`, a section's fixed value on its fixed values."""
    form = read_form(
        {"title": "T", "section-2-heading": "second", "section-1-heading": "first", "x": "y"}
    )
    assert [row.heading for row in form.sections] == ["first", "second"]
    assert row_field(InvalidRequestError("x", field="sections.1.row_cap")) == "section-2-rows"
    fixed = InvalidRequestError("x", field="sections.0.parameters.since")
    assert row_field(fixed) == "section-1-fixed"
    assert row_field(InvalidRequestError("x", field="sections")) == "sections"
    assert row_field(InvalidRequestError("x", field="schedules")) == "form"
