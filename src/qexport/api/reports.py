"""`/api/v1/reports`: reports of several queries, written by editors and admins, read as
visibility allows (the same rule as for queries)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.config import JsonDict

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.fields import ParameterName, ParameterValue
from qexport.api.schemas.problems import problem_responses
from qexport.domain.commands import ReportDraft, SaveReport
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import Visibility
from qexport.domain.reports import (
    DEFAULT_ROW_CAP,
    MAX_COLUMN_NAME_CHARS,
    MAX_ROW_CAP,
    MAX_SECTIONS,
    MAX_VALUE_COLUMNS,
    Display,
    Report,
    Section,
)
from qexport.http.one_hop import OneHopRoute
from qexport.services import reports as service
from qexport.services.queries import MAX_MEMBERS
from qexport.services.subjects import MAX_PARAMETERS
from qexport.services.views import report_view

router = APIRouter(route_class=OneHopRoute, prefix="/reports", tags=["reports"])

DisplayName = Literal["table", "bar", "line"]
# Checked with the rest of the report (every mistake of a body at once, services/reports.py);
# the schema documents the rules.
ColumnName = Annotated[
    str, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_COLUMN_NAME_CHARS})
]


def _bounded(low: int, high: int) -> JsonDict:
    return {"minLength": low, "maxLength": high}


class SectionSpec(BaseModel):
    """One section: a query's result shown as a table or a chart."""

    model_config = ConfigDict(extra="forbid")

    heading: str = Field(json_schema_extra=_bounded(1, service.MAX_HEADING_CHARS))
    query_id: str = Field(json_schema_extra=_bounded(1, service.MAX_ID_CHARS))
    parameters: dict[ParameterName, ParameterValue] = Field(
        default_factory=dict,
        max_length=MAX_PARAMETERS,
        description="Values fixed by the report; the query's other parameters come from the"
        " export request (or their defaults)",
    )
    display: str = Field(
        default="table",
        description='"bar" and "line": the first column labels the x axis; each value column'
        " is a series, or each distinct value of the series column is",
        json_schema_extra={"enum": [d.value for d in Display]},
    )
    row_cap: int = Field(
        default=DEFAULT_ROW_CAP,
        description="Rows shown at most",
        json_schema_extra={"minimum": 1, "maximum": MAX_ROW_CAP},
    )
    series: ColumnName | None = Field(
        default=None,
        description="Charts: the column whose distinct values are the series (a line or bars"
        ' each), e.g. "category"; beyond 7, the 6 largest and "other"',
    )
    values: list[ColumnName] = Field(
        default_factory=list,
        description="Charts: the numeric columns drawn (default: every numeric column after"
        " the first); measures of different scales are drawn in panels of their own",
        json_schema_extra={"maxItems": MAX_VALUE_COLUMNS},
    )

    def section(self, index: int, found: list[InvalidRequestError]) -> Section:
        """The section; a display no section has is added to `found` (a stand-in keeps the
        other checks running)."""
        try:
            display = Display(self.display)
        except ValueError:
            found.append(
                InvalidRequestError(
                    f"unknown display {self.display[:40]!r} (choose from table, bar, line)",
                    field=f"sections.{index}.display",
                )
            )
            chart = self.series is not None or bool(self.values)
            display = Display.BAR if chart else Display.TABLE
        return Section(
            heading=self.heading,
            query_id=self.query_id,
            parameters=dict(self.parameters),
            display=display,
            row_cap=self.row_cap,
            series=self.series,
            values=tuple(self.values),
        )


