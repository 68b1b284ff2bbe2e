"""Requesting an export: bad input is refused with a clear message and records nothing."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status, safe_filename, storage_key
from qexport.domain.failures import InvalidRequestError, NotFoundError, bounded_detail
from qexport.domain.queries import (
    Parameter,
    ParamType,
    Query,
    Visibility,
    bind_parameters,
    can_read,
    parse_param_spec,
    typed_default,
)
from qexport.services.requests import record_request
from tests.fakes import FrozenClock, InMemoryMetadataStore

ALICE = Requester("alice", "w1")

QUERY = Query(
    id="q1",
    workspace_id="w1",
    name="Orders by day",
    sql="select 1",
    source="demo",
    parameters=(
        Parameter("since", ParamType.DATE),
        Parameter("limit", ParamType.INTEGER, required=False, default="100"),
        Parameter("min_total", ParamType.NUMBER, required=False),
        Parameter("paid", ParamType.BOOLEAN, required=False, default="true"),
        Parameter("status", ParamType.STRING, required=False),
    ),
)


@pytest.fixture
def store_with_query() -> InMemoryMetadataStore:
    s = InMemoryMetadataStore()
    s.add_query(QUERY)
    return s


def test_a_valid_request_is_recorded_with_typed_parameters(
    store_with_query: InMemoryMetadataStore,
) -> None:
    """Parameters are checked and stored typed-as-JSON; defaults are filled in."""
    record = record_request(
        store_with_query,
        store_with_query,
        FrozenClock(),
        ALICE,
        RequestExport(
            SubjectRef("query", "Orders by day", by_name=True),
            "xlsx",
            parameters={"since": "2024-02-01", "min_total": "10.50"},
        ),
    )
    assert record.status is Status.QUEUED
    assert record.parameters == {
        "since": "2024-02-01",
        "limit": 100,
        "min_total": "10.50",
        "paid": True,
        "status": None,
    }
    # The default file name template: the query's name and the request's date.
    assert record.filename == f"Orders-by-day_{record.created_at:%Y-%m-%d}.xlsx"
    assert record.storage_key == f"exports/w1/{record.id}/{record.filename}"
    assert record.options == {"neutralize_formulas": True}


@pytest.mark.parametrize(
    ("fmt", "params", "message"),
    [
        ("docx", {"since": "2024-01-01"}, "unknown format 'docx'"),
        ("csv", {}, "missing required parameter 'since'"),
        ("csv", {"since": "yesterday"}, "parameter 'since' must be a date"),
        ("csv", {"since": "2024-01-01", "limit": "ten"}, "parameter 'limit' must be an integer"),
        ("csv", {"since": "2024-01-01", "limit": "1.5"}, "parameter 'limit' must be an integer"),
        (
            "csv",
            {"since": "2024-01-01", "min_total": "NaN"},
            "parameter 'min_total' must be a number",
        ),
        ("csv", {"since": "2024-01-01", "paid": "maybe"}, "parameter 'paid' must be a boolean"),
        ("csv", {"since": "2024-01-01", "colour": "red"}, "unknown parameter 'colour'"),
        ("csv", {"since": "2024-01-01", "status": "x" * 10_001}, "longer than 10000 characters"),
    ],
)
def test_bad_input_is_refused_and_nothing_recorded(
    store_with_query: InMemoryMetadataStore, fmt: str, params: dict[str, str], message: str
) -> None:
    """Each problem gets a message naming it, and no export is recorded."""
    with pytest.raises(InvalidRequestError, match=message):
        record_request(
            store_with_query,
            store_with_query,
            FrozenClock(),
            ALICE,
            RequestExport(SubjectRef("query", "q1", by_name=True), fmt, parameters=params),
        )
    assert store_with_query.list_exports(workspace_id="w1") == []


def test_an_unknown_or_unreadable_query_is_not_found(
    store_with_query: InMemoryMetadataStore,
) -> None:
    """A missing query, or one in another workspace, is refused the same way."""
    for requester, ref in ((ALICE, "nope"), (Requester("alice", "w2"), "q1")):
        with pytest.raises(NotFoundError, match="no query"):
            record_request(
                store_with_query,
                store_with_query,
                FrozenClock(),
                requester,
                RequestExport(
                    SubjectRef("query", ref, by_name=True),
                    "csv",
                    parameters={"since": "2024-01-01"},
                ),
            )
    assert store_with_query.list_exports(workspace_id="w1") == []


def test_the_access_rule() -> None:
    """Readable: a live query of your workspace, visible to all or to you as member/owner."""
    members_only = Query(
        **{
            **QUERY.__dict__,
            "visibility": Visibility.MEMBERS,
            "members": frozenset({"bob"}),
            "owner": "carol",
        }
    )
    assert can_read(ALICE, QUERY)
    assert not can_read(Requester("alice", "w2"), QUERY)
    assert not can_read(ALICE, None)
    assert not can_read(ALICE, Query(**{**QUERY.__dict__, "deleted": True}))
    assert not can_read(ALICE, members_only)
    assert can_read(Requester("bob", "w1"), members_only)
    assert can_read(Requester("carol", "w1"), members_only)


def test_parameters_are_typed() -> None:
    """Text from a command line becomes dates, integers, exact decimals and booleans."""
    values = bind_parameters(
        QUERY, {"since": "2024-03-01", "limit": " 7 ", "min_total": "0.1", "paid": "no"}
    )
    assert values == {
        "since": dt.date(2024, 3, 1),
        "limit": 7,
        "min_total": Decimal("0.1"),
        "paid": False,
        "status": None,
    }


def test_param_specs_from_the_command_line() -> None:
    """`NAME:TYPE[=DEFAULT]`: a default makes it optional and must itself be valid; an empty
    default makes it optional without one (how an edit form writes such a parameter back)."""
    assert parse_param_spec("since:date=2024-01-01") == Parameter(
        "since", ParamType.DATE, False, "2024-01-01"
    )
    assert parse_param_spec("n:integer") == Parameter("n", ParamType.INTEGER, True, None)
    assert parse_param_spec("n:integer=") == Parameter("n", ParamType.INTEGER, False, None)
    with pytest.raises(InvalidRequestError, match="unknown parameter type 'float'"):
        parse_param_spec("x:float")
    with pytest.raises(InvalidRequestError, match="must be an integer"):
        parse_param_spec("n:integer=abc")
    with pytest.raises(InvalidRequestError, match="invalid parameter name"):
        parse_param_spec("1x:string")


def _stored(ptype: ParamType, raw: object) -> object:
    return typed_default(Parameter("p", ptype, required=False, default=raw)).default


def test_a_default_is_stored_as_its_type_from_text_or_json() -> None:
    """A declared default becomes its type's JSON value, the same from the text of a form or
    a command line as from the API's JSON: an integer, a number (an integer or a float; the
    exact text where a float would round it), true or false, a date's ISO text; a default
    not of its type is refused, naming the parameter."""
    pairs = [
        (ParamType.INTEGER, " 10 ", 10),
        (ParamType.NUMBER, "2.5", 2.5),
        (ParamType.NUMBER, "100", 100),
        (ParamType.BOOLEAN, "yes", True),
        (ParamType.DATE, " 2024-01-20", "2024-01-20"),
        (ParamType.STRING, " x ", " x "),
    ]
    for ptype, text, json_value in pairs:
        stored = (_stored(ptype, text), _stored(ptype, json_value))
        assert stored == (json_value, json_value), ptype
        assert {type(s) for s in stored} == {type(json_value)}, ptype
    assert _stored(ParamType.NUMBER, "0.12345678901234567891") == "0.12345678901234567891"
    assert parse_param_spec("n:integer=10") == Parameter("n", ParamType.INTEGER, False, 10)
    with pytest.raises(InvalidRequestError, match="parameter 'p' must be an integer, got 'ten'"):
        _stored(ParamType.INTEGER, "ten")
    with pytest.raises(InvalidRequestError, match="parameter 'p' must be a boolean"):
        _stored(ParamType.BOOLEAN, "maybe")


@pytest.mark.parametrize("name", ["user_id", "User_Id", "WORKSPACE_ID"])
def test_a_declared_parameter_may_not_be_the_requester_context(name: str) -> None:
    """`queries add --param` refuses $user_id or $workspace_id in any letter case (the
    source would refuse every export of the query), naming the parameter."""
    with pytest.raises(InvalidRequestError, match=f"parameter name '{name}' is reserved"):
        parse_param_spec(f"{name}:string")


def test_file_names_and_keys_are_safe() -> None:
    """Names from users cannot escape the key layout or break a header."""
    assert safe_filename('../../etc/passwd"; x', "csv") == "etc-passwd-x.csv"
    assert safe_filename("Ventes été 2024", "xlsx") == "Ventes-ete-2024.xlsx"
    assert safe_filename("???", "csv") == "export.csv"
    assert storage_key("w/../1", "id", "a.csv") == "exports/w-..-1/id/a.csv"


def test_failure_details_are_bounded() -> None:
    """A detail keeps one paragraph, drops any traceback and is cut to 500 characters."""
    text = "Binder Error: column x not found\nTraceback (most recent call last):\n  File ..."
    assert bounded_detail(text) == "Binder Error: column x not found"
    assert len(bounded_detail("y" * 2000)) == 500
