"""Saved queries, their typed parameters and who may read them."""

from __future__ import annotations

import datetime as dt
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from qexport.domain.exports import Requester, safe_filename
from qexport.domain.failures import InvalidRequestError, Problems
from qexport.domain.sensitivity import Relation

MAX_PARAMETER_CHARS = 10_000
_INT64 = 2**63
# The requester context every query may read ($user_id, $workspace_id): always bound by the
# source, never by a caller. Sources compare parameter names with ASCII letters folded.
CONTEXT_PARAMETERS = ("user_id", "workspace_id")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold_name(name: str) -> str:
    """A parameter name as the sources compare it: ASCII letters folded, the rest as written."""
    return name.translate(_ASCII_LOWER)


def check_declared_name(name: str) -> None:
    """Refuse declaring a parameter that is, in any letter case, the requester context: its
    value would come from the request, and the source would refuse every export of it."""
    if fold_name(name) in CONTEXT_PARAMETERS:
        raise InvalidRequestError(
            f"parameter name {name!r} is reserved: $user_id and $workspace_id are the"
            " requester's, bound by qexport in any letter case; choose another name"
        )


class ParamType(StrEnum):
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    DATE = "date"
    BOOLEAN = "boolean"


@dataclass(frozen=True)
class Parameter:
    name: str
    type: ParamType
    required: bool = True
    default: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type.value,
            "required": self.required,
            "default": self.default,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Parameter:
        return cls(data["name"], ParamType(data["type"]), data["required"], data.get("default"))


@dataclass(frozen=True)
class ResultColumn:
    """One column of a query's result as its source describes it: a name and the engine's
    own type name (`DECIMAL(10,2)`, `timestamp with time zone`)."""

    name: str
    type: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "type": self.type}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResultColumn:
        return cls(str(data["name"]), str(data["type"]))


class Visibility(StrEnum):
    WORKSPACE = "workspace"
    MEMBERS = "members"


@dataclass(frozen=True)
class Query:
    id: str
    workspace_id: str
    name: str
    sql: str
    source: str
    parameters: tuple[Parameter, ...] = ()
    visibility: Visibility = Visibility.WORKSPACE
    members: frozenset[str] = field(default_factory=frozenset)
    owner: str | None = None
    deleted: bool = False
    # What the source described when the query was saved; None for a query saved before
    # queries were described (they still run; their columns show as unknown).
    columns: tuple[ResultColumn, ...] | None = None
    # How its exports' files are named (see `export_filename`); None: DEFAULT_FILENAME.
    filename_template: str | None = None
    # The tables (and columns) it reads, as its source's planner reported them when it was
    # saved or last run (domain/sensitivity.py); None: unknown (a source that cannot say, or
    # a query saved before reads were recorded), which a sensitivity rule reads as "all".
    reads: frozenset[Relation] | None = None


def can_read(requester: Requester, query: Query | None) -> bool:
    """The access rule: a live query, in the requester's workspace, visible to them."""
    if query is None or query.deleted:
        return False
    if query.workspace_id != requester.workspace_id:
        return False
    if query.visibility is Visibility.WORKSPACE:
        return True
    return requester.user_id in query.members or requester.user_id == query.owner


_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


def _convert(ptype: ParamType, raw: object) -> Any:  # noqa: PLR0911 - one return per type
    """Convert or raise TypeError/ValueError."""
    match ptype:
        case ParamType.STRING:
            if not isinstance(raw, str):
                raise TypeError(raw)
            return raw
        case ParamType.INTEGER:
            if isinstance(raw, bool | float):
                raise TypeError(raw)
            return int(str(raw).strip())
        case ParamType.NUMBER:
            if isinstance(raw, bool):
                raise TypeError(raw)
            value = Decimal(str(raw).strip())
            if not value.is_finite():
                raise ValueError(raw)
            return value
        case ParamType.DATE:
            return dt.date.fromisoformat(str(raw).strip())
        case ParamType.BOOLEAN:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
    raise ValueError(raw)


def _coerce(param: Parameter, raw: object) -> Any:
    """Turn a raw value (text from a CLI, JSON from an API) into the parameter's type."""
    if isinstance(raw, str) and len(raw) > MAX_PARAMETER_CHARS:
        raise InvalidRequestError(
            f"parameter {param.name!r} is longer than {MAX_PARAMETER_CHARS} characters",
            field=param.name,
        )
    try:
        return _convert(param.type, raw)
    except (TypeError, ValueError, InvalidOperation):
        kind = param.type.value
        article = "an" if kind[0] in "aeiou" else "a"
        raise InvalidRequestError(
            f"parameter {param.name!r} must be {article} {kind}, got {str(raw)[:80]!r}",
            field=param.name,
        ) from None


def bind_parameters(query: Query, raw: dict[str, Any]) -> dict[str, Any]:
    """Validate request parameters against the query's declaration; return typed values.
    Every unknown, mistyped or missing parameter is refused at once, in declaration order
    (unknown names first)."""
    declared = {p.name: p for p in query.parameters}
    problems = Problems()
    for name in sorted(set(raw) - set(declared)):
        problems.add(
            InvalidRequestError(
                f"unknown parameter {name!r} for query {query.name!r}"
                f" (declared: {', '.join(declared) or 'none'})",
                field=name,
            )
        )
    values: dict[str, Any] = {}
    for param in query.parameters:
        with problems.check():
            values[param.name] = _bound(param, raw)
    problems.raise_any()
    return values


