"""What the new-export and schedule forms export: a query or a report the person may read
(`query:ID` or `report:ID` in a form), the formats it takes, and one typed input per parameter
it asks for (`p.NAME`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.commands import SubjectKind, SubjectRef
from qexport.domain.failures import NotFoundError
from qexport.domain.formats import QUERY_FORMATS, REPORT_FORMATS
from qexport.domain.queries import ParamType, to_json_value
from qexport.services.subjects import Subject, readable_subject

INPUT_TYPES = {
    ParamType.INTEGER: "number",
    ParamType.NUMBER: "number",
    ParamType.DATE: "date",
    ParamType.BOOLEAN: "checkbox",
    ParamType.STRING: "text",
}
PARAM_PREFIX = "p."
# Every format, each with the kinds of subject that take it (for the script that narrows the
# choice as soon as a subject is picked).
ALL_FORMATS: tuple[tuple[str, str], ...] = tuple(
    (
        f,
        " ".join(
            k for k, names in (("query", QUERY_FORMATS), ("report", REPORT_FORMATS)) if f in names
        ),
    )
    for f in (*QUERY_FORMATS, *sorted(REPORT_FORMATS - set(QUERY_FORMATS)))
)
_TRUE_WORDS = ("true", "1", "yes", "on")


def subject_of(context: Container, principal: Principal, ref: str) -> Subject | None:
    """The query or report a form names (`query:ID`, `report:ID`), if the person may read it
    (every query of a report included); None for an empty, malformed, missing or unreadable
    one."""
    kind, _, ident = ref[:300].partition(":")
    if not ident or kind not in ("query", "report"):
        return None
    try:
        return readable_subject(
            context.catalog, principal.requester, SubjectRef(cast(SubjectKind, kind), ident)
        )
    except NotFoundError:
        return None


def _shown(value: Any) -> str:
    shown = to_json_value(value)
    return str(shown).lower() if isinstance(shown, bool) else str(shown)


def param_inputs(subject: Subject | None, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One input per parameter, typed (a date picker for a date, a checkbox for a boolean),
    holding the value given or else the parameter's default."""
    if subject is None:
        return []
    found = []
    for p in subject.parameters:
        given = values.get(p.name)
        value = _shown(given) if given is not None else "" if p.default is None else p.default
        found.append(
            {
                "name": p.name,
                "id": f"param-{p.name}",
                "type": p.type.value,
                "input": INPUT_TYPES[p.type],
                "step": "1" if p.type is ParamType.INTEGER else "any",
                "required": p.required and p.default is None,
                "value": str(value),
                "checked": str(value).strip().lower() in _TRUE_WORDS,
            }
        )
    return found


def given_parameters(subject: Subject, typed: Mapping[str, str]) -> dict[str, Any]:
    """The values a form gives for the subject's parameters (`typed`: as `typed_values` reads
    them): an empty input gives none (the default applies); a checkbox the form showed and
    that was not ticked gives false."""
    given: dict[str, Any] = {}
    for param in subject.parameters:
        raw = typed.get(param.name)
        if param.type is ParamType.BOOLEAN and raw is not None:
            given[param.name] = raw == "true"
        elif raw is not None and raw.strip():
            given[param.name] = raw
    return given


# A form that shows a subject's parameter inputs says whose (`<input type=hidden
# name=params_of value=query:ID>`): an unticked checkbox sends nothing, so only then is a
# missing box known to be a "no" rather than an input the form never showed.
PARAMS_OF = "params_of"


def typed_values(subject: Subject | None, form: Mapping[str, str]) -> dict[str, str]:
    """The subject's parameter inputs of a submitted form (`p.NAME`), as typed, a box shown
    and not ticked as "false"; those the form did not show (a subject just chosen) are left
    out."""
    if subject is None:
        return {}
    shown = form.get(PARAMS_OF) == subject.ref
    typed: dict[str, str] = {}
    for param in subject.parameters:
        name = PARAM_PREFIX + param.name
        if name in form:
            typed[param.name] = form[name]
        elif shown and param.type is ParamType.BOOLEAN:
            typed[param.name] = "false"
    return typed


def param_field(field: str | None, subject: Subject | None) -> str | None:
    """The input a refusal of `parameters.NAME` is shown on (`param-NAME`); None if the
    subject asks for no such parameter."""
    named = field or ""
    if subject is None or not named.startswith("parameters."):
        return None
    name = named.removeprefix("parameters.")
    return f"param-{name}" if any(p.name == name for p in subject.parameters) else None
