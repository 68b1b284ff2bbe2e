"""What a member reads of a MySQL/MariaDB error while the source checks a statement (describe
and plan) instead of running it.

MySQL and MariaDB evaluate parts of a statement while they prepare and optimise it: a
constant subquery in WHERE runs under `sql_select_limit = 0` and under `EXPLAIN`, and some
functions that fail put their argument in the message. `WHERE extractvalue(1, concat(0x7e,
(SELECT group_concat(name, '=', salary) FROM salaries)))` is refused with `XPATH syntax error:
'~alice=123456,bob=98765'` (error 1105; `updatexml` the same), a numeric overflow prints the
expression it overflowed in (1690). A check leaves no record and has no ration (saving a
query; planning a preview, an export request or a run before the policy judges it), so its
error would be a way to read any table the login reads, unseen.

So while checking, the server's own words reach the member only for the errors whose text
is made of the statement and the catalogue (names, types, privileges), never of values:
`SHOWN` below, each checked against MariaDB's message template (`perror <code>`). Any other
error, whatever the server says, is refused with its number and without its text (and the
operator's log gets the number only: the text may be the data). A preview (and an export)
runs the statement on the record and rationed, and keeps the server's text.

Weighed and not done: scrubbing the quoted parts of every message, as for values when a
statement runs (mysql/errors.py): 1690 quotes the expression, whose constants may be values
folded in, and a quote inside a value ends the scrubbed part early.
"""

from __future__ import annotations

import structlog

from qexport.domain.failures import QueryInvalidError, bounded_detail
from qexport.sources.withheld import without_layout

log = structlog.get_logger()

# Errors whose message is the statement's or the catalogue's own words.
SHOWN = frozenset(
    {
        1064,  # ER_PARSE_ERROR: ... near '<the statement>' at line N
        1149,  # ER_SYNTAX_ERROR
        1054,  # ER_BAD_FIELD_ERROR: Unknown column 'c' in 'where clause'
        1146,  # ER_NO_SUCH_TABLE
        1109,  # ER_UNKNOWN_TABLE
        1049,  # ER_BAD_DB_ERROR
        1102,  # ER_WRONG_DB_NAME
        1103,  # ER_WRONG_TABLE_NAME
        1166,  # ER_WRONG_COLUMN_NAME
        1305,  # ER_SP_DOES_NOT_EXIST: FUNCTION db.f does not exist
        1630,  # ER_FUNC_INEXISTENT_NAME_COLLISION
        1356,  # ER_VIEW_INVALID
        1052,  # ER_NON_UNIQ_ERROR: Column 'c' in field list is ambiguous
        1060,  # ER_DUP_FIELDNAME
        1066,  # ER_NONUNIQ_TABLE
        1044,  # ER_DBACCESS_DENIED_ERROR
        1045,  # ER_ACCESS_DENIED_ERROR
        1142,  # ER_TABLEACCESS_DENIED_ERROR
        1143,  # ER_COLUMNACCESS_DENIED_ERROR
        1370,  # ER_PROCACCESS_DENIED_ERROR
        1227,  # ER_SPECIFIC_ACCESS_DENIED_ERROR
        1345,  # ER_VIEW_NO_EXPLAIN
        1792,  # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
        1582,  # ER_WRONG_PARAMCOUNT_TO_NATIVE_FCT
        1583,  # ER_WRONG_PARAMETERS_TO_NATIVE_FCT
        1584,  # ER_WRONG_PARAMETERS_TO_STORED_FCT
        1318,  # ER_SP_WRONG_NO_OF_ARGS
        1210,  # ER_WRONG_ARGUMENTS: Incorrect arguments to <function>
        1055,  # ER_WRONG_FIELD_WITH_GROUP
        1056,  # ER_WRONG_GROUP_FIELD
        1111,  # ER_INVALID_GROUP_FUNC_USE
        1140,  # ER_MIX_OF_GROUP_FUNC_AND_FIELDS
        1463,  # ER_NON_GROUPING_FIELD_USED
        1222,  # ER_WRONG_NUMBER_OF_COLUMNS_IN_SELECT
        1241,  # ER_OPERAND_COLUMNS
        1247,  # ER_ILLEGAL_REFERENCE
        1248,  # ER_DERIVED_MUST_HAVE_ALIAS
        1250,  # ER_TABLENAME_NOT_ALLOWED_HERE
        1221,  # ER_WRONG_USAGE
        1234,  # ER_CANT_USE_OPTION_HERE
        1235,  # ER_NOT_SUPPORTED_YET
        1327,  # ER_SP_UNDECLARED_VAR
        1115,  # ER_UNKNOWN_CHARACTER_SET
        1273,  # ER_UNKNOWN_COLLATION
        1253,  # ER_COLLATION_CHARSET_MISMATCH
        1267,  # ER_CANT_AGGREGATE_2COLLATIONS
        1270,  # ER_CANT_AGGREGATE_3COLLATIONS
        1271,  # ER_CANT_AGGREGATE_NCOLLATIONS
        4078,  # MariaDB ER_ILLEGAL_PARAMETER_DATA_TYPES2_FOR_OPERATION
        4079,  # MariaDB ER_ILLEGAL_PARAMETER_DATA_TYPE_FOR_OPERATION
    }
)
# Of those, the ones that name qexport's account with the address it connected from
# ('reader'@'10.0.0.7'): the address is left out (withheld.py).
_NAMES_THE_ACCOUNT = frozenset({1044, 1045, 1142, 1143, 1370})


def checked_error(source: str, code: int | None, reason: str, *, said: str) -> QueryInvalidError:
    """The error a member reads for the server's refusal of a statement it was checking:
    `reason` (its text, secrets already out) for an error in SHOWN, the number alone for any
    other. `said`: how the source is named ("MySQL source 'shop'")."""
    if code in SHOWN:
        return QueryInvalidError(without_layout(reason) if code in _NAMES_THE_ACCOUNT else reason)
    log.warning("source_check_refused", source=source, kind="mysql", error=code)
    number = f"MySQL error {code}" if code is not None else "a MySQL error"
    return QueryInvalidError(
        bounded_detail(
            f"The {said} refused the statement while checking it ({number}); its message is"
            " withheld, since MySQL evaluates parts of a statement while checking it and the"
            " message could hold data. A preview of a saved query shows it, on the record."
        )
    )