def _bound(param: Parameter, raw: dict[str, Any]) -> Any:
    if param.name in raw and raw[param.name] is not None:
        return _coerce(param, raw[param.name])
    if param.default is not None:
        return _coerce(param, param.default)
    if param.required:
        raise InvalidRequestError(
            f"missing required parameter {param.name!r} ({param.type.value})", field=param.name
        )
    return None


def typed_default(param: Parameter) -> Parameter:
    """`param` with its default as its type's JSON value, as a query stores it whichever door
    declared it (text from a form or a command line, JSON from the API): an integer; a number;
    true or false; a date's ISO text; a string. InvalidRequestError, naming the parameter, for
    a default that is not of its type."""
    if param.default is None:
        return param
    value = _coerce(param, param.default)
    if param.type is ParamType.NUMBER:
        return replace(param, default=_json_number(value))
    return replace(param, default=to_json_value(value))


def _json_number(value: Decimal) -> int | float | str:
    """A number as JSON holds it: an integer when written without a point (and within 64
    bits), else a float; its exact text when neither holds it exactly (it binds exactly)."""
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent >= 0 and -_INT64 <= value < _INT64:
        return int(value)
    approximate = float(value)
    return approximate if Decimal(repr(approximate)) == value else str(value)


def to_json_value(value: Any) -> Any:
    """Typed parameter values as stored on the export record (JSON)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def parse_param_spec(spec: str) -> Parameter:
    """`NAME:TYPE[=DEFAULT]` (CLI form). A default makes the parameter optional; an empty
    one (`NAME:TYPE=`) makes it optional with no default."""
    name, _, rest = spec.partition(":")
    type_text, has_default, default = rest.partition("=")
    name = name.strip()
    if not name.isidentifier():
        raise InvalidRequestError(f"invalid parameter name {name!r} in {spec!r}")
    check_declared_name(name)
    try:
        ptype = ParamType(type_text.strip() or "string")
    except ValueError:
        choices = ", ".join(t.value for t in ParamType)
        raise InvalidRequestError(
            f"unknown parameter type {type_text!r} in {spec!r} (choose from {choices})"
        ) from None
    return typed_default(Parameter(name, ptype, required=not has_default, default=default or None))


# ---------------------------------------------------------------- file names

DEFAULT_FILENAME = "{name}_{date}"
MAX_FILENAME_TEMPLATE_CHARS = 200
# What every template may use besides the subject's parameters (which these shadow).
FILENAME_FIELDS = ("name", "date", "time", "format")


def check_filename_template(
    template: str, parameters: Sequence[str], *, field: str = "filename_template"
) -> str:
    """The template, stripped, if every `{placeholder}` in it is one of FILENAME_FIELDS or a
    parameter's name; refused naming the first unknown one otherwise."""
    text = template.strip()
    if not text:
        raise InvalidRequestError("a file name template cannot be empty", field=field)
    if len(text) > MAX_FILENAME_TEMPLATE_CHARS:
        raise InvalidRequestError(
            f"a file name template has at most {MAX_FILENAME_TEMPLATE_CHARS} characters",
            field=field,
        )
    known = set(FILENAME_FIELDS) | set(parameters)
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError:
        raise InvalidRequestError(
            "the file name template has an unmatched { or }; write {{ or }} for the character",
            field=field,
        ) from None
    for _literal, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in known:
            choices = ", ".join("{" + n + "}" for n in (*FILENAME_FIELDS, *parameters))
            raise InvalidRequestError(
                f"unknown placeholder {{{name}}} in the file name template (known: {choices})",
                field=field,
            )
        if spec or conversion:
            raise InvalidRequestError(
                f"write {{{name}}} without a format or conversion", field=field
            )
    return text


def export_filename(
    template: str | None,
    *,
    name: str,
    fmt: str,
    extension: str,
    values: Mapping[str, Any],
    at: dt.datetime,
) -> str:
    """The file name of an export, fixed when it is requested: the template filled with the
    subject's name, the request's date (`2026-12-02`, UTC) and time (`104100`), the format
    and the parameters' values, made safe as every file name is, with the format's
    extension. A placeholder without a value (an optional parameter left out) is empty."""
    filled: dict[str, Any] = {k: "" if v is None else to_json_value(v) for k, v in values.items()}
    filled |= {"name": name, "date": f"{at:%Y-%m-%d}", "time": f"{at:%H%M%S}", "format": fmt}
    text = ""
    for literal, placeholder, _spec, _conversion in string.Formatter().parse(
        template or DEFAULT_FILENAME
    ):
        text += literal
        if placeholder is not None:  # a value's own edge punctuation would pile up at a "_"
            text += str(filled.get(placeholder, "")).strip(" -._/\\")
    return safe_filename(text, extension)
