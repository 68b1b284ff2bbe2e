"""Schedules created, changed, shown and listed; the key webhooks are signed with; members'
subscriptions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema

from qexport.api.schemas.fields import (
    ANY_FORMAT,
    ExportOptions,
    ParameterName,
    Parameters,
    ParameterValue,
    Ref,
    without_defaults,
)
from qexport.api.schemas.recipients import Recipient, Recipients
from qexport.domain.schedules import MAX_CRON_CHARS
from qexport.services.subjects import MAX_PARAMETERS

MissedChoice = Literal["once", "skip"]
# A schedule's values are checked by services/schedules/checks.py all together, so that a 422
# lists every mistake at once in the form's order; these types document the rules they check.
Cron = Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_CRON_CHARS})]
TimeZoneName = Annotated[str, WithJsonSchema({"type": "string", "maxLength": 64})]
FormatName = Annotated[
    str, WithJsonSchema({"type": "string", "maxLength": 20, "enum": list(ANY_FORMAT)})
]
MissedText = Annotated[str, WithJsonSchema({"type": "string", "enum": ["once", "skip"]})]
_CRON_HELP = (
    "5 fields (minute hour day-of-month month day-of-week) on the wall clock of `timezone`;"
    " a time skipped by a daylight-saving change fires right after it, a repeated one once"
)
_TIMEZONE_HELP = "An IANA time zone; by default the workspace's (else UTC)"
_MISSED_HELP = 'After downtime: "once" fires one export for all the due times missed, "skip" none'
_FORMAT_HELP = "Queries: csv, tsv, jsonl, parquet, xlsx; reports: pdf, xlsx, html"


class ScheduleRequest(BaseModel):
    """A new schedule: exactly one of `query_id` and `report_id`. Its exports run with the
    rights of its owner, the caller."""

    model_config = ConfigDict(extra="forbid")

    query_id: Ref | None = None
    report_id: Ref | None = None
    format: FormatName = Field(description=_FORMAT_HELP)
    parameters: dict[ParameterName, ParameterValue] = Field(
        default_factory=dict, max_length=MAX_PARAMETERS
    )
    cron: Cron = Field(description=_CRON_HELP, examples=["0 8 * * 1"])
    timezone: TimeZoneName | None = Field(
        None, description=_TIMEZONE_HELP, examples=["Europe/Berlin"]
    )
    recipients: Recipients = Field(default_factory=list)
    missed: MissedText = Field("once", description=_MISSED_HELP)
    enabled: StrictBool = True
    options: ExportOptions = ExportOptions(neutralize_formulas=True)
    filename_template: str | None = Field(
        None,
        max_length=200,
        description="How its exports' files are named: {name}, {date}, {time}, {format} and the"
        " subject's parameters ({since}); null: the query's own template",
        examples=["{name}_{since}_{date}"],
    )


class ScheduleChange(BaseModel):
    """The settings to change; members left out keep their value. A `query_id` replaces a
    report and a `report_id` a query; a null `timezone` means the workspace's, a null
    `filename_template` the query's. Only these four may be null."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=without_defaults)

    query_id: Ref | None = Field(
        None, description="A query to export instead; null only beside a `report_id`"
    )
    report_id: Ref | None = Field(
        None, description="A report to export instead; null only beside a `query_id`"
    )
    format: FormatName | SkipJsonSchema[None] = Field(None, description=_FORMAT_HELP)
    parameters: Parameters | SkipJsonSchema[None] = None
    cron: Cron | SkipJsonSchema[None] = Field(
        None, description=_CRON_HELP, examples=["30 7 * * 1-5"]
    )
    timezone: TimeZoneName | None = Field(
        None, description=_TIMEZONE_HELP, examples=["America/New_York"]
    )
    recipients: Recipients | SkipJsonSchema[None] = None
    missed: MissedText | SkipJsonSchema[None] = Field(None, description=_MISSED_HELP)
    enabled: StrictBool | SkipJsonSchema[None] = Field(
        None, description="false pauses the schedule; true resumes it from now on"
    )
    options: ExportOptions | SkipJsonSchema[None] = None
    filename_template: str | None = Field(
        None,
        max_length=200,
        description="How its exports' files are named: {name}, {date}, {time}, {format} and the"
        " subject's parameters ({since}); null: the query's own template",
        examples=["{name}_{since}_{date}"],
    )


class Schedule(BaseModel):
    """A schedule; exactly one of `query_id` and `report_id` is set."""

    id: str
    query_id: str | None
    report_id: str | None
    format: str
    parameters: dict[str, Any]
    cron: str = Field(examples=["0 8 * * 1"])
    timezone: str = Field(examples=["Europe/Berlin"])
    recipients: list[Recipient]
    missed: MissedChoice
    enabled: bool
    options: ExportOptions
    owner: str = Field(description="Whose rights its exports run with: its creator")
    next_run_at: datetime | None = Field(description="The next due time (UTC); null when paused")
    created_at: datetime
    subscribed: bool = Field(
        default=False,
        description="Whether you subscribed: each run's export is also mailed to your address",
    )
    filename_template: str | None = Field(
        None, description="How its exports' files are named; null: its subject's template"
    )


class ScheduleList(BaseModel):
    items: list[Schedule]


class SigningKey(BaseModel):
    """The key webhook receivers verify `X-QExport-Signature` with: hex HMAC-SHA256 over
    `t + "." + body`, keyed with this string's UTF-8 bytes."""

    workspace: str
    key: str


class Subscription(BaseModel):
    """Your subscription to a schedule: each run's export mailed to your own address too."""

    model_config = ConfigDict(extra="forbid")

    schedule_id: str
    subscribed: bool
    email: str | None = Field(description="Where each run's export is mailed to you")
