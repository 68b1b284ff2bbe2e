"""Field types that several resources' requests share: parameter values and names, references
to a query or report, the format choice, export options; and how a change documents its
members."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    WithJsonSchema,
)

from qexport.domain.formats import QUERY_FORMATS, REPORT_FORMATS
from qexport.domain.queries import MAX_PARAMETER_CHARS
from qexport.services.subjects import MAX_PARAMETERS, MAX_REF_CHARS

_INT64 = 2**63


def _scalar(value: Any) -> Any:
    """JSON scalars only, of bounded size: what a typed query parameter can take."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError("integers must fit in 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("numbers must be finite")
        return value
    if isinstance(value, str):
        if len(value) > MAX_PARAMETER_CHARS:
            raise ValueError(f"at most {MAX_PARAMETER_CHARS} characters")
        return value
    raise ValueError("a parameter value is a string, number, boolean or null")


ParameterValue = Annotated[
    Any,
    AfterValidator(_scalar),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "maxLength": MAX_PARAMETER_CHARS},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "null"},
            ]
        }
    ),
]
ParameterName = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Ref = Annotated[str, StringConstraints(min_length=1, max_length=MAX_REF_CHARS)]


class ExportOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    neutralize_formulas: StrictBool = Field(
        True, description="Prefix formula-looking text cells in spreadsheet formats."
    )


# The query formats, then the formats only a report takes.
ANY_FORMAT: tuple[str, ...] = (*QUERY_FORMATS, *sorted(REPORT_FORMATS - set(QUERY_FORMATS)))

# A constraint belongs on the type it limits, inside the union: given to a field typed
# `X | SkipJsonSchema[None]`, pydantic checks it on null too and fails with a TypeError (a 500).
Parameters = Annotated[dict[ParameterName, ParameterValue], Field(max_length=MAX_PARAMETERS)]


def without_defaults(schema: dict[str, Any]) -> None:
    """A member left out of a change keeps its value: no default to document."""
    for member in schema.get("properties", {}).values():
        member.pop("default", None)