class ReportWrite(BaseModel):
    """A report as written: created with POST, replaced whole with PUT. Its values are checked
    together, so that a 422 lists every mistake (`errors`) in the order title, description,
    sections (each in its own order), visibility, members."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(
        examples=["monthly sales"], json_schema_extra=_bounded(1, service.MAX_TITLE_CHARS)
    )
    description: str = Field(
        default="", json_schema_extra={"maxLength": service.MAX_DESCRIPTION_CHARS}
    )
    sections: list[SectionSpec] = Field(json_schema_extra={"minItems": 1, "maxItems": MAX_SECTIONS})
    visibility: str = Field(
        default="workspace",
        description='"workspace": every member reads it; "members": only `members` and its owner',
        json_schema_extra={"enum": [v.value for v in Visibility]},
    )
    members: list[Annotated[str, WithJsonSchema({"type": "string", "maxLength": 200})]] = Field(
        default_factory=list,
        description='User ids of workspace members, with "visibility": "members"',
        json_schema_extra={"maxItems": MAX_MEMBERS},
    )

    def draft(self) -> tuple[ReportDraft, list[InvalidRequestError]]:
        """The draft, and the problems found reading it (see SectionSpec.section)."""
        found: list[InvalidRequestError] = []
        sections = tuple(s.section(i, found) for i, s in enumerate(self.sections))
        try:
            visibility = Visibility(self.visibility)
        except ValueError:
            found.append(
                InvalidRequestError('visibility is "workspace" or "members"', field="visibility")
            )
            visibility = Visibility.MEMBERS if self.members else Visibility.WORKSPACE
        draft = ReportDraft(
            title=self.title,
            description=self.description,
            sections=sections,
            visibility=visibility,
            members=frozenset(self.members),
        )
        return draft, found


class SectionView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    heading: str
    query_id: str
    parameters: dict[str, ParameterValue]
    display: DisplayName
    row_cap: int
    series: str | None
    values: list[str]


class ReportView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    description: str
    sections: list[SectionView]
    visibility: Literal["workspace", "members"]
    members: list[str] = Field(description="Who reads it besides its owner, when not everyone")
    owner: str | None

    @classmethod
    def of(cls, report: Report) -> ReportView:
        return cls.model_validate(report_view(report))


class ReportList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[ReportView]


@router.post(
    "",
    status_code=201,
    response_model=ReportView,
    responses=problem_responses(400, 401, 403, 413, 422, 503),
    summary="Save a report (editors and admins)",
)
def create_report(
    body: ReportWrite,
    principal: CurrentPrincipal,
    context: Context,
    request: Request,
    response: Response,
) -> ReportView:
    draft, found = body.draft()
    report = service.save_report(context, principal, SaveReport(draft, found=tuple(found)))
    response.headers["Location"] = request.app.url_path_for("read_report", report_id=report.id)
    return ReportView.of(report)


@router.get(
    "",
    response_model=ReportList,
    responses=problem_responses(401, 503),
    summary="The reports you can read",
)
def list_reports(principal: CurrentPrincipal, context: Context) -> ReportList:
    found = service.list_readable_reports(context.catalog, principal)
    return ReportList(items=[ReportView.of(r) for r in found])


@router.get(
    "/{report_id}",
    response_model=ReportView,
    responses=problem_responses(401, 404, 503),
    summary="One report (404 when missing or not visible to you)",
)
def read_report(report_id: str, principal: CurrentPrincipal, context: Context) -> ReportView:
    return ReportView.of(service.get_readable_report(context.catalog, principal, report_id))


@router.put(
    "/{report_id}",
    response_model=ReportView,
    responses=problem_responses(400, 401, 403, 404, 413, 422, 503),
    summary="Replace a report whole (editors and admins); its owner stays",
)
def replace_report(
    report_id: str, body: ReportWrite, principal: CurrentPrincipal, context: Context
) -> ReportView:
    draft, found = body.draft()
    report = service.save_report(context, principal, SaveReport(draft, report_id, tuple(found)))
    return ReportView.of(report)


@router.delete(
    "/{report_id}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(401, 403, 404, 503),
    summary="Delete a report (editors and admins); its unsettled exports fail access_lost",
)
def delete_report(report_id: str, principal: CurrentPrincipal, context: Context) -> Response:
    service.delete_report(context.catalog, principal, report_id)
    return Response(status_code=204)
