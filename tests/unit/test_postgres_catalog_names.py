"""qexport's own catalog statements on PostgreSQL sources name every catalog relation,
function and type with its schema: a login's search_path cannot point them elsewhere
(operators, which cannot carry one, are left to the pinned path: postgres/catalog_path.py)."""

from __future__ import annotations

import re

import pytest

from qexport.sources.postgres import catalogue as postgres_catalogue
from qexport.sources.postgres import reads as postgres_reads
from qexport.sources.postgres import role as postgres_role
from qexport.sources.postgres import session as postgres_session

STATEMENTS = {
    "role: roles": postgres_role._ROLES,
    "role: functions": postgres_role._FUNCTIONS,
    "reads: opaque": postgres_reads._OPAQUE,
    "reads: relations": postgres_reads._RELATIONS,
    "reads: made from": postgres_reads._MADE_FROM,
    "catalogue: tables": postgres_catalogue._TABLES,
    "catalogue: other case": postgres_catalogue._OTHER_CASE,
    "catalogue: can read cluster": postgres_catalogue._CAN_READ_CLUSTER,
    "catalogue: cluster": postgres_catalogue._CLUSTER,
    "catalogue: address": postgres_catalogue._ADDRESS,
    "session: type names": postgres_session.TYPE_NAMES,
}
# Words before a parenthesis that are SQL's own, not functions looked up on the path.
_KEYWORDS = frozenset(
    {"coalesce", "array", "any", "exists", "in", "from", "lateral", "as", "and", "or", "not"}
)
_STRING = re.compile(r"'(?:[^']|'')*'")
_CALL = re.compile(r"(?<![\w.%])([A-Za-z_]\w*)\s*\(")
_DEFINED = re.compile(r"(\w+)\s*(?:\([^()]*\))?\s+AS\s*\(|\bAS\s+(\w+)\s*\(", re.IGNORECASE)
_CATALOG_NAME = re.compile(r"(?<![\w.])(pg_\w+)")
_CAST = re.compile(r"::\s*(\w+)")
# The text of a regclass, regtype or regprocedure constant, whose names are looked up too.
_OBJECT_TEXT = re.compile(r"'((?:[^']|'')*)'\s*::\s*pg_catalog\.reg\w+")


def unqualified(statement: str) -> list[str]:
    """The names the statement leaves to the search path: functions, catalog relations and
    types, and those in the text of a regclass, regtype or regprocedure."""
    code = _STRING.sub("''", statement)
    defined = {name for found in _DEFINED.findall(code) for name in found if name}
    names = [
        name
        for name in _CALL.findall(code)
        if name.lower() not in _KEYWORDS and name not in defined
    ]
    names += [name for name in _CATALOG_NAME.findall(code) if name != "pg_catalog"]
    names += [name for name in _CAST.findall(code) if name != "pg_catalog"]
    for text in _OBJECT_TEXT.findall(statement):
        names += [
            name for name in re.findall(r"[\w.]+", text) if not name.startswith("pg_catalog.")
        ]
    return names


@pytest.mark.parametrize("statement", STATEMENTS.values(), ids=STATEMENTS.keys())
def test_every_catalog_name_has_its_schema(statement: str) -> None:
    assert unqualified(statement) == []


def test_the_check_itself_finds_what_is_left_out() -> None:
    assert unqualified(
        "SELECT format('%I', c.relname), x::text FROM pg_class c JOIN pg_catalog.pg_proc p"
        " ON p.oid = 'pg_catalog.lower(text)'::pg_catalog.regprocedure"
    ) == ["format", "pg_class", "text", "text"]
