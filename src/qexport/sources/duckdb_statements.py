"""What a DuckDB source accepts: one SELECT, and the values bound to its named parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import duckdb

from qexport.domain.failures import QueryInvalidError, bounded_detail
from qexport.domain.queries import CONTEXT_PARAMETERS, fold_name

if TYPE_CHECKING:
    from qexport.domain.exports import Requester


def single_select(con: duckdb.DuckDBPyConnection, sql: str) -> Any:
    """Parse `sql` and return its one statement; QueryInvalidError unless it is a single SELECT."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryInvalidError(bounded_detail(str(exc))) from exc
    except ValueError as exc:
        raise _unknown_kind() from exc
    if not statements:
        raise QueryInvalidError("the query is empty")
    if len(statements) > 1:
        raise QueryInvalidError(
            f"only a single SELECT statement is allowed; got {len(statements)} statements"
        )
    statement = statements[0]
    try:
        kind = statement.type
    except ValueError as exc:
        raise _unknown_kind() from exc
    if kind != duckdb.StatementType.SELECT:
        raise QueryInvalidError(f"only a single SELECT statement is allowed; got {kind.name}")
    return statement


def _unknown_kind() -> QueryInvalidError:
    """A statement type newer than the Python binding's enum (UPDATE EXTENSIONS in 2.0):
    DuckDB parsed it, the binding cannot name it, and it is not a SELECT either way."""
    return QueryInvalidError(
        "only a single SELECT statement is allowed; got a statement of another kind"
    )


def bound_values(
    used: set[str], parameters: Mapping[str, Any], requester: Requester
) -> dict[str, Any]:
    """The value of every parameter the statement uses (`used`, as the parser reports them).

    Only used names are bound because DuckDB refuses a value for a parameter the statement does
    not mention; a report's queries share one set of parameters and each uses its own subset.
    """
    given = {fold_name(name): value for name, value in parameters.items()}
    shadowing = sorted(name for name in parameters if fold_name(name) in CONTEXT_PARAMETERS)
    if shadowing:
        names = ", ".join(f"${name}" for name in shadowing)
        raise QueryInvalidError(f"parameter {names} is reserved for the requester context")
    context = {"user_id": requester.user_id, "workspace_id": requester.workspace_id}
    values: dict[str, Any] = {}
    missing: list[str] = []
    for name in sorted(used):
        if name.isdigit():
            raise QueryInvalidError(
                "positional parameters ($1, ?) are not supported; use named ones like $customer_id"
            )
        folded = fold_name(name)
        if folded in context:
            values[name] = context[folded]
        elif folded in given:
            values[name] = given[folded]
        else:
            missing.append(f"${name}")
    if missing:
        raise QueryInvalidError(f"no value given for parameter {', '.join(missing)}")
    return values
